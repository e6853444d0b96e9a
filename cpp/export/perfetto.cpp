// cpp/export/perfetto.cpp: Perfetto protobuf writer (TrackEvent), hand-encoded, streaming.
//
// Layout of the output (field numbers from perfetto's protos/perfetto/trace/*.proto):
//   sequence 1: TrackDescriptors (a track per process, per thread; counter tracks for memory
//               and a track per async range, both emitted when first needed), async ranges
//               with absolute timestamps; asyncio Tasks' tracks (task_tracks.h): a descriptor
//               at the Task's first step on a thread, then its lifetime's and steps' slices,
//               with absolute timestamps, in time order per track.
//   sequence 2+i, one per thread i: a first packet that clears the incremental state, defines a
//               sequence-scoped incremental clock (id 64) by a ClockSnapshot and sets
//               TracePacketDefaults (that clock, the thread's track); then one packet per
//               slice begin/end, instant or counter value, whose timestamp is the delta from the
//               previous packet. Names, categories and source locations are interned on first
//               use (InternedData in the packet that first needs them, iid = symbol + 1).
// A slice begin thus costs ~12-16 bytes, an end ~9.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "framescope/writers.h"
#include "nesting_adapter.h"
#include "process_names.h"
#include "task_tracks.h"
#include "text_buffer.h"

namespace framescope {
namespace exporters {

namespace {

// TracePacket fields
constexpr uint32_t kPacketTimestamp = 8, kPacketClockId = 58, kPacketSeqId = 10,
                   kPacketTrackEvent = 11, kPacketInterned = 12, kPacketFlags = 13,
                   kPacketDefaults = 59, kPacketClockSnapshot = 6, kPacketDescriptor = 60;
// TrackEvent fields
constexpr uint32_t kEvCategoryIids = 3, kEvAnnotations = 4, kEvType = 9, kEvNameIid = 10,
                   kEvTrackUuid = 11, kEvName = 23, kEvCounterValue = 30, kEvSourceLocIid = 34;
constexpr uint32_t kSliceBegin = 1, kSliceEnd = 2, kInstant = 3, kCounter = 4;
constexpr uint32_t kClockBoottime = 6, kClockIncremental = 64;
constexpr uint32_t kIncrementalStateCleared = 1, kNeedsIncrementalState = 2;

// A varint at `p`; returns the end.
inline char* put_varint(char* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = char(uint8_t(v) | 0x80);
    v >>= 7;
  }
  *p++ = char(v);
  return p;
}

// Protobuf wire encoding into a std::string.
struct Pb {
  std::string& b;
  void varint(uint64_t v) {
    char tmp[10];
    size_t n = 0;
    while (v >= 0x80) {
      tmp[n++] = char(uint8_t(v) | 0x80);
      v >>= 7;
    }
    tmp[n++] = char(v);
    b.append(tmp, n);
  }
  void key(uint32_t field, uint32_t wire) { varint((uint64_t(field) << 3) | wire); }
  void uint(uint32_t field, uint64_t v) {
    key(field, 0);
    varint(v);
  }
  void sint(uint32_t field, int64_t v) { uint(field, uint64_t(v)); }  // int32/int64 fields
  void bytes(uint32_t field, std::string_view s) {
    key(field, 2);
    varint(s.size());
    b.append(s.data(), s.size());
  }
};

class PerfettoWriter final : public TraceVisitor {
 public:
  PerfettoWriter(OutputSink& out, int64_t base) : out_(out), base_(base) {}

  void begin_trace(const TraceView& v) override {
    view_ = &v;
    tasks_.begin_trace(v);
    names_.reserve(v.symbols.size());
    for (const Symbol& s : v.symbols) names_.push_back(valid_utf8(s.name));
    interned_gen_.assign(v.symbols.size(), 0);
    loc_gen_.assign(v.symbols.size(), 0);
    for (size_t i = 0; i < v.threads.size(); ++i) {
      const ThreadInfo& th = v.threads[i];
      const uint64_t puuid = process_uuid(th.pid);
      if (std::find(pids_.begin(), pids_.end(), th.pid) == pids_.end()) {
        pids_.push_back(th.pid);
        std::string d;
        Pb p{d};
        p.uint(1, puuid);
        std::string proc;
        Pb pp{proc};
        pp.sint(1, th.pid);
        pp.bytes(6, valid_utf8(process_display_name(v, th.pid)));
        if (const ProcessInfo* info = find_process(v, th.pid)) {
          pp.sint(3, info->sort_index);  // legacy_sort_index
          for (const std::string& label : info->labels) pp.bytes(8, valid_utf8(label));
        }
        p.bytes(3, proc);
        descriptor_packet(d);
      }
      std::string d;
      Pb p{d};
      p.uint(1, thread_uuid(uint32_t(i)));
      p.uint(5, puuid);
      std::string td;
      Pb tp{td};
      tp.sint(1, th.pid);
      tp.sint(2, int64_t(th.os_tid));
      tp.bytes(5, th.name.empty() ? "thread " + std::to_string(th.os_tid) : valid_utf8(th.name));
      p.bytes(4, td);
      descriptor_packet(d);
    }
  }

