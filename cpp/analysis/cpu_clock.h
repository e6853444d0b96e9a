// cpp/analysis/cpu_clock.h: a thread's CPU time at any moment, interpolated from its readings.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "framescope/trace.h"

namespace framescope::analysis {

/// Reads a thread's CPU clock at times of the trace, linearly interpolated between the sampler's
/// readings (ThreadInfo::cpu_samples); before the first reading it reads as the first, after the
/// last as the last (the thread's CPU time there is unknown and counted as none). Queries are
/// cheapest in nondecreasing time order (a cursor moves forward), as a replay makes them; any
/// order is correct. Holds a reference to the readings.
class CpuClock {
 public:
  explicit CpuClock(const std::vector<CpuSample>& samples) : s_(samples) {}

  /// False when the thread has no readings (the session did not sample CPU time).
  bool known() const noexcept { return !s_.empty(); }

  /// CPU ns the thread had used at `t_ns`; 0 when unknown.
  int64_t at(int64_t t_ns) noexcept {
    if (s_.empty()) return 0;
    if (t_ns <= s_.front().time_ns) return s_.front().cpu_ns;
    if (t_ns >= s_.back().time_ns) return s_.back().cpu_ns;
    // Find i_ with s_[i_].time_ns < t_ns <= s_[i_ + 1].time_ns: forward from the last query, or
    // by bisection when the time went back.
    if (s_[i_].time_ns >= t_ns) {
      auto it = std::lower_bound(s_.begin(), s_.begin() + long(i_) + 1, t_ns,
                                 [](const CpuSample& c, int64_t t) { return c.time_ns < t; });
      i_ = size_t(it - s_.begin()) - 1;
    }
    while (s_[i_ + 1].time_ns < t_ns) ++i_;
    const CpuSample& a = s_[i_];
    if (rate_of_ != i_) {
      // The rate between two readings, once per pair: replays ask for many moments between
      // the same two readings (ms apart), and a division per query was ~10% of a replay.
      const CpuSample& b = s_[i_ + 1];
      rate_ = double(b.cpu_ns - a.cpu_ns) / double(b.time_ns - a.time_ns);
      rate_of_ = i_;
    }
    return a.cpu_ns + int64_t(double(t_ns - a.time_ns) * rate_ + 0.5);
  }

  /// CPU ns used between two moments whose clock readings are `cpu_start` and `cpu_end`
  /// (from at()), never more than the wall time between them: readings are taken a little
  /// after the moment they are stamped with, which can otherwise show a rate above one.
  static int64_t used(int64_t cpu_start, int64_t cpu_end, int64_t wall_ns) noexcept {
    const int64_t cpu = cpu_end - cpu_start;
    return cpu < 0 ? 0 : (cpu > wall_ns ? wall_ns : cpu);
  }

 private:
  const std::vector<CpuSample>& s_;
  size_t i_ = 0;
  size_t rate_of_ = SIZE_MAX;  // the reading rate_ starts at
  double rate_ = 0;            // CPU ns per ns from s_[rate_of_] to the next reading
};

}  // namespace framescope::analysis
