// cpp/core/replay.cpp: turns per-thread raw events into one tree of timed events per thread.
#include <unistd.h>

#include <algorithm>
#include <unordered_map>

#include "flops.h"
#include "framescope/record_function.h"
#include "session_impl.h"

namespace framescope {

using internal::EventKind;

namespace {

enum class OpenKind : uint8_t { kRange, kPython, kC };

struct Open {
  int64_t event;       // index in Trace::events; kGhost for a frame already closed early
  uint64_t begin_seq;  // ranges only
  OpenKind kind;
  bool initial;  // pre-existing Python frame
  uint64_t frame_address;
};

// Open::event of a frame whose slice a kPyExitEarly event closed: it keeps its place in the
// stack until its own return event arrives, but is nobody's parent.
constexpr int64_t kGhost = -1;

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

class Replayer {
 public:
  Replayer(const RawTrace& raw, const KeyResolver& resolver, Trace& out)
      : raw_(raw), resolver_(resolver), out_(out) {}

  void run() {
    out_.start_ns = raw_.clock.to_ns(raw_.start_ticks);
    out_.stop_ns = raw_.clock.to_ns(raw_.stop_ticks);
    out_.warnings = raw_.warnings;
    // Threads may still append for a moment after the stop time was taken (they read the
    // session epoch before it was cleared). Such events lie outside the session window and are
    // ignored, so that everything fits inside [start, stop] and ranges open at stop nest.
    for (const auto& ae : raw_.async_ends) {
      if (ae.ticks <= raw_.stop_ticks) async_ends_[{ae.buffer_index, ae.begin_seq}] = ae.ticks;
    }
    // Each event opens at most one TraceEvent, so this reserve is never exceeded: no copies of a
    // growing array (millions of events at stop), and the pages of the part not used are never
    // touched.
    for (const RawThread& t : raw_.threads) {
      out_.recorded_events += internal::count_events(t.data.events);
    }
    uint64_t upper_bound = out_.recorded_events;
    for (const InitialStack& is : raw_.initial_stacks) upper_bound += is.keys.size();
    out_.events.reserve(size_t(upper_bound));
    compact_symbols_.assign(raw_.compact_keys.size(), kNoSymbol);
    int64_t pid = getpid();
    for (const RawThread& t : raw_.threads) {
      ThreadInfo info;
      info.pid = pid;
      info.os_tid = t.os_tid;
      info.pthread_id = t.pthread_id;
      info.logical_tid = t.logical_tid;
      out_.threads.push_back(info);
      out_.dropped_events += t.data.dropped;
      replay_thread(t, uint32_t(out_.threads.size() - 1));
    }
    replay_threads_without_events(pid);
  }

 private:
  struct PairHash {
    size_t operator()(const std::pair<uint32_t, uint64_t>& p) const {
      return std::hash<uint64_t>()(p.second * 1000003u ^ p.first);
    }
  };

  uint32_t symbol_for_static(uint64_t ptr) {
    auto it = static_names_.find(ptr);
    if (it != static_names_.end()) return it->second;
    Symbol s;
    s.name = reinterpret_cast<const char*>(ptr);
    s.function = s.name;
    uint32_t id = out_.intern(std::move(s));
    static_names_.emplace(ptr, id);
    return id;
  }

  uint32_t symbol_for_key(uint64_t key, bool python) {
    auto& cache = python ? python_keys_ : c_keys_;
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    Symbol s;
    const auto& fn = python ? resolver_.python : resolver_.c_function;
    if (!fn || !fn(key, s)) {
      s = Symbol{};
      s.name = python ? "<unknown python function>" : "<unknown C function>";
      s.function = s.name;
    }
    uint32_t id = out_.intern(std::move(s));
    cache.emplace(key, id);
    return id;
  }

