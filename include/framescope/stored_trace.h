// framescope/stored_trace.h: a stopped session kept as its compact events, replayed on demand.
//
// Layout: a StoredTrace is a list of parts (one per recorded session: merge() adds parts), each
// holding per-thread runs of the raw 16-byte slots the session recorded (8 bytes per compact
// Python call or return), the side records of ranges, marks and memory samples, and the tables
// that name what the slots refer to, resolved once at stop (code objects, C functions, static
// range names -> symbols). Nothing per event is kept besides the recorded slots, so the stored
// trace is as big as the event buffers were; every reader is a replay (trace_visitor.h). The
// .fstrace file (serialize(), streaming capture) is the same representation, so a loaded or
// streamed trace replays straight from the file's memory map.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "framescope/output.h"
#include "framescope/replay_filter.h"
#include "framescope/session.h"
#include "framescope/trace_visitor.h"

namespace framescope {

namespace internal {
struct TracePart;
}

/// Thrown for a malformed or truncated .fstrace (derives from std::runtime_error).
class TraceFormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A recorded trace. Immutable once built: any number of threads may visit, serialize or
/// materialize the same StoredTrace concurrently; merged() returns a new one (the parts are
/// shared, not copied).
class StoredTrace final : public TraceSource {
 public:
  StoredTrace();
  ~StoredTrace() override;
  StoredTrace(const StoredTrace&);
  StoredTrace& operator=(const StoredTrace&);

  /// Takes the events of a stopped session (consumes `raw`), resolving keys with `resolver`
  /// (only during this call). Threads whose OS id is in `thread_names` get that name.
  static StoredTrace from_raw(
      RawTrace&& raw, const KeyResolver& resolver = {},
      const std::vector<std::pair<uint64_t, std::string>>& thread_names = {});

  /// Reads a .fstrace (serialize() output, a saved or streamed file). With `owner`, the slots
  /// are read in place (zero copy; `owner` keeps `bytes` alive and `bytes.data()` must be
  /// 8-byte aligned); without, they are copied. Throws TraceFormatError on malformed input:
  /// bad magic, truncation, a streamed session that never stopped, references out of range,
  /// times beyond +-2^62 ns.
  static StoredTrace deserialize(std::string_view bytes,
                                 std::shared_ptr<const void> owner = nullptr);
  /// Maps `path` and reads it in place. Throws OutputError (errno, path) when it cannot be
  /// opened (EISDIR for a directory) and TraceFormatError when it is malformed. A file that
  /// cannot be mapped (a pipe, a FIFO, `<(cat x.fstrace)`) is read into memory instead.
  static StoredTrace load(const std::string& path);
  /// Throws OutputError when a file this trace reads its events from (load()) was truncated or
  /// rewritten on disk since it was loaded. Every reader (visit(), ReplayCursor, serialize())
  /// checks before and after it reads the events; a truncation during a read does not crash the
  /// process (see cpp/core/mapped_file.h).
  void check_files() const;

  /// Streams the .fstrace form (magic, then each part: header, slot chunks, tables).
  void serialize(OutputSink& out) const;
  std::string serialize() const;

  /// A new trace with the parts of `other` appended after this one's, its times shifted by
  /// `offset_ns` (symbols are re-interned). Threads keep their pids, unless `separate_pids`:
  /// then every pid of `other` that this trace already has (another host's process, a reused
  /// pid) becomes a fresh one, above every pid of both, in its threads and its process entry.
  /// Keeps this trace's filter.
  /// Process entries are united; for a pid both have, this trace's entry is kept.
  StoredTrace merged(const StoredTrace& other, int64_t offset_ns = 0,
                     bool separate_pids = false) const;

  /// The processes this trace names, at most one entry per pid (framescope.processes fills
  /// them: names, labels, rank and clock metadata). Saved in the .fstrace.
  const std::vector<ProcessInfo>& processes() const noexcept { return processes_; }
  /// A copy of this trace whose entry for `info.pid` is `info` (added, or replacing the old).
  StoredTrace with_process(ProcessInfo info) const;

