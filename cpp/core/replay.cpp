// cpp/core/replay.cpp: the tree rules: turns one thread's recorded slots into nested events.
//
// Two steps. At stop, build_part() (part_builder.cpp) keeps the slots of a session as they are and
// resolves what they refer to (code objects, C functions, static names, side records) into symbols,
// once. Then every reader replays: replay_part() walks each thread's slots and reports slices to a
// TraceVisitor, in one go or in steps (ReplayCursor: the Replayer keeps where it is, so a pull
// reader such as the Python event iterator can ask for a few thousand slots at a time). This
// file is the only place that decides which event encloses which.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <unordered_map>

#include "framescope/record_function.h"
#include "session_impl.h"
#include "trace_part.h"

namespace framescope {

using internal::EventKind;

namespace internal {

namespace {

EventCategory category_of_scope(uint8_t scope) {
  switch (RecordScope(scope)) {
    case RecordScope::kFunction:
      return EventCategory::kCpuOp;
    case RecordScope::kUserScope:
      return EventCategory::kUserAnnotation;
    default:
      return EventCategory::kOther;
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Replay.

// A large trace mapped from a file is replayed once per reader; keeping every page it touched
// resident would make its memory the file's size. The mapping is private, read-only and never
// written, so dropping its pages loses nothing: a later access faults them in again from the
// page cache. The range is widened, not narrowed, to whole blocks: keeping the partial pages at
// each end (and the fault-around pages beside them) left about one page per 256 KiB chunk
// resident, an RSS that grew with the file (50 MB for 2.4 GB). Releasing a page another reader
// still needs costs it only a minor fault.
void release_mapped_pages(const MappedSpan& span, const void* begin, const void* end) noexcept {
  if (span.empty()) return;
  static const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t grain = std::max(kReleaseGrain, page);
  const uintptr_t lo = reinterpret_cast<uintptr_t>(span.begin) & ~(page - 1);
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(span.end) + page - 1) & ~(page - 1);
  uintptr_t from = reinterpret_cast<uintptr_t>(begin) & ~(grain - 1);
  uintptr_t to = (reinterpret_cast<uintptr_t>(end) + grain - 1) & ~(grain - 1);
  from = std::max(from, lo);
  to = std::min(to, hi);
  if (to > from) madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED);
}

namespace {

enum class OpenKind : uint8_t { kRange, kPython, kC };

struct Open {
  Slice slice;
  uint64_t begin_seq;  // ranges only
  int64_t raw_start;   // start without the part's time offset
  uint64_t frame_address;
  OpenKind kind;
  bool initial;  // pre-existing Python frame
  // A frame whose slice a kPyExitEarly event ended: it keeps its place on the stack until its
  // own return event arrives, but nothing nests under it.
  bool ghost = false;
};

struct PairHash {
  size_t operator()(const std::pair<uint32_t, uint64_t>& p) const {
    return std::hash<uint64_t>()(p.second * 1000003u ^ p.first);
  }
};

class Replayer {
 public:
  Replayer(const StoredTrace::PartRef& ref, TraceVisitor& v, uint64_t& next_index)
      : ref_(ref), part_(*ref.part), v_(v), next_index_(next_index) {
    for (const PartAsyncEnd& ae : part_.async_ends) {
      async_ends_[{ae.buffer_index, ae.begin_seq}] = ae.ticks;
    }
    start_ns_ = part_.start_ns();
    stop_ns_ = part_.stop_ns();
  }

  void run() {
    while (!step(UINT64_MAX)) {
    }
  }

  // Replays up to about `budget` slots (a thread's start and end cost none); true once every
  // thread of the part has ended.
  bool step(uint64_t budget) {
    while (budget > 0) {
      if (!in_thread_) {
        if (thread_i_ >= part_.threads.size()) return true;
        begin_thread();
      }
      const PartThread& t = part_.threads[thread_i_];
      while (!stopped_ && run_i_ < t.runs.size() && budget > 0) {
        const SlotRun& run = t.runs[run_i_];
        const uint64_t end = k_ + std::min(budget, run.count - k_);
        const uint64_t from = k_;
        while (k_ < end && !stopped_) slot(t, run.slots[k_++]);
        budget -= std::min(budget, k_ - from);
        // Blocks of slots, so that a mapped trace's pages can be let go of as the replay passes.
        if (part_.release_pages &&
            (k_ - released_ >= kReleaseBlockSlots || k_ == run.count || stopped_)) {
          release_mapped_pages(part_.mapped_span, run.slots + released_, run.slots + k_);
          released_ = k_;
        }
        if (k_ == run.count) {
          ++run_i_;
          k_ = released_ = 0;
        }
      }
      if (stopped_ || run_i_ >= t.runs.size()) end_thread();
    }
    return !in_thread_ && thread_i_ >= part_.threads.size();
  }

