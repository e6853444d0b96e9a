// cpp/core/stored_trace.cpp: StoredTrace tables and merging; materializing and visiting traces.
#include "framescope/stored_trace.h"

#include <algorithm>

#include "session_impl.h"
#include "stream_writer.h"
#include "trace_part.h"

namespace framescope {

namespace internal {
// trace_processes.cpp: gives the threads [first, end) of `threads` and `processes` fresh pids
// where `mine` already uses theirs.
void separate_pids(const StoredTrace& mine, const StoredTrace& theirs,
                   std::vector<ThreadInfo>& threads, size_t first,
                   std::vector<ProcessInfo>& processes);
}  // namespace internal

StoredTrace::StoredTrace() = default;
StoredTrace::~StoredTrace() = default;

StoredTrace::StoredTrace(const StoredTrace& o)
    : parts_(o.parts_),
      symbols_(o.symbols_),
      symbol_index_(o.symbol_index_),
      threads_(o.threads_),
      details_(o.details_),
      warnings_(o.warnings_),
      processes_(o.processes_),
      start_ns_(o.start_ns_),
      stop_ns_(o.stop_ns_),
      dropped_(o.dropped_),
      recorded_(o.recorded_),
      filter_(o.filter_),
      event_count_(o.event_count_.load()) {}

StoredTrace& StoredTrace::operator=(const StoredTrace& o) {
  if (this != &o) {
    StoredTrace copy(o);
    parts_ = std::move(copy.parts_);
    symbols_ = std::move(copy.symbols_);
    symbol_index_ = std::move(copy.symbol_index_);
    threads_ = std::move(copy.threads_);
    details_ = std::move(copy.details_);
    warnings_ = std::move(copy.warnings_);
    processes_ = std::move(copy.processes_);
    start_ns_ = copy.start_ns_;
    stop_ns_ = copy.stop_ns_;
    dropped_ = copy.dropped_;
    recorded_ = copy.recorded_;
    filter_ = copy.filter_;
    event_count_.store(copy.event_count_.load());
  }
  return *this;
}

StoredTrace StoredTrace::from_raw(RawTrace&& raw, const KeyResolver& resolver,
                                  const std::vector<std::pair<uint64_t, std::string>>& names) {
  if (raw.stream) {
    // Streaming capture: most slots are in the stream's file already; it completes the file and
    // the trace reads from it.
    std::shared_ptr<internal::StreamWriter> stream = std::move(raw.stream);
    if (!stream->forked_away()) return stream->finish(std::move(raw), resolver, names);
    raw.warnings.push_back(
        "framescope: this process was forked from a session that streamed to '" + stream->path() +
        "'; its trace holds the events still in memory at the fork and those recorded since");
  }
  StoredTrace t;
  t.add_part(internal::build_part(std::move(raw), resolver, names), 0);
  return t;
}

uint32_t StoredTrace::intern(const Symbol& s) {
  auto it = symbol_index_.find(s.name);
  if (it != symbol_index_.end()) return it->second;
  const uint32_t id = uint32_t(symbols_.size());
  symbol_index_.emplace(s.name, id);
  symbols_.push_back(s);
  return id;
}

void StoredTrace::add_part(std::shared_ptr<const internal::TracePart> part, int64_t offset_ns) {
  const bool was_empty = parts_.empty();
  // Offsets add up over repeated merges: kept within the reported time range (replay.cpp adds
  // one to times within +-2^62, which must not overflow).
  offset_ns = clamp_reported_time(offset_ns);
  PartRef ref;
  ref.offset_ns = offset_ns;
  ref.thread_base = uint32_t(threads_.size());
  ref.detail_base = uint32_t(details_.size());
  ref.symbol_map.reserve(part->symbols.size());
  for (const Symbol& s : part->symbols) ref.symbol_map.push_back(intern(s));
  for (const internal::PartThread& t : part->threads) {
    threads_.push_back(t.info);
    for (CpuSample& c : threads_.back().cpu_samples) c.time_ns += offset_ns;
  }
  details_.insert(details_.end(), part->details.begin(), part->details.end());
  warnings_.insert(warnings_.end(), part->warnings.begin(), part->warnings.end());
  const int64_t start = clamp_reported_time(part->start_ns() + offset_ns);
  const int64_t stop = clamp_reported_time(part->stop_ns() + offset_ns);
  start_ns_ = was_empty ? start : std::min(start_ns_, start);
  stop_ns_ = was_empty ? stop : std::max(stop_ns_, stop);
  dropped_ += part->dropped_events;
  recorded_ += part->recorded_events;
  ref.part = std::move(part);
  parts_.push_back(std::move(ref));
  event_count_.store(-1);
}

StoredTrace StoredTrace::merged(const StoredTrace& other, int64_t offset_ns,
                                bool separate_pids) const {
  StoredTrace out(*this);
  const size_t first_new_thread = out.threads_.size();
  for (const PartRef& ref : other.parts_) {
    int64_t sum;
    if (__builtin_add_overflow(ref.offset_ns, offset_ns, &sum))
      sum = offset_ns < 0 ? INT64_MIN : INT64_MAX;
    out.add_part(ref.part, sum);
  }
  // add_part copied the parts' own thread infos: take over `other`'s (they may be remapped).
  std::copy(other.threads_.begin(), other.threads_.end(),
            out.threads_.begin() + long(first_new_thread));
  // Their CPU readings carry `other`'s own part offsets already: shift them by this merge's.
  for (size_t i = first_new_thread; i < out.threads_.size(); ++i) {
    for (CpuSample& c : out.threads_[i].cpu_samples) {
      int64_t t;
      if (__builtin_add_overflow(c.time_ns, offset_ns, &t)) {
        t = offset_ns < 0 ? INT64_MIN : INT64_MAX;
      }
      c.time_ns = clamp_reported_time(t);
    }
  }
  std::vector<ProcessInfo> theirs = other.processes_;
  if (separate_pids) internal::separate_pids(*this, other, out.threads_, first_new_thread, theirs);
  for (ProcessInfo& p : theirs) {
    const bool known = std::any_of(out.processes_.begin(), out.processes_.end(),
                                   [&](const ProcessInfo& q) { return q.pid == p.pid; });
    if (!known) out.processes_.push_back(std::move(p));
  }
  return out;
}

namespace {
struct CountingVisitor final : TraceVisitor {
  uint64_t n = 0;
  void slice_begin(const Slice&) override { ++n; }
  void instant(const Slice&) override { ++n; }
  void async_slice(const Slice&) override { ++n; }
};
struct MemoryCollector final : TraceVisitor {
  std::vector<MemorySample> out;
  void memory(const MemorySample& m) override { out.push_back(m); }
};
}  // namespace

uint64_t StoredTrace::event_count() const {
  int64_t n = event_count_.load();
  if (n >= 0) return uint64_t(n);
  CountingVisitor c;
  visit(c);
  event_count_.store(int64_t(c.n));
  return c.n;
}

TraceView StoredTrace::view() const noexcept {
  return TraceView{symbols_,  threads_,  details_,
                   warnings_, start_ns_, stop_ns_,
                   dropped_,  recorded_, processes_.empty() ? nullptr : &processes_};
}

void StoredTrace::visit(TraceVisitor& visitor) const {
  std::unique_ptr<TraceVisitor> filtering;
  TraceVisitor& v =
      filter_.active() ? *(filtering = make_filtering_visitor(visitor, filter_)) : visitor;
  const TraceView tables = view();  // must outlive the visit: visitors keep a pointer to it
  check_files();                    // a loaded file changed on disk (mapped_file.h)
  v.begin_trace(tables);
  uint64_t next_index = 0;
  for (const PartRef& ref : parts_) internal::replay_part(ref, v, next_index);
  // Before end_trace: a writer then commits its output, which must not hold events of a file
  // that changed during the replay.
  check_files();
  v.end_trace();
}

StoredTrace StoredTrace::with_filter(const ReplayFilter& filter) const {
  StoredTrace out(*this);
  out.filter_ = filter;
  if (filter.host_mode == ReplayFilter::HostMode::kFold) {
    // Folded host frames are reported as one symbol of this view's own table.
    Symbol host;
    host.name = host.function = "[host]";
    out.filter_.host_symbol = out.intern(host);
  }
  out.event_count_.store(-1);
  return out;
}

uint64_t StoredTrace::slot_bytes() const noexcept {
  uint64_t n = 0;
  for (const PartRef& ref : parts_) {
    for (const internal::PartThread& t : ref.part->threads) {
      for (const internal::SlotRun& r : t.runs) n += r.count * sizeof(internal::RawEvent);
    }
  }
  return n;
}

std::vector<MemorySample> StoredTrace::memory_samples() const {
  MemoryCollector c;
  visit(c);
  return std::move(c.out);
}

// ---------------------------------------------------------------------------------------------
// A materialized Trace as a source, and back.

int64_t MaterializedSource::time_base_ns() const {
  int64_t base = trace_.start_ns;
  for (const TraceEvent& e : trace_.events) base = std::min(base, e.start_ns);
  for (const MemorySample& m : trace_.memory) base = std::min(base, m.time_ns);
  return clamp_reported_time(base);
}

void MaterializedSource::visit(TraceVisitor& v) const {
  const Trace& t = trace_;
  // A hand-made trace may hold any times: they are reported clamped (kMaxReportedTimeNs).
  const TraceView tables{t.symbols,
                         t.threads,
                         t.details,
                         t.warnings,
                         clamp_reported_time(t.start_ns),
                         clamp_reported_time(t.stop_ns),
                         t.dropped_events,
                         t.recorded_events};
  v.begin_trace(tables);
  std::vector<Slice> stack;
  uint32_t thread = UINT32_MAX;
  auto end_top = [&]() {
    v.slice_end(stack.back());
    stack.pop_back();
  };
  for (size_t i = 0; i < t.events.size(); ++i) {
    const TraceEvent& e = t.events[i];
    // Hand-made traces may refer past their tables: such events are not reported.
    if (e.symbol >= t.symbols.size() || e.thread >= t.threads.size()) continue;
    if (e.thread != thread) {
      while (!stack.empty()) end_top();
      if (thread != UINT32_MAX) v.end_thread(thread);
      thread = e.thread;
      v.begin_thread(thread);
    }
    while (!stack.empty() && int64_t(stack.back().index) != e.parent) end_top();
    Slice s;
    s.index = i;
    s.parent = e.parent;
    s.start_ns = clamp_reported_time(e.start_ns);
    s.dur_ns = e.dur_ns < 0 ? -1 : std::min(e.dur_ns, kMaxReportedTimeNs);
    s.thread = e.thread;
    s.symbol = e.symbol;
    s.depth = e.depth;
    s.detail = e.detail < t.details.size() ? e.detail : UINT32_MAX;
    s.category = e.category;
    s.async_end = e.async_end;
    s.open_at_stop = e.open_at_stop;
    if (e.dur_ns < 0) {
      v.instant(s);
    } else if (e.async_end) {
      v.async_slice(s);
    } else {
      Slice begin = s;
      begin.dur_ns = 0;
      begin.open_at_stop = false;
      v.slice_begin(begin);
      stack.push_back(s);
    }
  }
  while (!stack.empty()) end_top();
  if (thread != UINT32_MAX) v.end_thread(thread);
  for (const MemorySample& m : t.memory) {
    if (m.thread >= t.threads.size()) continue;
    MemorySample clamped = m;
    clamped.time_ns = clamp_reported_time(m.time_ns);
    v.memory(clamped);
  }
  v.end_trace();
}

namespace {

class TraceBuilder final : public TraceVisitor {
 public:
  TraceBuilder(Trace& out, uint64_t count) : out_(out), count_(count) {}
  void begin_trace(const TraceView& view) override {
    for (const Symbol& s : view.symbols) out_.intern(s);
    out_.threads = view.threads;
    out_.details = view.details;
    out_.warnings = view.warnings;
    out_.start_ns = view.start_ns;
    out_.stop_ns = view.stop_ns;
    out_.dropped_events = view.dropped_events;
    out_.recorded_events = view.recorded_events;
    out_.events.reserve(size_t(count_));  // exact: no copies of a growing array
  }
  void slice_begin(const Slice& s) override { add(s); }
  void slice_end(const Slice& s) override {
    if (s.index < out_.events.size()) {
      TraceEvent& e = out_.events[size_t(s.index)];
      e.dur_ns = s.dur_ns;
      e.open_at_stop = s.open_at_stop;
    }
  }
  void instant(const Slice& s) override { add(s); }
  void async_slice(const Slice& s) override { add(s); }
  void memory(const MemorySample& m) override { out_.memory.push_back(m); }

 private:
  void add(const Slice& s) {
    TraceEvent e;
    e.start_ns = s.start_ns;
    e.dur_ns = s.dur_ns;
    e.parent = s.parent;
    e.symbol = s.symbol;
    e.thread = s.thread;
    e.depth = s.depth;
    e.detail = s.detail;
    e.category = s.category;
    e.async_end = s.async_end;
    e.open_at_stop = s.open_at_stop;
    out_.events.push_back(e);
  }
  Trace& out_;
  uint64_t count_;
};

}  // namespace

Trace materialize(const TraceSource& source) {
  Trace out;
  TraceBuilder b(out, source.event_count());
  source.visit(b);
  return out;
}

}  // namespace framescope
