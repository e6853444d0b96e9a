// cpp/core/utf8.h: checking and repairing UTF-8 where names enter the core (C ABI, Python).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace framescope::internal {

/// True when `s` is well-formed UTF-8 (Unicode 15, table 3-7: no overlong forms, surrogates or
/// code points above U+10FFFF). NUL bytes are well formed. Thread-safe, never throws.
bool is_valid_utf8(std::string_view s) noexcept;

/// `s` with each ill-formed subsequence replaced by U+FFFD, one per maximal subpart (Unicode's
/// recommended practice, which Python's "replace" decoder follows too). Returns `s` as is when it
/// is well formed. Throws std::bad_alloc only.
std::string to_valid_utf8(std::string_view s);

/// Appends the UTF-8 form of code point `cp` to `out`, U+FFFD for surrogates and values above
/// U+10FFFF. Throws std::bad_alloc only.
void append_code_point(std::string& out, uint32_t cp);

}  // namespace framescope::internal
