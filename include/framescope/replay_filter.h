// framescope/replay_filter.h: events left out when a trace is read (min_duration_ns).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

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

  /// Host code (framescope._host_code): what the program's host ran (a Jupyter kernel, pytest,
  /// framescope itself), told apart from the program's own code by each symbol's class, decided
  /// once per symbol by whoever reads the trace, never while recording.
  enum class HostMode : uint8_t {
    kNone,  ///< no classification
    kMark,  ///< host slices are reported with Slice::host set (writers: category "host")
    kFold,  ///< ... and with symbol `host_symbol`: every host frame is one "[host]" key
    kDrop,  ///< host slices are left out, what they enclose kept (renumbered, re-parented)
  };
  /// Per symbol: 0 the program's code, 1 host code, 2 the class of the slice around it (the
  /// standard library, builtins: host when the host called them). Symbols past the end are 2.
  /// At a thread's root, class 2 is the program's. Ranges (not Python frames or builtins) are
  /// the program's unless their class is 1.
  std::shared_ptr<const std::vector<uint8_t>> symbol_classes;
  HostMode host_mode = HostMode::kNone;
  uint32_t host_symbol = 0;  ///< the "[host]" symbol (kFold)

  bool active() const noexcept {
    return min_duration_ns > 0 || max_depth > 0 || host_mode != HostMode::kNone;
  }
  bool drops() const noexcept { return min_duration_ns > 0 || max_depth > 0; }
};

/// Wraps `downstream` so that it sees the replay with `filter` applied (host slices marked or
/// folded after the short and deep ones are left out): events renumbered
/// densely in the order they begin (Slice::index, parent and depth as if the left-out events had
/// never been recorded), still in time order per thread. One replay at a time; `downstream` must
/// outlive the returned visitor.
std::unique_ptr<TraceVisitor> make_filtering_visitor(TraceVisitor& downstream,
                                                     const ReplayFilter& filter);

}  // namespace framescope