  int64_t open_event(int64_t start, uint32_t symbol, EventCategory cat, uint32_t thread,
                     const std::vector<Open>& stack) {
    TraceEvent e;
    e.start_ns = start;
    e.dur_ns = 0;
    e.symbol = symbol;
    e.thread = thread;
    e.category = cat;
    e.parent = -1;
    for (size_t i = stack.size(); i-- > 0;) {  // the innermost entry unless it is a ghost
      if (stack[i].event != kGhost) {
        e.parent = stack[i].event;
        break;
      }
    }
    e.depth = uint32_t(stack.size() - ghosts_);
    out_.events.push_back(e);
    return int64_t(out_.events.size() - 1);
  }

  void close(const Open& o, int64_t t) {
    if (o.event == kGhost) {
      --ghosts_;
      return;
    }
    TraceEvent& e = out_.events[size_t(o.event)];
    e.dur_ns = std::max<int64_t>(0, t - e.start_ns);
  }

  // Pops the innermost open entry of `kind`, closing it at `t`. Entries of other kinds above it
  // (a range left open across a return) stay open.
  void pop_kind(std::vector<Open>& stack, OpenKind kind, int64_t t) {
    for (size_t i = stack.size(); i-- > 0;) {
      if (stack[i].kind == kind) {
        close(stack[i], t);
        stack.erase(stack.begin() + long(i));
        return;
      }
    }
  }

  // Opens the frames that were running on a thread at session start (InitialStack `s`), from the
  // session's start. Each initial stack goes to one thread only.
  void open_initial_stack(size_t s, uint32_t thread, std::vector<Open>& stack) {
    const InitialStack& is = raw_.initial_stacks[s];
    if (initial_stack_taken_.size() <= s) initial_stack_taken_.resize(s + 1, false);
    initial_stack_taken_[s] = true;
    for (size_t i = 0; i < is.keys.size(); ++i) {
      int64_t ev = open_event(out_.start_ns, symbol_for_key(is.keys[i], true),
                              EventCategory::kPythonFunction, thread, stack);
      stack.push_back({ev, 0, OpenKind::kPython, true,
                       i < is.frame_addresses.size() ? is.frame_addresses[i] : 0});
    }
  }

  // kPyInitialExit: the frame that was running at start at `address` ended at `t`. Python and C
  // entries above it ended before it (ranges left open across a return stay open).
  void close_initial_frame(std::vector<Open>& stack, uint64_t address, int64_t t) {
    size_t i = stack.size();
    while (i-- > 0) {
      if (stack[i].initial && stack[i].frame_address == address) break;
    }
    if (i >= stack.size()) return;
    for (size_t j = stack.size(); j-- > i;) {
      if (j > i && stack[j].kind == OpenKind::kRange) continue;
      close(stack[j], t);
      stack.erase(stack.begin() + long(j));
    }
  }

  // kPyExitEarly: the innermost Python frame ended at `t`, before its return event. It stays on
  // the stack as a ghost (so that the return event finds it) under which nothing nests.
  void exit_early(std::vector<Open>& stack, int64_t t) {
    for (size_t i = stack.size(); i-- > 0;) {
      if (stack[i].kind != OpenKind::kPython) continue;
      if (stack[i].event == kGhost) return;  // already ended (a second finalizer)
      close(stack[i], t);
      stack[i].event = kGhost;
      stack[i].initial = false;
      ++ghosts_;
      return;
    }
  }

  // Threads that were running Python code at start but recorded nothing (blocked the whole
  // session): their frames are open from start to stop.
  void replay_threads_without_events(int64_t pid) {
    for (size_t s = 0; s < raw_.initial_stacks.size(); ++s) {
      if (s < initial_stack_taken_.size() && initial_stack_taken_[s]) continue;
      const InitialStack& is = raw_.initial_stacks[s];
      if (is.keys.empty()) continue;
      ThreadInfo info;
      info.pid = pid;
      info.os_tid = is.os_tid;
      info.pthread_id = is.pthread_id;
      out_.threads.push_back(info);
      std::vector<Open> stack;
      ghosts_ = 0;
      open_initial_stack(s, uint32_t(out_.threads.size() - 1), stack);
      for (const Open& o : stack) {
        close(o, out_.stop_ns);
        out_.events[size_t(o.event)].open_at_stop = true;
      }
    }
  }

