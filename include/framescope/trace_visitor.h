// framescope/trace_visitor.h: one streaming pass over a trace's events, as a visitor.
//
// Every consumer of a trace (the writers in cpp/export, statistics, the Python event iterator,
// the materialized Trace) is a TraceVisitor driven by one replay: the tree rules (which event
// encloses which, what is open at start and at stop) are implemented once, in the replay, and
// the visitor only sees their result. A replay never materializes the whole event list, so a
// visitor that keeps nothing per event runs in memory independent of the trace's size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framescope/trace.h"

namespace framescope {

/// Bound of every time a replay reports: start and end times lie within +-kMaxReportedTimeNs and
/// durations within [0, kMaxReportedTimeNs] (-1 for instants), whatever the source holds (a
/// hand-made Trace, a crafted file), so a visitor may add or subtract any two of them without
/// overflow. 2^61 ns is 73 years.
constexpr int64_t kMaxReportedTimeNs = int64_t(1) << 61;
/// `t` clamped to +-kMaxReportedTimeNs.
constexpr int64_t clamp_reported_time(int64_t t) noexcept {
  return t < -kMaxReportedTimeNs ? -kMaxReportedTimeNs
                                 : (t > kMaxReportedTimeNs ? kMaxReportedTimeNs : t);
}

/// One event as the replay reports it. `index` numbers events in the order the replay begins
/// them (threads one after another, events of a thread by start): it equals the event's index in
/// the materialized Trace::events. Plain value type.
struct Slice {
  uint64_t index = 0;
  int64_t parent = -1;   ///< index of the enclosing event on the same thread, -1 at the root
  int64_t start_ns = 0;  ///< CLOCK_MONOTONIC ns (merged traces: shifted by their offset)
  int64_t dur_ns = 0;    ///< known at slice_end (0 at slice_begin); -1 for instants
  uint32_t thread = 0;   ///< index into TraceView::threads
  uint32_t symbol = 0;   ///< index into TraceView::symbols
  uint32_t depth = 0;    ///< number of enclosing events open at its start
  uint32_t detail = UINT32_MAX;  ///< index into TraceView::details or UINT32_MAX
  EventCategory category = EventCategory::kOther;
  bool async_end = false;     ///< a range ended on another thread (reported by async_slice)
  bool open_at_stop = false;  ///< still open at stop, closed at the stop time
  /// Host code (ReplayFilter::host_mode): writers give it the category "host".
  bool host = false;
};

/// The tables a visitor needs besides the events: valid from begin_trace() to end_trace().
struct TraceView {
  const std::vector<Symbol>& symbols;
  const std::vector<ThreadInfo>& threads;
  const std::vector<EventDetail>& details;
  const std::vector<std::string>& warnings;
  int64_t start_ns = 0;
  int64_t stop_ns = 0;
  uint64_t dropped_events = 0;
  uint64_t recorded_events = 0;
  /// The trace's processes by pid, or null when it names none (a pid without an entry is
  /// "python <pid>").
  const std::vector<ProcessInfo>* processes = nullptr;
};

/// Receives one replay. Calls come in this order: begin_trace; then per thread begin_thread,
/// its events in time order, end_thread; then end_trace. Within a thread, slice_begin and
/// slice_end of slices nest except for one case: a range left open across the return of the
/// Python frame it started in ends after that frame (slice_end of the frame comes first, while
/// the range stays open); writers of formats that need strict nesting wrap themselves in a
/// NestingAdapter (cpp/export/nesting_adapter.h). async_slice reports a complete range that
/// ended on another thread (never enclosing anything). Memory samples come in time order among
/// the events of their thread. A visitor may throw; the replay then stops and rethrows.
class TraceVisitor {
 public:
  virtual ~TraceVisitor() = default;
  virtual void begin_trace(const TraceView& view) { (void)view; }
  virtual void begin_thread(uint32_t thread) { (void)thread; }
  virtual void slice_begin(const Slice& s) { (void)s; }
  /// `s` is the slice of the matching slice_begin with its duration (and open_at_stop) set.
  virtual void slice_end(const Slice& s) { (void)s; }
  /// A mark: dur_ns == -1.
  virtual void instant(const Slice& s) { (void)s; }
  virtual void async_slice(const Slice& s) { (void)s; }
  virtual void memory(const MemorySample& m) { (void)m; }
  virtual void end_thread(uint32_t thread) { (void)thread; }
  virtual void end_trace() {}
};

/// Something a replay can be driven over: a recorded (stored) trace, or a materialized Trace.
/// Implementations are immutable while visited, so one source can be visited from several
/// threads at once.
class TraceSource {
 public:
  virtual ~TraceSource() = default;
  /// Events the replay reports (slices, instants and async slices; not memory samples).
  virtual uint64_t event_count() const = 0;
  /// Drives one replay into `visitor`. Rethrows what the visitor throws.
  virtual void visit(TraceVisitor& visitor) const = 0;
  /// A time no event starts before (the base of relative timestamps in text formats).
  virtual int64_t time_base_ns() const = 0;
};

/// A materialized Trace as a TraceSource: events are reported from Trace::events, a slice
/// ending where the next event that is not its descendant begins (hand-made traces that do not
/// nest by time are reported by their parent links). Holds a reference: `trace` must outlive it.
class MaterializedSource final : public TraceSource {
 public:
  explicit MaterializedSource(const Trace& trace) : trace_(trace) {}
  uint64_t event_count() const override { return trace_.events.size(); }
  void visit(TraceVisitor& visitor) const override;
  int64_t time_base_ns() const override;

 private:
  const Trace& trace_;
};

/// Materializes a replay into a Trace (48 bytes per event: what random access needs).
Trace materialize(const TraceSource& source);

}  // namespace framescope