 private:
  uint32_t sym(uint32_t part_symbol) const {
    return part_symbol < ref_.symbol_map.size() ? ref_.symbol_map[part_symbol] : 0;
  }
  uint32_t lookup(const std::unordered_map<uint64_t, uint32_t>& m, uint64_t key,
                  uint32_t fallback) const {
    auto it = m.find(key);
    return sym(it == m.end() ? fallback : it->second);
  }

  // Fills a new slice enclosed by the top of the stack (the innermost entry but a ghost).
  Slice make(int64_t ts, uint32_t symbol, EventCategory cat) {
    Slice s;
    s.index = next_index_++;
    s.parent = -1;
    for (size_t i = stack_.size(); i-- > 0;) {
      if (!stack_[i].ghost) {
        s.parent = int64_t(stack_[i].slice.index);
        break;
      }
    }
    s.start_ns = clamp_reported_time(ts + ref_.offset_ns);
    s.thread = thread_;
    s.symbol = symbol;
    s.depth = uint32_t(stack_.size() - ghosts_);
    s.category = cat;
    return s;
  }

  void open(int64_t ts, uint32_t symbol, EventCategory cat, OpenKind kind, uint64_t begin_seq = 0,
            uint32_t detail = UINT32_MAX, bool initial = false, uint64_t address = 0) {
    Open o{make(ts, symbol, cat), begin_seq, ts, address, kind, initial};
    o.slice.detail = detail;
    v_.slice_begin(o.slice);
    stack_.push_back(o);
  }

  void close_at(size_t i, int64_t t, bool at_stop = false) {
    Open& o = stack_[i];
    if (o.ghost) {
      --ghosts_;
    } else {
      o.slice.dur_ns = std::clamp<int64_t>(t - o.raw_start, 0, kMaxReportedTimeNs);
      o.slice.open_at_stop = at_stop;
      v_.slice_end(o.slice);
    }
    stack_.erase(stack_.begin() + long(i));
  }

  // kPyInitialExit: the frame that was running at start at `address` ended at `t`. Python and C
  // entries above it ended before it; ranges left open across its return stay open.
  void close_initial_frame(uint64_t address, int64_t t) {
    size_t i = stack_.size();
    while (i-- > 0) {
      if (stack_[i].initial && stack_[i].frame_address == address) break;
    }
    if (i >= stack_.size()) return;
    for (size_t j = stack_.size(); j-- > i;) {
      if (j == i || stack_[j].kind != OpenKind::kRange) close_at(j, t);
    }
  }

  // kPyExitEarly: the innermost Python frame ended at `t`, before its return event (3.12+ free a
  // returning frame's locals, running finalizers, before the hook sees it return). Its slice
  // ends now; its entry stays as a ghost for the return event to remove.
  void exit_early(int64_t t) {
    for (size_t i = stack_.size(); i-- > 0;) {
      Open& o = stack_[i];
      if (o.kind != OpenKind::kPython) continue;
      if (o.ghost) return;  // ended already (a second finalizer)
      o.slice.dur_ns = std::clamp<int64_t>(t - o.raw_start, 0, kMaxReportedTimeNs);
      v_.slice_end(o.slice);
      o.ghost = true;
      o.initial = false;
      ++ghosts_;
      return;
    }
  }

  // Closes the innermost open entry of `kind` at `t`. Entries of other kinds above it (a range
  // left open across a return) stay open.
  void pop_kind(OpenKind kind, int64_t t) {
    for (size_t i = stack_.size(); i-- > 0;) {
      if (stack_[i].kind == kind) {
        close_at(i, t);
        return;
      }
    }
  }

  void begin_thread() {
    const PartThread& t = part_.threads[thread_i_];
    thread_ = ref_.thread_base + uint32_t(thread_i_);
    in_thread_ = true;
    run_i_ = 0;
    k_ = released_ = 0;
    seq_ = t.first_seq;
    stopped_ = false;
    have_base_ = false;
    base_ticks_ = 0;
    python_allocated_ = 0;
    stack_.clear();
    ghosts_ = 0;
    last_ts_ = start_ns_;
    v_.begin_thread(thread_);
    for (const StoredFrame& f : t.initial) {
      open(start_ns_, sym(f.symbol), EventCategory::kPythonFunction, OpenKind::kPython, 0,
           UINT32_MAX, true, f.address);
    }
  }

