// cpp/analysis/open_slice_time.h: the one rule for child and self time while slices are open.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu_clock.h"
#include "saturating.h"

namespace framescope::analysis {

/// What a replay visitor keeps per open slice to split time into self and child time (used by
/// key_averages and the columnar batches, which must agree to the nanosecond). Visitors derive
/// their open-slice record from it. Value type.
struct OpenSliceTime {
  uint64_t index = 0;
  int64_t parent = -1;  ///< the open slice it is a child of now (hand_over_open_children)
  int64_t start_ns = 0;
  int64_t cpu_start = 0;    ///< the thread's CPU clock at start_ns (0 without a clock)
  int64_t charged_ns = 0;   ///< its time already charged to parents that ended before it
  int64_t charged_cpu = 0;  ///< the same, on CPU
  int64_t child_ns = 0;     ///< time of its children (so far)
  int64_t child_cpu = 0;
};

/// The slice stack[at] ends at `end_ns` while some of its children are still open: a range begun
/// in a function and ended after it returned, on the same thread. Each instant's time belongs to
/// the innermost open slice, so it keeps as child time the part of them that lay inside it, and
/// from then on they are children of its parent (which takes the rest when they end). Charging
/// it with a child's whole duration instead counted the child's time after it ended twice: as
/// the child's own self time and in the self time of its parent. `clock`: the thread's CPU clock
/// or null. `Open` derives from OpenSliceTime.
template <class Open>
void hand_over_open_children(std::vector<Open>& stack, size_t at, int64_t end_ns, CpuClock* clock) {
  OpenSliceTime& o = stack[at];
  for (size_t j = at + 1; j < stack.size(); ++j) {
    OpenSliceTime& c = stack[j];
    if (c.parent != int64_t(o.index)) continue;
    const int64_t so_far = std::max<int64_t>(0, end_ns - c.start_ns);
    const int64_t inside = std::max<int64_t>(0, so_far - c.charged_ns);
    o.child_ns = internal::sat_add(o.child_ns, inside);
    c.charged_ns = internal::sat_add(c.charged_ns, inside);
    if (clock) {
      const int64_t cpu_so_far = CpuClock::used(c.cpu_start, clock->at(end_ns), so_far);
      const int64_t cpu_inside = std::max<int64_t>(0, cpu_so_far - c.charged_cpu);
      o.child_cpu = internal::sat_add(o.child_cpu, cpu_inside);
      c.charged_cpu = internal::sat_add(c.charged_cpu, cpu_inside);
    }
    c.parent = o.parent;
  }
}

/// Charges the ended slice `o` (its duration `dur`, its CPU time `cpu`, -1 when unknown) to its
/// parent `p`: less what parents that ended before `o` were charged (hand_over_open_children).
inline void charge_parent(OpenSliceTime& p, const OpenSliceTime& o, int64_t dur, int64_t cpu) {
  p.child_ns = internal::sat_add(p.child_ns, std::max<int64_t>(0, dur - o.charged_ns));
  if (cpu >= 0) {
    p.child_cpu = internal::sat_add(p.child_cpu, std::max<int64_t>(0, cpu - o.charged_cpu));
  }
}

}  // namespace framescope::analysis