  void begin_thread(uint32_t thread) override {
    tasks_.begin_thread();
    thread_ = thread;
    seq_ = thread + 2;
    ++gen_;
    categories_interned_ = 0;
    last_ts_ = base_;
    // Clears the incremental state, defines the incremental clock, sets the defaults.
    std::string pkt;
    Pb p{pkt};
    p.uint(kPacketTimestamp, uint64_t(base_));
    p.uint(kPacketClockId, kClockBoottime);
    p.uint(kPacketSeqId, seq_);
    p.uint(kPacketFlags, kIncrementalStateCleared);
    std::string snap, clock;
    Pb sp{snap}, cp{clock};
    cp.uint(1, kClockBoottime);
    cp.uint(2, uint64_t(base_));
    sp.bytes(1, clock);
    clock.clear();
    cp.uint(1, kClockIncremental);
    cp.uint(2, uint64_t(base_));
    cp.uint(3, 1);  // is_incremental
    sp.bytes(1, clock);
    p.bytes(kPacketClockSnapshot, snap);
    std::string defaults, ted;
    Pb dp{defaults}, tp{ted};
    tp.uint(11, thread_uuid(thread));  // TrackEventDefaults.track_uuid
    dp.uint(58, kClockIncremental);    // TracePacketDefaults.timestamp_clock_id
    dp.bytes(11, ted);                 // TracePacketDefaults.track_event_defaults
    p.bytes(kPacketDefaults, defaults);
    packet(pkt);
  }

  void slice_begin(const Slice& s) override { event(s, kSliceBegin, s.start_ns); }
  void slice_end(const Slice& s) override {
    if (tasks_.is_step(s)) task_step(s);
    event(s, kSliceEnd, s.start_ns + s.dur_ns);
  }
  void end_thread(uint32_t) override {
    // The lifetimes of the Tasks that ran on this thread end with their last step.
    for (const TaskTracks::Track& t : tasks_.thread_tracks()) {
      absolute_slice(task_uuid(t), kSliceEnd, t.end_ns, {});
    }
  }
  void instant(const Slice& s) override { event(s, kInstant, s.start_ns); }
  void async_slice(const Slice& s) override { async_.push_back(s); }

  void memory(const MemorySample& m) override {
    if (m.device == kPythonAllocatorDevice) {
      python_allocations(m);
      return;
    }
    const int64_t pid = view_->threads[m.thread].pid;
    const uint64_t uuid = counter_uuid(pid);
    if (std::find(counter_pids_.begin(), counter_pids_.end(), pid) == counter_pids_.end()) {
      counter_pids_.push_back(pid);
      for (int k = 0; k < 2; ++k) {
        std::string d, c;
        Pb p{d}, cp{c};
        p.uint(1, uuid + uint64_t(k));
        p.uint(5, process_uuid(pid));
        p.bytes(2, k == 0 ? "Total Allocated" : "Total Reserved");
        cp.uint(3, 3);  // CounterDescriptor.unit = UNIT_SIZE_BYTES
        p.bytes(8, c);
        descriptor_packet(d);
      }
    }
    for (int k = 0; k < 2; ++k) {
      std::string te;
      Pb e{te};
      e.uint(kEvType, kCounter);
      e.uint(kEvTrackUuid, uuid + uint64_t(k));
      e.sint(kEvCounterValue, k == 0 ? m.total_allocated : m.total_reserved);
      std::string pkt;
      Pb p{pkt};
      timestamp(p, m.time_ns);
      p.bytes(kPacketTrackEvent, te);
      p.uint(kPacketSeqId, seq_);
      packet(pkt);
    }
  }