  void end_thread() {
    // A thread that reached the memory limit under the stop policy (it dropped events, and
    // kept its first ones) recorded nothing after its last event: what was open then ends
    // there, truncated. Ending it at the stop would hand the innermost open call, often a
    // trivial one, all the time the thread ran unrecorded.
    const PartThread& t = part_.threads[thread_i_];
    const bool cut_at_limit = t.dropped > 0 && t.first_seq == 0;
    const int64_t end = cut_at_limit ? std::clamp(last_ts_, start_ns_, stop_ns_) : stop_ns_;
    while (!stack_.empty()) close_at(stack_.size() - 1, end, true);
    v_.end_thread(thread_);
    in_thread_ = false;
    ++thread_i_;
  }

  // A compact event (raw_event.h); false once it lies after the stop.
  bool compact(uint64_t e) {
    if (!have_base_) return true;  // (cannot happen: every chunk starts its pairs with a base)
    const uint64_t ticks = base_ticks_ + compact_delta(e);
    if (ticks > part_.stop_ticks) return false;
    const int64_t ts = part_.clock.to_ns(ticks);
    last_ts_ = std::max(last_ts_, ts);
    if (compact_is_return(e)) {
      pop_kind(OpenKind::kPython, ts);
    } else if (const uint32_t index = compact_index(e); index < part_.keys.compact.size()) {
      open(ts, sym(part_.keys.compact[index]), EventCategory::kPythonFunction, OpenKind::kPython);
    }
    return true;
  }

  // One slot of thread `t`; sets stopped_ at the first event after the stop.
  void slot(const PartThread& t, const RawEvent& raw) {
    const uint64_t stop_ticks = part_.stop_ticks;
    const ClockConverter& clock = part_.clock;
    const uint64_t this_seq = seq_++;
    if (is_compact_pair(raw.word)) {
      // first half in `word`, second (if written) in `ticks`
      if (!compact(raw.word) || (raw.ticks != 0 && !compact(raw.ticks))) stopped_ = true;
      return;
    }
    if (raw.ticks > stop_ticks) {  // after the stop: this and later events
      stopped_ = true;
      return;
    }
    const int64_t ts = clock.to_ns(raw.ticks);
    last_ts_ = std::max(last_ts_, ts);
    const uint64_t payload = payload_of(raw.word);
    switch (kind_of(raw.word)) {
      case EventKind::kRangeBegin:
      case EventKind::kRangeBeginSide: {
        uint32_t symbol;
        uint8_t scope;
        uint32_t detail = UINT32_MAX;
        if (kind_of(raw.word) == EventKind::kRangeBegin) {
          symbol = lookup(part_.keys.static_name, payload & kPointerMask, part_.unknown_range);
          scope = uint8_t(payload >> 48);
        } else {
          if (payload < t.ranges_base || payload - t.ranges_base >= t.ranges.size()) break;
          const StoredRange& r = t.ranges[payload - t.ranges_base];
          symbol = sym(r.symbol);
          scope = r.scope;
          if (r.detail != UINT32_MAX) detail = ref_.detail_base + r.detail;
        }
        auto async = async_ends_.find({t.buffer_index, this_seq});
        if (async != async_ends_.end()) {
          Slice s = make(ts, symbol, category_of_scope(scope));
          s.detail = detail;
          s.dur_ns = std::clamp<int64_t>(clock.to_ns(async->second) - ts, 0, kMaxReportedTimeNs);
          s.async_end = true;
          v_.async_slice(s);
        } else {
          open(ts, symbol, category_of_scope(scope), OpenKind::kRange, this_seq, detail);
        }
        break;
      }
      case EventKind::kRangeEnd:
        for (size_t i = stack_.size(); i-- > 0;) {
          if (stack_[i].kind == OpenKind::kRange && stack_[i].begin_seq == payload) {
            close_at(i, ts);
            break;
          }
        }
        break;
      case EventKind::kPyCall:
        open(ts, lookup(part_.keys.python, payload, part_.unknown_python),
             EventCategory::kPythonFunction, OpenKind::kPython);
        break;
      case EventKind::kBase:
        base_ticks_ = raw.ticks;
        have_base_ = true;
        break;
      case EventKind::kPyReturn:
        pop_kind(OpenKind::kPython, ts);
        break;
      case EventKind::kCCall:
        open(ts, lookup(part_.keys.c_function, payload, part_.unknown_c), EventCategory::kCFunction,
             OpenKind::kC);
        break;
      case EventKind::kCReturn:
        pop_kind(OpenKind::kC, ts);
        break;
      case EventKind::kPyAnchor: {
        // A call at hook depth 0 runs under the pre-existing frame at `payload`: every
        // pre-existing frame above that one has returned by now.
        size_t i = stack_.size();
        while (i-- > 0) {
          if (stack_[i].initial && stack_[i].frame_address == payload) break;
        }
        if (i < stack_.size()) {
          while (stack_.size() > i + 1 && stack_.back().initial) close_at(stack_.size() - 1, ts);
        }
        break;
      }
      case EventKind::kPyInitialExit:
        close_initial_frame(payload, ts);
        break;
      case EventKind::kPyExitEarly:
        exit_early(ts);
        break;
      case EventKind::kMark: {
        if (payload < t.marks_base || payload - t.marks_base >= t.marks.size()) break;
        Slice s = make(ts, sym(t.marks[payload - t.marks_base]), EventCategory::kMark);
        s.dur_ns = -1;
        v_.instant(s);
        break;
      }
      case EventKind::kAllocDelta:
        python_allocated_ += int64_t(payload);
        v_.memory(MemorySample{clamp_reported_time(ts + ref_.offset_ns), thread_, 0,
                               int64_t(payload), python_allocated_, 0, kPythonAllocatorDevice});
        break;
      case EventKind::kMemory: {
        if (payload < t.memory_base || payload - t.memory_base >= t.memory.size()) break;
        const MemoryRecord& m = t.memory[payload - t.memory_base];
        v_.memory(MemorySample{clamp_reported_time(ts + ref_.offset_ns), thread_, m.address,
                               m.bytes, m.total_allocated, m.total_reserved, m.device});
        break;
      }
      default:
        break;
    }
  }