  void replay_thread(const RawThread& t, uint32_t thread) {
    std::vector<Open> stack;
    ghosts_ = 0;
    for (size_t s = 0; s < raw_.initial_stacks.size(); ++s) {
      const InitialStack& is = raw_.initial_stacks[s];
      if (is.os_tid ? is.os_tid != t.os_tid : is.pthread_id != t.pthread_id) continue;
      // Without an OS id, the first buffer of that pthread id takes the stack (threads are
      // replayed in buffer-creation order); a later thread reusing the id starts empty.
      if (s >= initial_stack_taken_.size() || !initial_stack_taken_[s]) {
        open_initial_stack(s, thread, stack);
      }
      break;
    }
    const auto& d = t.data;
    auto open_python = [&](int64_t ts, uint32_t symbol) {
      int64_t ev = open_event(ts, symbol, EventCategory::kPythonFunction, thread, stack);
      stack.push_back({ev, 0, OpenKind::kPython, false, 0});
    };
    // A compact event (raw_event.h); false once it lies after the stop.
    uint64_t base_ticks = 0;
    bool have_base = false;
    auto compact = [&](uint64_t e) {
      if (!have_base) return true;  // (cannot happen: every chunk starts its pairs with a base)
      const uint64_t ticks = base_ticks + internal::compact_delta(e);
      if (ticks > raw_.stop_ticks) return false;
      const int64_t ts = raw_.clock.to_ns(ticks);
      if (internal::compact_is_return(e)) {
        pop_kind(stack, OpenKind::kPython, ts);
      } else if (const uint32_t index = internal::compact_index(e);
                 index < compact_symbols_.size()) {
        // Compact indices are dense: a vector lookup instead of hashing the key per call.
        uint32_t& symbol = compact_symbols_[index];
        if (symbol == kNoSymbol) symbol = symbol_for_key(raw_.compact_keys[index], true);
        open_python(ts, symbol);
      }
      return true;
    };
    uint64_t seq = d.first_seq;
    for (const internal::RawEvent& raw : d.events) {
      const uint64_t this_seq = seq++;
      if (internal::is_compact_pair(raw.word)) {
        // first half in `word`, second (if written) in `ticks`
        if (!compact(raw.word) || (raw.ticks != 0 && !compact(raw.ticks))) break;
        continue;
      }
      if (raw.ticks > raw_.stop_ticks) break;  // after the stop: this and later events
      const int64_t ts = raw_.clock.to_ns(raw.ticks);
      const uint64_t payload = internal::payload_of(raw.word);
      switch (internal::kind_of(raw.word)) {
        case EventKind::kRangeBegin:
        case EventKind::kRangeBeginSide: {
          uint32_t symbol;
          uint8_t scope;
          uint32_t detail = UINT32_MAX;
          if (internal::kind_of(raw.word) == EventKind::kRangeBegin) {
            symbol = symbol_for_static(payload & internal::kPointerMask);
            scope = uint8_t(payload >> 48);
          } else {
            if (payload < d.details_base || payload - d.details_base >= d.details.size()) break;
            const internal::RangeDetail& rd = d.details[payload - d.details_base];
            Symbol s;
            s.name = rd.name;
            s.function = rd.name;
            symbol = out_.intern(std::move(s));
            scope = rd.scope;
            if (rd.handle || rd.seq_nr >= 0 || !rd.inputs.empty()) {
              EventDetail det;
              det.handle = rd.handle;
              det.seq_nr = rd.seq_nr;
              det.inputs = rd.inputs;
              if (raw_.config.with_flops) det.flops = internal::estimate_flops(rd.name, rd.inputs);
              out_.details.push_back(std::move(det));
              detail = uint32_t(out_.details.size() - 1);
            }
          }
          int64_t ev = open_event(ts, symbol, category_of_scope(scope), thread, stack);
          out_.events[size_t(ev)].detail = detail;
          auto async = async_ends_.find({t.buffer_index, this_seq});
          if (async != async_ends_.end()) {
            TraceEvent& e = out_.events[size_t(ev)];
            e.dur_ns = std::max<int64_t>(0, raw_.clock.to_ns(async->second) - ts);
            e.async_end = true;
          } else {
            stack.push_back({ev, this_seq, OpenKind::kRange, false, 0});
          }
          break;
        }
        case EventKind::kRangeEnd:
          for (size_t i = stack.size(); i-- > 0;) {
            if (stack[i].kind == OpenKind::kRange && stack[i].begin_seq == payload) {
              close(stack[i], ts);
              stack.erase(stack.begin() + long(i));
              break;
            }
          }
          break;
        case EventKind::kPyCall:
          open_python(ts, symbol_for_key(payload, true));
          break;
        case EventKind::kBase:
          base_ticks = raw.ticks;
          have_base = true;
          break;
        case EventKind::kPyReturn:
          pop_kind(stack, OpenKind::kPython, ts);
          break;
        case EventKind::kCCall: {
          int64_t ev = open_event(ts, symbol_for_key(payload, false), EventCategory::kCFunction,
                                  thread, stack);
          stack.push_back({ev, 0, OpenKind::kC, false, 0});
          break;
        }
        case EventKind::kCReturn:
          pop_kind(stack, OpenKind::kC, ts);
          break;
        case EventKind::kPyAnchor: {
          // A call at hook depth 0 runs under the pre-existing frame at `payload`: every
          // pre-existing frame above that one has returned by now.
          size_t i = stack.size();
          while (i-- > 0) {
            if (stack[i].initial && stack[i].frame_address == payload) break;
          }
          if (i < stack.size()) {
            while (stack.size() > i + 1 && stack.back().initial) {
              close(stack.back(), ts);
              stack.pop_back();
            }
          }
          break;
        }
        case EventKind::kPyInitialExit:
          close_initial_frame(stack, payload, ts);
          break;
        case EventKind::kPyExitEarly:
          exit_early(stack, ts);
          break;
        case EventKind::kMark: {
          if (payload < d.strings_base || payload - d.strings_base >= d.strings.size()) break;
          Symbol s;
          s.name = d.strings[payload - d.strings_base];
          s.function = s.name;
          int64_t ev =
              open_event(ts, out_.intern(std::move(s)), EventCategory::kMark, thread, stack);
          out_.events[size_t(ev)].dur_ns = -1;
          break;
        }
        case EventKind::kMemory: {
          if (payload < d.memory_base || payload - d.memory_base >= d.memory.size()) break;
          const internal::MemoryRecord& m = d.memory[payload - d.memory_base];
          out_.memory.push_back(MemorySample{ts, thread, m.address, m.bytes, m.total_allocated,
                                             m.total_reserved, m.device});
          break;
        }
        default:
          break;
      }
    }
    for (const Open& o : stack) {
      if (o.event == kGhost) continue;
      close(o, out_.stop_ns);
      out_.events[size_t(o.event)].open_at_stop = true;
    }
  }

  const RawTrace& raw_;
  const KeyResolver& resolver_;
  Trace& out_;
  std::unordered_map<uint64_t, uint32_t> static_names_, python_keys_, c_keys_;
  std::unordered_map<std::pair<uint32_t, uint64_t>, uint64_t, PairHash> async_ends_;
  std::vector<bool> initial_stack_taken_;  // per raw_.initial_stacks entry
  static constexpr uint32_t kNoSymbol = UINT32_MAX;
  std::vector<uint32_t> compact_symbols_;  // symbol by compact index, kNoSymbol until resolved
  size_t ghosts_ = 0;                      // ghost entries in the current thread's stack
};

}  // namespace

Trace replay(const RawTrace& raw, const KeyResolver& resolver) {
  Trace out;
  Replayer(raw, resolver, out).run();
  return out;
}

}  // namespace framescope
