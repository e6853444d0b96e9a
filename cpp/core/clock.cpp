// cpp/core/clock.cpp: TSC reliability detection and tick -> nanosecond calibration.
#include "framescope/clock.h"

#include <time.h>

#include <cstring>
#include <fstream>
#include <string>

#if FRAMESCOPE_HAVE_TSC
#include <cpuid.h>
#endif

namespace framescope {

uint64_t monotonic_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

namespace {

bool detect_tsc() noexcept {
#if FRAMESCOPE_HAVE_TSC
  // CPUID 0x80000007 EDX bit 8 = invariant TSC. Hypervisors (KVM included) often hide it while
  // still exposing a stable TSC, so /proc/cpuinfo's constant_tsc + nonstop_tsc also counts.
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0x80000000u, &a, &b, &c, &d) && a >= 0x80000007u) {
    if (__get_cpuid(0x80000007u, &a, &b, &c, &d) && (d & (1u << 8))) return true;
  }
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) == 0) {
      return line.find(" constant_tsc") != std::string::npos &&
             line.find(" nonstop_tsc") != std::string::npos;
    }
  }
  return false;
#else
  return false;
#endif
}

}  // namespace

bool tsc_is_reliable() noexcept {
  static const bool reliable = detect_tsc();
  return reliable;
}

namespace internal {
bool g_use_tsc = tsc_is_reliable();
}  // namespace internal

namespace {
// Reads ticks and monotonic ns as close together as possible: the pair with the smallest
// ns gap around the tick read out of a few tries wins.
void paired_sample(uint64_t& ticks, uint64_t& ns) noexcept {
  uint64_t best_gap = ~0ull;
  for (int i = 0; i < 8; ++i) {
    uint64_t n0 = monotonic_ns();
    uint64_t t = now_ticks();
    uint64_t n1 = monotonic_ns();
    if (n1 - n0 < best_gap) {
      best_gap = n1 - n0;
      ticks = t;
      ns = n0 + (n1 - n0) / 2;
    }
  }
}
}  // namespace

ClockConverter ClockConverter::start() noexcept {
  ClockConverter c;
  c.ticks_are_ns_ = !internal::g_use_tsc;
  paired_sample(c.start_ticks_, c.start_ns_);
  return c;
}

void ClockConverter::finish() noexcept {
  if (finished_) return;
  finished_ = true;
  if (ticks_are_ns_) {
    ticks_per_ns_ = 1.0;
    return;
  }
  uint64_t t = 0, n = 0;
  paired_sample(t, n);
  // A very short session gives a noisy rate: extend the baseline to at least 2 ms.
  while (n - start_ns_ < 2000000) {
    struct timespec req = {0, 200000};
    nanosleep(&req, nullptr);
    paired_sample(t, n);
  }
  ticks_per_ns_ = double(t - start_ticks_) / double(n - start_ns_);
  if (!(ticks_per_ns_ > 0)) ticks_per_ns_ = 1.0;
}

int64_t ClockConverter::to_ns(uint64_t ticks) const noexcept {
  if (ticks_are_ns_) return int64_t(ticks);
  double delta = double(int64_t(ticks - start_ticks_)) / ticks_per_ns_;
  // Loaded traces may carry any calibration: keep the conversion defined (|delta| < 2^61 ns,
  // 73 years, is never reached by a real session; NaN maps to 0).
  constexpr double kLimit = double(int64_t(1) << 61);
  if (!(delta > -kLimit && delta < kLimit)) delta = delta > 0 ? kLimit : (delta < 0 ? -kLimit : 0);
  return int64_t(start_ns_) + int64_t(delta);
}

}  // namespace framescope