  const StoredTrace::PartRef& ref_;
  const TracePart& part_;
  TraceVisitor& v_;
  uint64_t& next_index_;
  int64_t start_ns_ = 0, stop_ns_ = 0;
  // Where the replay is: thread, run, slot within the run (and what it let go of), and the
  // state of the thread being replayed.
  size_t thread_i_ = 0;
  bool in_thread_ = false;
  size_t run_i_ = 0;
  uint64_t k_ = 0;
  uint64_t released_ = 0;
  uint64_t seq_ = 0;
  bool stopped_ = false;
  uint64_t base_ticks_ = 0;
  bool have_base_ = false;
  int64_t python_allocated_ = 0;  // the thread's kAllocDelta bytes so far
  uint32_t thread_ = 0;
  std::vector<Open> stack_;
  size_t ghosts_ = 0;    // ghost entries in stack_
  int64_t last_ts_ = 0;  // the time of the thread's latest event so far
  std::unordered_map<std::pair<uint32_t, uint64_t>, uint64_t, PairHash> async_ends_;
};

}  // namespace

void replay_part(const StoredTrace::PartRef& ref, TraceVisitor& visitor, uint64_t& next_index) {
  Replayer(ref, visitor, next_index).run();
}

}  // namespace internal

struct ReplayCursor::State {
  State(const StoredTrace& t, TraceVisitor& downstream)
      : trace(t),
        // The trace's replay filter (max_depth, min_duration_ns) applies as in visit().
        filtering(t.filter().active() ? make_filtering_visitor(downstream, t.filter()) : nullptr),
        visitor(filtering ? *filtering : downstream),
        view(t.view()) {}
  const StoredTrace& trace;
  std::unique_ptr<TraceVisitor> filtering;
  TraceVisitor& visitor;
  TraceView view;
  size_t part = 0;
  uint64_t next_index = 0;
  std::unique_ptr<internal::Replayer> replayer;
  bool started = false;
  bool done = false;
};

ReplayCursor::ReplayCursor(const StoredTrace& trace, TraceVisitor& visitor)
    : state_(new State(trace, visitor)) {}

ReplayCursor::~ReplayCursor() = default;

bool ReplayCursor::advance(uint64_t max_slots) {
  State& st = *state_;
  if (st.done) return false;
  try {
    st.trace.check_files();  // a loaded file changed on disk (mapped_file.h)
    if (!st.started) {
      st.started = true;
      st.visitor.begin_trace(st.view);
    }
    const auto& parts = st.trace.parts();
    if (!st.replayer) {
      if (st.part >= parts.size()) {
        st.done = true;
        st.visitor.end_trace();
        return false;
      }
      st.replayer = std::make_unique<internal::Replayer>(parts[st.part], st.visitor, st.next_index);
    }
    const bool part_done = st.replayer->step(std::max<uint64_t>(1, max_slots));
    // Before the step's events reach anyone: they may come from a file changed meanwhile.
    st.trace.check_files();
    if (part_done) {
      st.replayer.reset();
      ++st.part;
    }
    return true;
  } catch (...) {
    st.done = true;  // a replay interrupted midway cannot go on consistently
    st.replayer.reset();
    throw;
  }
}

Trace replay(const RawTrace& raw, const KeyResolver& resolver) {
  RawTrace copy = raw;
  return materialize(StoredTrace::from_raw(std::move(copy), resolver));
}

}  // namespace framescope