  // A step of an asyncio Task on the Task's track (a child of its process): the track's
  // descriptor and the lifetime's begin at its first step on this thread. (The lifetime begins
  // when its first step does: the packets of one sequence keep their order among equal
  // timestamps, so the lifetime is the outer slice.)
  void task_step(const Slice& s) {
    bool first = false;
    const TaskTracks::Track& t = tasks_.add_step(s, &first);
    const uint64_t uuid = task_uuid(t);
    if (first) {
      std::string d;
      Pb p{d};
      p.uint(1, uuid);
      p.bytes(2, valid_utf8(t.name));
      p.uint(5, process_uuid(view_->threads[s.thread].pid));
      descriptor_packet(d);
      absolute_slice(uuid, kSliceBegin, s.start_ns, valid_utf8(t.name));
    }
    absolute_slice(uuid, kSliceBegin, s.start_ns, "step");
    absolute_slice(uuid, kSliceEnd, s.start_ns + s.dur_ns, {});
  }
  static uint64_t task_uuid(const TaskTracks::Track& t) { return (uint64_t(7) << 60) + t.ordinal; }
  // A slice begin (with its name) or end on track `uuid`, on the descriptor sequence with an
  // absolute timestamp.
  void absolute_slice(uint64_t uuid, uint32_t type, int64_t ts, std::string_view name) {
    std::string te, pkt;
    Pb e{te}, pp{pkt};
    e.uint(kEvType, type);
    e.uint(kEvTrackUuid, uuid);
    if (type == kSliceBegin) {
      e.bytes(kEvName, name);
      e.bytes(22, kTaskCategory);  // TrackEvent.categories
    }
    pp.uint(kPacketTimestamp, uint64_t(ts));
    pp.uint(kPacketClockId, kClockBoottime);
    pp.bytes(kPacketTrackEvent, te);
    pp.uint(kPacketSeqId, 1);
    packet(pkt);
  }

  void end_trace() override {
    // Ranges that ended on another thread: each on a track of its own under its process (they
    // may overlap anything), with absolute timestamps on the descriptor sequence.
    uint64_t n = 0;
    for (const Slice& s : async_) {
      const uint64_t uuid = (uint64_t(3) << 60) + n++;
      std::string d;
      Pb p{d};
      p.uint(1, uuid);
      p.uint(5, process_uuid(view_->threads[s.thread].pid));
      p.bytes(2, names_[s.symbol]);
      descriptor_packet(d);
      for (int k = 0; k < 2; ++k) {
        std::string te, pkt;
        Pb e{te}, pp{pkt};
        e.uint(kEvType, k == 0 ? kSliceBegin : kSliceEnd);
        e.uint(kEvTrackUuid, uuid);
        if (k == 0) {
          e.bytes(kEvName, names_[s.symbol]);
          e.bytes(22, s.host ? "host" : category_name(s.category));  // TrackEvent.categories
        }
        pp.uint(kPacketTimestamp, uint64_t(k == 0 ? s.start_ns : s.start_ns + s.dur_ns));
        pp.uint(kPacketClockId, kClockBoottime);
        pp.bytes(kPacketTrackEvent, te);
        pp.uint(kPacketSeqId, 1);
        packet(pkt);
      }
    }
    out_.flush();
  }

 private:
  static uint64_t process_uuid(int64_t pid) {
    return (uint64_t(1) << 60) + uint64_t(pid & 0xffffffff);
  }
  static uint64_t thread_uuid(uint32_t thread) { return (uint64_t(2) << 60) + thread; }
  static uint64_t counter_uuid(int64_t pid) {
    return (uint64_t(4) << 60) + (uint64_t(pid & 0xffffffff) << 1);
  }
  static uint64_t python_allocated_uuid(uint32_t thread) { return (uint64_t(5) << 60) + thread; }

