// cpp/core/part_builder.cpp: build_part(): a stopped session's slots, kept as recorded, and what
// they refer to resolved into symbols.
//
// The first of the two steps replay.cpp describes: at stop, the slots of every thread are kept
// as they are (moved, not copied) and what they refer to (code objects, C functions, static
// names, side records) is resolved into symbols once; every reader then replays them.
#include <unistd.h>

#include "flops.h"
#include "session_impl.h"
#include "stream_writer.h"
#include "trace_part.h"

namespace framescope {

using internal::EventKind;

namespace internal {

namespace {

class PartBuilder {
 public:
  PartBuilder(const KeyResolver& resolver, TracePart& part) : resolver_(resolver), part_(part) {
    part_.unknown_python = intern_name("<unknown python function>");
    part_.unknown_c = intern_name("<unknown C function>");
    part_.unknown_range = intern_name("<unknown range>");
  }

  uint32_t intern(Symbol s) {
    auto it = index_.find(s.name);
    if (it != index_.end()) return it->second;
    const uint32_t id = uint32_t(part_.symbols.size());
    index_.emplace(s.name, id);
    part_.symbols.push_back(std::move(s));
    return id;
  }
  uint32_t intern_name(const std::string& name) {
    Symbol s;
    s.name = name;
    s.function = name;
    return intern(std::move(s));
  }

  void resolve_python(uint64_t key) {
    if (part_.keys.python.count(key)) return;
    part_.keys.python.emplace(key, resolve(key, true));
  }
  void resolve_c(uint64_t key) {
    if (part_.keys.c_function.count(key)) return;
    part_.keys.c_function.emplace(key, resolve(key, false));
  }
  void resolve_static(uint64_t ptr) {
    if (part_.keys.static_name.count(ptr)) return;
    part_.keys.static_name.emplace(ptr, intern_name(reinterpret_cast<const char*>(ptr)));
  }
  uint32_t resolve(uint64_t key, bool python) {
    Symbol s;
    const auto& fn = python ? resolver_.python : resolver_.c_function;
    if (fn && fn(key, s)) return intern(std::move(s));
    return python ? part_.unknown_python : part_.unknown_c;
  }

  // Resolves every key a thread's slots refer to (one pass over the slots).
  void scan(const std::vector<RawEvent>& slots) {
    for (const RawEvent& e : slots) {
      if (is_compact_pair(e.word)) continue;  // compact indices are resolved from the table
      const uint64_t payload = payload_of(e.word);
      switch (kind_of(e.word)) {
        case EventKind::kRangeBegin:
          if (payload & kPointerMask) resolve_static(payload & kPointerMask);
          break;
        case EventKind::kPyCall:
          resolve_python(payload);
          break;
        case EventKind::kCCall:
          resolve_c(payload);
          break;
        default:
          break;
      }
    }
  }

