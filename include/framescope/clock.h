// framescope/clock.h: the hot-path timestamp (TSC ticks) and its conversion to nanoseconds.
#pragma once

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define FRAMESCOPE_HAVE_TSC 1
#else
#include <time.h>
#define FRAMESCOPE_HAVE_TSC 0
#endif

namespace framescope {

/// Reads the raw timestamp used on every hot path: the TSC on x86, CLOCK_MONOTONIC ns elsewhere.
/// Ticks are converted to nanoseconds only at session stop (see ClockConverter). Thread-safe,
/// never fails. When the TSC is not invariant, sessions fall back to `monotonic_ns()` values
/// (see `tsc_is_reliable()`), so callers must obtain ticks through `now_ticks()` only.
inline uint64_t read_tsc() noexcept {
#if FRAMESCOPE_HAVE_TSC
  return __rdtsc();
#else
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
#endif
}

/// CLOCK_MONOTONIC in nanoseconds. Thread-safe, never fails.
uint64_t monotonic_ns() noexcept;

/// True when the TSC is invariant (constant rate, keeps ticking in idle states) and so can be
/// used as the session clock. Computed once; thread-safe.
bool tsc_is_reliable() noexcept;

namespace internal {
/// Set once at start-up: 1 when ticks are TSC values, 0 when they are monotonic ns.
extern bool g_use_tsc;
}  // namespace internal

/// The timestamp stored in events: TSC ticks when reliable, otherwise monotonic nanoseconds.
/// Always inlined: GCC otherwise leaves it out of line in large hot functions (the frame hook).
__attribute__((always_inline)) inline uint64_t now_ticks() noexcept {
#if FRAMESCOPE_HAVE_TSC
  if (__builtin_expect(internal::g_use_tsc, 1)) return __rdtsc();
  return monotonic_ns();
#else
  return read_tsc();
#endif
}

/// Linear map from ticks to CLOCK_MONOTONIC nanoseconds, fitted from two (ticks, ns) samples
/// taken at session start and stop. Value type; thread-safe to read once built.
class ClockConverter {
 public:
  /// Takes the first calibration sample (call at session start).
  static ClockConverter start() noexcept;
  /// Takes the second sample and fixes the rate (call at session stop). Idempotent.
  void finish() noexcept;
  /// Converts ticks to monotonic nanoseconds. Valid after `finish()`.
  int64_t to_ns(uint64_t ticks) const noexcept;
  /// Ticks per nanosecond measured for this session (1.0 when ticks are nanoseconds).
  double ticks_per_ns() const noexcept { return ticks_per_ns_; }

  /// The calibration as plain values (saved traces keep it); `from_calibration` rebuilds an
  /// equivalent finished converter. Used by the trace file format.
  struct Calibration {
    uint64_t start_ticks = 0;
    uint64_t start_ns = 0;
    double ticks_per_ns = 1.0;
    bool ticks_are_ns = true;
  };
  Calibration calibration() const noexcept {
    return {start_ticks_, start_ns_, ticks_per_ns_, ticks_are_ns_};
  }
  static ClockConverter from_calibration(const Calibration& c) noexcept {
    ClockConverter out;
    out.start_ticks_ = c.start_ticks;
    out.start_ns_ = c.start_ns;
    out.ticks_per_ns_ = c.ticks_per_ns;
    out.ticks_are_ns_ = c.ticks_are_ns;
    out.finished_ = true;
    return out;
  }

 private:
  uint64_t start_ticks_ = 0;
  uint64_t start_ns_ = 0;
  double ticks_per_ns_ = 1.0;
  bool ticks_are_ns_ = true;
  bool finished_ = false;
};

}  // namespace framescope
