// cpp/core/saturating.h: saturating arithmetic for totals over hand-made or loaded traces.
#pragma once

#include <cstdint>

namespace framescope::internal {

/// a + b, clamped to [INT64_MIN, INT64_MAX]: totals over hand-made, loaded or merged traces
/// (any int64 times and durations) must not overflow. Thread-safe, never fails.
inline int64_t sat_add(int64_t a, int64_t b) noexcept {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return b > 0 ? INT64_MAX : INT64_MIN;
  return r;
}

}  // namespace framescope::internal
