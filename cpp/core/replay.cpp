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
  int64_t event;       // index in Trace::events
  uint64_t begin_seq;  // ranges only
  OpenKind kind;
  bool initial;  // pre-existing Python frame
  uint64_t frame_address;
};

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
    uint64_t carried = 0;
    for (const RawThread& t : raw_.threads) {
      out_.recorded_events += internal::count_events(t.data.events);
      carried += t.data.carried.size();
    }
    uint64_t upper_bound = out_.recorded_events + carried;
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
    e.parent = stack.empty() ? -1 : stack.back().event;
    e.depth = uint32_t(stack.size());
    out_.events.push_back(e);
    return int64_t(out_.events.size() - 1);
  }

  void close(const Open& o, int64_t t) {
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

  void replay_thread(const RawThread& t, uint32_t thread) {
    std::vector<Open> stack;
    const int64_t start = out_.start_ns;
    for (size_t s = 0; s < raw_.initial_stacks.size(); ++s) {
      const InitialStack& is = raw_.initial_stacks[s];
      if (is.os_tid ? is.os_tid != t.os_tid : is.pthread_id != t.pthread_id) continue;
      // Without an OS id, the first buffer of that pthread id takes the stack (threads are
      // replayed in buffer-creation order); a later thread reusing the id starts empty.
      if (initial_stack_taken_.size() <= s) initial_stack_taken_.resize(s + 1, false);
      if (initial_stack_taken_[s]) break;
      initial_stack_taken_[s] = true;
      for (size_t i = 0; i < is.keys.size(); ++i) {
        int64_t ev = open_event(start, symbol_for_key(is.keys[i], true),
                                EventCategory::kPythonFunction, thread, stack);
        stack.push_back({ev, 0, OpenKind::kPython, true,
                         i < is.frame_addresses.size() ? is.frame_addresses[i] : 0});
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
    // One event (slot); false once it lies after the stop. `details` holds the side records
    // its payload may refer to, numbered from `details_base`.
    auto process = [&](const internal::RawEvent& raw, uint64_t this_seq,
                       const std::vector<internal::RangeDetail>& details,
                       uint64_t details_base) -> bool {
      if (internal::is_compact_pair(raw.word)) {
        // first half in `word`, second (if written) in `ticks`
        return compact(raw.word) && (raw.ticks == 0 || compact(raw.ticks));
      }
      if (raw.ticks > raw_.stop_ticks) return false;  // after the stop: this and later events
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
            if (payload < details_base || payload - details_base >= details.size()) break;
            const internal::RangeDetail& rd = details[payload - details_base];
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
      return true;
    };
    // What the events of recycled chunks left open (see ThreadBuffer::Snapshot::carried), then
    // the kept events.
    for (size_t i = 0; i < d.carried.size(); ++i) {
      if (!process(d.carried[i], d.carried_seq[i], d.carried_details, 0)) break;
    }
    uint64_t seq = d.first_seq;
    for (const internal::RawEvent& raw : d.events) {
      if (!process(raw, seq++, d.details, d.details_base)) break;
    }
    for (const Open& o : stack) {
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
};

}  // namespace

Trace replay(const RawTrace& raw, const KeyResolver& resolver) {
  Trace out;
  Replayer(raw, resolver, out).run();
  return out;
}

}  // namespace framescope