  // Python's allocations (profile_memory): a counter track under the thread's track, of the bytes
  // the thread allocated since the session started.
  void python_allocations(const MemorySample& m) {
    const uint64_t uuid = python_allocated_uuid(m.thread);
    if (std::find(python_counter_threads_.begin(), python_counter_threads_.end(), m.thread) ==
        python_counter_threads_.end()) {
      python_counter_threads_.push_back(m.thread);
      std::string d, c;
      Pb p{d}, cp{c};
      p.uint(1, uuid);
      p.uint(5, thread_uuid(m.thread));
      p.bytes(2, "Python allocated bytes");
      cp.uint(3, 3);  // CounterDescriptor.unit = UNIT_SIZE_BYTES
      p.bytes(8, c);
      descriptor_packet(d);
    }
    std::string te;
    Pb e{te};
    e.uint(kEvType, kCounter);
    e.uint(kEvTrackUuid, uuid);
    e.sint(kEvCounterValue, m.total_allocated);
    std::string pkt;
    Pb p{pkt};
    timestamp(p, m.time_ns);
    p.bytes(kPacketTrackEvent, te);
    p.uint(kPacketSeqId, seq_);
    packet(pkt);
  }

  // Appends a packet (Trace.packet, field 1) holding `body`.
  void packet(const std::string& body) {
    std::string& b = out_.raw();
    Pb p{b};
    p.bytes(1, body);
    out_.maybe_flush();
  }
  void descriptor_packet(const std::string& descriptor) {
    std::string pkt;
    Pb p{pkt};
    p.uint(kPacketSeqId, 1);
    p.bytes(kPacketDescriptor, descriptor);
    packet(pkt);
  }
  // The packet's timestamp: a delta on the incremental clock, or (before the previous event,
  // which a well-formed replay never does) an absolute one that leaves the clock as it was.
  void timestamp(Pb& p, int64_t ts) {
    if (ts >= last_ts_) {
      p.uint(kPacketTimestamp, uint64_t(ts - last_ts_));
      last_ts_ = ts;
    } else {
      p.uint(kPacketTimestamp, uint64_t(ts));
      p.uint(kPacketClockId, kClockBoottime);
    }
  }

  void event(const Slice& s, uint32_t type, int64_t ts) {
    std::string& b = out_.raw();
    // The common case (no interning, no args) is assembled in place: packet tag, a one-byte
    // length filled in afterwards, then the fields.
    const bool begins = type != kSliceEnd;
    const uint32_t cat = s.host ? 7 : uint32_t(s.category) + 1;  // 7: "host" (fits the mask)
    const Symbol& sym = view_->symbols[s.symbol];
    const bool has_location = begins && !sym.file.empty() && sym.file != "~";
    const bool need_name = begins && interned_gen_[s.symbol] != gen_;
    const bool need_cat = begins && !(categories_interned_ & (1u << cat));
    const bool need_loc = has_location && loc_gen_[s.symbol] != gen_;
    if (!(need_name || need_cat || need_loc) && !(type == kSliceBegin && s.detail != UINT32_MAX)) {
      // Hot path: at most ~45 bytes, so every length fits one byte; no temporaries.
      char buf[64];
      char* p = buf + 2;
      if (ts >= last_ts_) {
        *p++ = char(kPacketTimestamp << 3);
        p = put_varint(p, uint64_t(ts - last_ts_));
        last_ts_ = ts;
      } else {
        *p++ = char(kPacketTimestamp << 3);
        p = put_varint(p, uint64_t(ts));
        p = put_varint(p, uint64_t(kPacketClockId) << 3);
        *p++ = char(kClockBoottime);
      }
      *p++ = char((kPacketTrackEvent << 3) | 2);
      char* te_len = p++;
      char* te = p;
      if (begins) {
        *p++ = char(kEvCategoryIids << 3);
        p = put_varint(p, cat);
      }
      *p++ = char(kEvType << 3);
      *p++ = char(type);
      if (begins) {
        *p++ = char(kEvNameIid << 3);
        p = put_varint(p, uint64_t(s.symbol) + 1);
      }
      if (has_location) {
        p = put_varint(p, uint64_t(kEvSourceLocIid) << 3);
        p = put_varint(p, uint64_t(s.symbol) + 1);
      }
      *te_len = char(p - te);
      *p++ = char(kPacketSeqId << 3);
      p = put_varint(p, seq_);
      buf[0] = char((1 << 3) | 2);  // Trace.packet
      buf[1] = char(p - (buf + 2));
      b.append(buf, size_t(p - buf));
      out_.maybe_flush();
      return;
    }
    std::string interned;
    if (need_name || need_cat || need_loc) {
      Pb ip{interned};
      std::string entry;
      Pb ep{entry};
      if (need_cat) {
        ep.uint(1, cat);
        ep.bytes(2, s.host ? "host" : category_name(s.category));
        ip.bytes(1, entry);  // InternedData.event_categories
        categories_interned_ |= 1u << cat;
      }
      if (need_name) {
        entry.clear();
        ep.uint(1, uint64_t(s.symbol) + 1);
        ep.bytes(2, names_[s.symbol]);
        ip.bytes(2, entry);  // InternedData.event_names
        interned_gen_[s.symbol] = gen_;
      }
      if (need_loc) {
        entry.clear();
        ep.uint(1, uint64_t(s.symbol) + 1);
        ep.bytes(2, valid_utf8(sym.file));
        ep.bytes(3, valid_utf8(sym.function));
        ep.uint(4, uint64_t(uint32_t(sym.line)));
        ip.bytes(4, entry);  // InternedData.source_locations
        loc_gen_[s.symbol] = gen_;
      }
    }
    std::string te;
    Pb e{te};
    if (begins) e.uint(kEvCategoryIids, cat);
    e.uint(kEvType, type);
    if (begins) e.uint(kEvNameIid, uint64_t(s.symbol) + 1);
    if (has_location) e.uint(kEvSourceLocIid, uint64_t(s.symbol) + 1);
    if (type == kSliceBegin && s.detail != UINT32_MAX) annotations(e, view_->details[s.detail]);
    std::string pkt;
    Pb p{pkt};
    timestamp(p, ts);
    if (!interned.empty()) {
      p.bytes(kPacketInterned, interned);
    }
    p.bytes(kPacketTrackEvent, te);
    p.uint(kPacketSeqId, seq_);
    if (!interned.empty()) p.uint(kPacketFlags, kNeedsIncrementalState);
    Pb out{b};
    out.bytes(1, pkt);
    out_.maybe_flush();
  }