 private:
  const KeyResolver& resolver_;
  TracePart& part_;
  std::unordered_map<std::string, uint32_t> index_;
};

// What recycled chunks (keep-newest) or the parent process (after a fork) left open on a
// thread (ThreadBuffer::Snapshot::carried) becomes a run of slots of its own, replayed first,
// numbered right below the kept slots as the stored form wants (runs follow one another): carried
// event i gets seq S + i and kept slot k gets S + c + k, with c carried events and
// S = max(first_seq, c) - c. Range ends and async ends that refer to a begin by its recorded seq
// are renumbered; an end whose begin was lost refers to nothing. Side records of carried ranges
// follow the thread's own (their payloads are renumbered too).
void prepend_carried(RawThread& t, PartThread& pt, TracePart& part) {
  auto& d = t.data;
  const uint64_t c = d.carried.size();
  const uint64_t first = d.first_seq;
  const uint64_t start = std::max(first, c) - c;
  const uint64_t shift = start + c - first;            // added to the kept slots' seqs
  std::unordered_map<uint64_t, uint64_t> carried_seq;  // recorded seq -> new seq
  for (uint64_t i = 0; i < c; ++i) {
    RawEvent& e = d.carried[i];
    if (!is_compact_pair(e.word) && kind_of(e.word) == EventKind::kRangeBeginSide) {
      e.word = pack_word(EventKind::kRangeBeginSide,
                         d.details_base + d.details.size() + payload_of(e.word));
    }
    if (d.carried_seq[i] != ThreadBuffer::kDroppedSeq) carried_seq[d.carried_seq[i]] = start + i;
  }
  auto renumber = [&](uint64_t seq) -> uint64_t {
    if (seq >= first) return seq + shift;
    auto it = carried_seq.find(seq);
    return it != carried_seq.end() ? it->second : kPayloadMask;  // (no begin has that seq)
  };
  for (RawEvent& e : d.events) {
    if (!is_compact_pair(e.word) && kind_of(e.word) == EventKind::kRangeEnd) {
      e.word = pack_word(EventKind::kRangeEnd, renumber(payload_of(e.word)));
    }
  }
  for (PartAsyncEnd& ae : part.async_ends) {
    if (ae.buffer_index == t.buffer_index) ae.begin_seq = renumber(ae.begin_seq);
  }
  pt.first_seq = start;
  part.owned_slots.push_back(std::move(d.carried));
  const auto& slots = part.owned_slots.back();
  pt.runs.push_back({slots.data(), slots.size()});
}

// Threads that were running Python code at start but recorded nothing (blocked the whole
// session): a thread of their own each, whose frames from the start stay open until the stop.
void add_threads_without_events(const RawTrace& raw, const std::vector<bool>& initial_taken,
                                const std::vector<std::pair<uint64_t, std::string>>& names,
                                PartBuilder& b, TracePart& part) {
  const int64_t pid = getpid();
  for (size_t s = 0; s < raw.initial_stacks.size(); ++s) {
    const InitialStack& is = raw.initial_stacks[s];
    if (initial_taken[s] || is.keys.empty()) continue;
    PartThread pt;
    pt.info.pid = pid;
    pt.info.os_tid = is.os_tid;
    pt.info.pthread_id = is.pthread_id;
    for (const auto& [ident, name] : names) {
      if (ident == is.os_tid) pt.info.name = name;
    }
    pt.buffer_index = UINT32_MAX;  // no buffer: no range of it can end elsewhere
    for (size_t i = 0; i < is.keys.size(); ++i) {
      b.resolve_python(is.keys[i]);
      pt.initial.push_back({part.keys.python[is.keys[i]],
                            i < is.frame_addresses.size() ? is.frame_addresses[i] : 0});
    }
    part.threads.push_back(std::move(pt));
  }
}

}  // namespace

std::shared_ptr<TracePart> build_part(RawTrace&& raw, const KeyResolver& resolver,
                                      const std::vector<std::pair<uint64_t, std::string>>& names,
                                      const RecordedKeys* more) {
  auto part = std::make_shared<TracePart>();
  PartBuilder b(resolver, *part);
  if (more) {
    for (uint64_t key : more->python) b.resolve_python(key);
    for (uint64_t key : more->c_function) b.resolve_c(key);
    for (uint64_t ptr : more->static_name) b.resolve_static(ptr);
  }
  part->clock = raw.clock;
  part->start_ticks = raw.start_ticks;
  part->stop_ticks = raw.stop_ticks;
  part->with_flops = raw.config.with_flops;
  part->warnings = raw.warnings;
  part->keys.compact.resize(raw.compact_keys.size());
  for (size_t i = 0; i < raw.compact_keys.size(); ++i) {
    b.resolve_python(raw.compact_keys[i]);
    part->keys.compact[i] = part->keys.python[raw.compact_keys[i]];
  }
  // Threads may still append for a moment after the stop time was taken (they read the
  // session epoch before it was cleared). Such events lie outside the session window and are
  // ignored by the replay, so that everything fits inside [start, stop].
  for (const AsyncEnd& ae : raw.async_ends) {
    if (ae.ticks <= raw.stop_ticks)
      part->async_ends.push_back({ae.buffer_index, ae.begin_seq, ae.ticks});
  }
  // An end on another thread is an event kept too (in the session, not in a slot): counted, so
  // that recorded + dropped events are all the events produced, whichever thread ended a range.
  part->recorded_events += part->async_ends.size();
  // Events of exited threads that keep-newest let go of, with their threads (session.cpp).
  part->dropped_events += raw.evicted_events;
  const int64_t pid = getpid();
  std::vector<bool> initial_taken(raw.initial_stacks.size(), false);
  part->owned_slots.reserve(raw.threads.size());
  for (RawThread& t : raw.threads) {
    PartThread pt;
    pt.info.pid = pid;
    pt.info.os_tid = t.os_tid;
    pt.info.pthread_id = t.pthread_id;
    pt.info.logical_tid = t.logical_tid;
    for (const CpuReading& c : t.cpu) {
      pt.info.cpu_samples.push_back({raw.clock.to_ns(c.ticks), c.cpu_ns});
    }
    for (const auto& [ident, name] : names) {
      if (ident == t.os_tid) pt.info.name = name;
    }
    pt.buffer_index = t.buffer_index;
    pt.first_seq = t.data.first_seq;
    pt.dropped = t.data.dropped;
    part->dropped_events += t.data.dropped;
    part->recorded_events += count_events(t.data.events);
    b.scan(t.data.events);
    // Frames running at start. Without an OS id, the first buffer of that pthread id takes the
    // stack (buffers come in creation order); a later thread reusing the id starts empty.
    for (size_t s = 0; s < raw.initial_stacks.size(); ++s) {
      const InitialStack& is = raw.initial_stacks[s];
      if (is.os_tid ? is.os_tid != t.os_tid : is.pthread_id != t.pthread_id) continue;
      if (initial_taken[s]) break;
      initial_taken[s] = true;
      for (size_t i = 0; i < is.keys.size(); ++i) {
        b.resolve_python(is.keys[i]);
        pt.initial.push_back({part->keys.python[is.keys[i]],
                              i < is.frame_addresses.size() ? is.frame_addresses[i] : 0});
      }
      break;
    }
    const auto& d = t.data;
    pt.ranges_base = d.details_base;
    auto store_range = [&](const RangeDetail& rd) {
      StoredRange r;
      r.symbol = b.intern_name(rd.name);
      r.scope = rd.scope;
      if (rd.handle || rd.seq_nr >= 0 || !rd.inputs.empty()) {
        EventDetail det;
        det.handle = rd.handle;
        det.seq_nr = rd.seq_nr;
        det.inputs = rd.inputs;
        if (raw.config.with_flops) det.flops = estimate_flops(rd.name, rd.inputs);
        part->details.push_back(std::move(det));
        r.detail = uint32_t(part->details.size() - 1);
      }
      pt.ranges.push_back(r);
    };
    for (const RangeDetail& rd : d.details) store_range(rd);
    for (const RangeDetail& rd : d.carried_details) store_range(rd);
    pt.marks_base = d.strings_base;
    for (const std::string& s : d.strings) pt.marks.push_back(b.intern_name(s));
    pt.memory_base = d.memory_base;
    pt.memory = d.memory;
    if (!t.data.carried.empty()) {
      b.scan(t.data.carried);
      part->recorded_events += count_events(t.data.carried);
      prepend_carried(t, pt, *part);
    }
    // The slots themselves are kept as recorded (moved, not copied).
    part->owned_slots.push_back(std::move(t.data.events));
    const auto& slots = part->owned_slots.back();
    if (!slots.empty()) pt.runs.push_back({slots.data(), slots.size()});
    part->threads.push_back(std::move(pt));
  }
  add_threads_without_events(raw, initial_taken, names, b, *part);
  return part;
}

}  // namespace internal

}  // namespace framescope