  /// The same events read through `filter` (every reader: visit(), event_count(), writers).
  /// The parts are shared, not copied; serialize() writes every recorded event regardless.
  StoredTrace with_filter(const ReplayFilter& filter) const;
  const ReplayFilter& filter() const noexcept { return filter_; }

  // ---- TraceSource ----
  /// Counted by one replay the first time it is asked (then cached). Thread-safe.
  uint64_t event_count() const override;
  void visit(TraceVisitor& visitor) const override;
  int64_t time_base_ns() const override { return start_ns_; }

  const std::vector<Symbol>& symbols() const noexcept { return symbols_; }
  const std::vector<ThreadInfo>& threads() const noexcept { return threads_; }
  const std::vector<EventDetail>& details() const noexcept { return details_; }
  const std::vector<std::string>& warnings() const noexcept { return warnings_; }
  int64_t start_ns() const noexcept { return start_ns_; }
  int64_t stop_ns() const noexcept { return stop_ns_; }
  /// Events dropped at the memory limit and events kept, in one unit (Trace::dropped_events).
  uint64_t dropped_events() const noexcept { return dropped_; }
  uint64_t recorded_events() const noexcept { return recorded_; }
  /// Bytes of recorded slots held (in memory or mapped).
  uint64_t slot_bytes() const noexcept;
  /// Memory samples in time order per thread.
  std::vector<MemorySample> memory_samples() const;
  TraceView view() const noexcept;

  /// One part as the trace sees it: shared storage plus where its ids land in the tables.
  struct PartRef {
    std::shared_ptr<const internal::TracePart> part;
    int64_t offset_ns = 0;
    uint32_t thread_base = 0;
    uint32_t detail_base = 0;
    std::vector<uint32_t> symbol_map;  // part symbol -> index into symbols()
  };
  const std::vector<PartRef>& parts() const noexcept { return parts_; }

 private:
  void add_part(std::shared_ptr<const internal::TracePart> part, int64_t offset_ns);
  uint32_t intern(const Symbol& s);
  // deserialize() of a private read-only file mapping (load()): only such slots may have their
  // pages released (MADV_DONTNEED) as they are read; any other owner's memory would be zeroed.
  static StoredTrace deserialize_impl(std::string_view bytes, std::shared_ptr<const void> owner,
                                      bool file_mapping);

  std::vector<PartRef> parts_;
  std::vector<Symbol> symbols_;
  std::unordered_map<std::string, uint32_t> symbol_index_;
  std::vector<ThreadInfo> threads_;
  std::vector<EventDetail> details_;
  std::vector<std::string> warnings_;
  std::vector<ProcessInfo> processes_;
  int64_t start_ns_ = 0;
  int64_t stop_ns_ = 0;
  uint64_t dropped_ = 0;
  uint64_t recorded_ = 0;
  ReplayFilter filter_;
  mutable std::atomic<int64_t> event_count_{-1};
};

/// A replay of a StoredTrace driven in steps, for pull-style readers (an iterator over events):
/// each advance() replays the next recorded slots into the visitor, with the calls and order of
/// StoredTrace::visit. Holds references: `trace` and `visitor` must outlive it. Not thread-safe
/// (one cursor per reader; any number of cursors may read one trace at once).
class ReplayCursor {
 public:
  ReplayCursor(const StoredTrace& trace, TraceVisitor& visitor);
  ~ReplayCursor();
  ReplayCursor(const ReplayCursor&) = delete;
  ReplayCursor& operator=(const ReplayCursor&) = delete;
  /// Replays up to about `max_slots` recorded slots (begin_trace on the first call; a thread's
  /// begin and end cost no slots). Returns false once end_trace has been reported, and from
  /// then on does nothing. Rethrows what the visitor throws (the cursor is then done).
  bool advance(uint64_t max_slots);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace framescope