  static void annotations(Pb& e, const EventDetail& d) {
    auto add_int = [&](const char* name, int64_t v) {
      std::string a;
      Pb ap{a};
      ap.bytes(10, name);
      ap.sint(4, v);
      e.bytes(kEvAnnotations, a);
    };
    auto add_str = [&](const char* name, const std::string& v) {
      std::string a;
      Pb ap{a};
      ap.bytes(10, name);
      ap.bytes(6, valid_utf8(v));
      e.bytes(kEvAnnotations, a);
    };
    if (d.handle) add_int("Record function id", int64_t(d.handle));
    if (d.seq_nr >= 0) add_int("Sequence number", d.seq_nr);
    if (d.flops >= 0) add_int("flops", d.flops);
    if (!d.inputs.empty()) {
      std::string dims = "[", types = "[";
      for (size_t i = 0; i < d.inputs.size(); ++i) {
        const RangeInput& in = d.inputs[i];
        if (i) {
          dims += ",";
          types += ",";
        }
        if (in.kind == RangeInput::Kind::kShape) {
          dims += "[";
          for (size_t k = 0; k < in.shape.size(); ++k) {
            if (k) dims += ",";
            dims += std::to_string(in.shape[k]);
          }
          dims += "]";
          types += in.text.empty() ? "Tensor" : in.text;
        } else {
          dims += "[]";
          types += in.kind == RangeInput::Kind::kString ? "str" : "Scalar";
        }
      }
      add_str("Input Dims", dims + "]");
      add_str("Input type", types + "]");
    }
  }

  TextBuffer out_;
  int64_t base_;
  const TraceView* view_ = nullptr;
  std::vector<std::string> names_;  // valid UTF-8, per symbol
  std::vector<uint32_t> interned_gen_, loc_gen_;
  uint32_t gen_ = 0;  // one per thread sequence: "interned on this sequence" = gen matches
  uint32_t categories_interned_ = 0;
  uint32_t thread_ = 0;
  uint64_t seq_ = 0;
  int64_t last_ts_ = 0;
  std::vector<int64_t> pids_, counter_pids_;
  std::vector<uint32_t> python_counter_threads_;
  std::vector<Slice> async_;
  TaskTracks tasks_;  // asyncio Tasks' tracks
};

}  // namespace
}  // namespace exporters

void write_perfetto(const TraceSource& source, OutputSink& out) {
  exporters::PerfettoWriter w(out, source.time_base_ns());
  exporters::NestingAdapter nested(w);
  source.visit(nested);
}

}  // namespace framescope
