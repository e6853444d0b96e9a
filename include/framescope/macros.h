// framescope/macros.h: compiler helpers shared by the public headers.
#pragma once

#define FRAMESCOPE_LIKELY(x) __builtin_expect(!!(x), 1)
#define FRAMESCOPE_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define FRAMESCOPE_ALWAYS_INLINE inline __attribute__((always_inline))
#define FRAMESCOPE_NOINLINE __attribute__((noinline))
/// On the declaration of a global that only the library that defines it reads (never a header's
/// inline code compiled into another binary): hidden visibility lets the compiler address it
/// relative to the instruction pointer, one load, where a default-visibility global takes two
/// (its address from the GOT, then the value). For the frame hook's hot path.
#define FRAMESCOPE_HIDDEN __attribute__((visibility("hidden")))
#define FRAMESCOPE_CONCAT_INNER(a, b) a##b
#define FRAMESCOPE_CONCAT(a, b) FRAMESCOPE_CONCAT_INNER(a, b)
#define FRAMESCOPE_UNIQUE(prefix) FRAMESCOPE_CONCAT(prefix, __LINE__)

/// Build-time switch: define FRAMESCOPE_DISABLE to compile every FRAMESCOPE_* range macro to
/// nothing (the functions stay available).
#ifndef FRAMESCOPE_DISABLE
#define FRAMESCOPE_ENABLED 1
#else
#define FRAMESCOPE_ENABLED 0
#endif
