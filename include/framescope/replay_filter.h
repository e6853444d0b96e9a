// framescope/replay_filter.h: events left out when a trace is read (min_duration_ns).
#pragma once

#include <cstdint>
#include <memory>

#include "framescope/trace_visitor.h"

namespace framescope {

/// What readers of a trace leave out. Plain value type.
struct ReplayFilter {
  /// Slices (and ranges ended on another thread) shorter than this are left out, with what
  /// they enclose (which is shorter still). Marks and memory samples inside a left-out slice
  /// are kept, as events of the nearest kept slice around it.
  int64_t min_duration_ns = 0;
  /// Slices at this depth or deeper (events enclosing them, Python frames and ranges alike)
  /// are left out, with what they enclose; marks and memory samples in them are kept as above.
  /// 0: no limit.
  uint32_t max_depth = 0;

  bool active() const noexcept { return min_duration_ns > 0 || max_depth > 0; }
};

/// Wraps `downstream` so that it sees the replay with `filter` applied: events renumbered
/// densely in the order they begin (Slice::index, parent and depth as if the left-out events had
/// never been recorded), still in time order per thread. One replay at a time; `downstream` must
/// outlive the returned visitor.
std::unique_ptr<TraceVisitor> make_filtering_visitor(TraceVisitor& downstream,
                                                     const ReplayFilter& filter);

}  // namespace framescope
