// framescope/key_averages.h: torch.profiler's key_averages() over a replay: per-key totals.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framescope/trace_visitor.h"

namespace framescope {

/// How events are grouped into keys. Events are always told apart by name and category.
struct KeyAverageOptions {
  bool group_by_input_shape = false;  ///< ... and by the input shapes of ranges that have them
  uint32_t group_by_stack_n = 0;      ///< ... and by the innermost N Python frames around them
  bool group_by_thread = false;       ///< ... and by thread (the per-thread summary)
  /// torch's EventList._remove_dup_nodes: a range (op or user annotation) whose nearest
  /// enclosing range has the same name, and is that range's only range child, is not an event
  /// of its own (a dispatcher re-entering the same op, `record_function("x")` wrapping a
  /// function itself wrapped in "x"). It is not counted; when its key differs from the
  /// enclosing range's (other shapes or stack) its self time, self memory and CPU self time go
  /// to the enclosing range's key, as torch's parent absorbs it. Python frames and builtins
  /// between the two are transparent, as they are not events to torch. key_averages() sets it;
  /// the summary (which counts every call that ran) does not.
  bool merge_nested_same_name = false;
};

/// Totals of the events of one key. Times in ns; CPU times -1 when no event of the key ran on a
/// thread with CPU readings (ThreadInfo::cpu_samples). Plain value type.
struct KeyAverage {
  uint32_t symbol = 0;
  EventCategory category = EventCategory::kOther;
  int64_t thread = -1;  ///< thread index when grouped by thread, else -1
  /// torch's str() of the input shapes ("[[2, 3], []]") when grouped by input shape, else "".
  std::string input_shapes;
  /// Symbols of the innermost `group_by_stack_n` Python frames enclosing the events, innermost
  /// first (fewer near the root).
  std::vector<uint32_t> stack;
  uint64_t count = 0;
  /// Inclusive wall time. A call inside another call of the same key (recursion) is counted
  /// once, in the outermost one, as cProfile's cumtime: the total never exceeds the time the
  /// key's events covered.
  int64_t total_ns = 0;
  /// The events' time minus their direct children's; 0 for async entries (their time is held
  /// by the slices their thread ran meanwhile).
  int64_t self_ns = 0;
  int64_t cpu_total_ns = -1;  ///< on-CPU time of total_ns (interpolated CPU clock)
  int64_t cpu_self_ns = -1;   ///< on-CPU time of self_ns
  /// Bytes allocated (memory samples) inside the events, children included (outermost events
  /// only, as total_ns), and directly inside them.
  int64_t memory_total = 0;
  int64_t memory_self = 0;
  int64_t flops = 0;  ///< sum of the events' flops estimates (with_flops)
  /// Ranges ended on another thread (async spans): a key of their own, with the count, total
  /// and flops of those ranges but no self time, and no part in their thread's totals or in
  /// their parent's child time.
  bool is_async = false;
  bool top_level = false;  ///< the key's first event had no enclosing event (torch's cpu_parent)
};

/// Per-thread totals: the time its root events covered (the sum of every event's self time on
/// the thread, the denominator of the thread's percentages) and its CPU time there.
struct ThreadTotals {
  int64_t self_ns = 0;
  int64_t cpu_self_ns = -1;  ///< -1 without CPU readings
  bool cpu_known = false;
};

struct KeyAverages {
  std::vector<KeyAverage> entries;    ///< in the order keys were first seen
  std::vector<ThreadTotals> threads;  ///< by thread index
  bool has_cpu = false;               ///< some thread had CPU readings
  bool has_memory = false;            ///< the trace had memory samples
};

/// Aggregates one replay of `source`. Instants are not counted. Never throws for inconsistent
/// traces (a range ended after the frame it began in is charged to the frame's key as cProfile
/// would: its time leaves the frame's self time).
KeyAverages compute_key_averages(const TraceSource& source, const KeyAverageOptions& options = {});

/// Per-symbol call counts, inclusive and self time of a replay (`symbol_count` symbols), sorted
/// by self time (descending): compute_key_averages' accounting summed per symbol, the one
/// definition of self and total time (cpp/analysis/symbol_stats.cpp).
std::vector<SymbolStats> compute_stats(const TraceSource& source, size_t symbol_count);

/// torch's str() of a range's inputs as shapes: "[[2, 3], [], [4]]" (non-shape inputs as []).
std::string format_input_shapes(const std::vector<RangeInput>& inputs);

}  // namespace framescope
