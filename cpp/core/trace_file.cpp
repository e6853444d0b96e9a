// cpp/core/trace_file.cpp: the .fstrace format: StoredTrace serialize/deserialize, mapped load.
//
// File layout (little-endian):
//   "FSTRACE2" u32 version=2 u32 0                                     16 bytes
//   records: u32 type | u32 aux | u64 payload length | payload | zero padding to 16 bytes
//     kPart    (1): a part starts: time offset, clock calibration, start/stop ticks
//     kChunk   (2): aux = thread buffer index; u64 first seq, u64 slot count, slots (16 B each)
//     kTables  (3): the part's tables (symbols, key tables, threads, details...); ends the part
//     kProcesses (4): the trace's process table (pid, name, labels, sort index, metadata);
//                     optional, at most one, between parts (written after the last)
// Slot payloads start 16-byte aligned in the file, so a mapped file is replayed in place.
// Chunks of a part come before its tables, in any order between threads but in sequence within
// one: that is what lets a running session append chunks as they fill (streaming capture) and
// write the tables only at stop.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>

#include "byte_reader.h"
#include "framescope/stored_trace.h"
#include "mapped_file.h"
#include "trace_file.h"
#include "trace_part.h"

namespace framescope {

namespace internal {

namespace {

constexpr uint32_t kNoBuffer = UINT32_MAX;
constexpr char kMagic[8] = {'F', 'S', 'T', 'R', 'A', 'C', 'E', '2'};
constexpr uint32_t kVersion = 2;
constexpr int64_t kMaxTime = int64_t(1) << 61;
bool valid_time(int64_t t) { return t > -kMaxTime && t < kMaxTime; }

[[noreturn]] void fail(const char* what) {
  throw TraceFormatError(std::string("framescope: malformed trace file: ") + what);
}

struct MalformedTraceFile {
  [[noreturn]] void operator()(const char* what) const { fail(what); }
};
using Reader = ByteReader<MalformedTraceFile>;

// In key order, so that the same trace always serializes to the same bytes.
template <class Map>
void write_map(BlockWriter& w, const Map& m) {
  std::vector<std::pair<uint64_t, uint32_t>> sorted(m.begin(), m.end());
  std::sort(sorted.begin(), sorted.end());
  w.pod<uint64_t>(sorted.size());
  for (const auto& [k, v] : sorted) {
    w.pod<uint64_t>(k);
    w.pod<uint32_t>(v);
  }
}

void read_map(Reader& r, std::unordered_map<uint64_t, uint32_t>& m, size_t symbols) {
  const uint64_t n = r.count(12);
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t k = r.pod<uint64_t>();
    const uint32_t v = r.pod<uint32_t>();
    if (v >= symbols) fail("symbol reference");
    m[k] = v;
  }
}

}  // namespace

void BlockWriter::flush() {
  if (!buf_.empty() && &out_ != &null_) {
    out_.write(buf_.data(), buf_.size());
    buf_.clear();
  }
}

void BlockWriter::record(RecordType type, uint32_t aux, std::string_view payload) {
  begin_record(type, aux, payload.size());
  raw(payload.data(), payload.size());
  end_record(payload.size());
}

void BlockWriter::begin_record(RecordType type, uint32_t aux, uint64_t length) {
  pod<uint32_t>(uint32_t(type));
  pod<uint32_t>(aux);
  pod<uint64_t>(length);
}

void BlockWriter::end_record(uint64_t length) {
  static const char kZeros[16] = {};
  if (length % 16) raw(kZeros, 16 - length % 16);
}

void BlockWriter::raw(const char* data, size_t n) {
  if (&out_ == &null_) {  // no sink: everything stays in the buffer
    buf_.append(data, n);
    return;
  }
  if (n >= (1u << 16)) {
    flush();
    out_.write(data, n);
  } else {
    buf_.append(data, n);
    if (buf_.size() >= (1u << 20)) flush();
  }
}

void write_file_header(BlockWriter& w) {
  w.raw(kMagic, sizeof kMagic);
  w.pod<uint32_t>(kVersion);
  w.pod<uint32_t>(0);
}

void write_part_header(BlockWriter& w, const TracePart& part, int64_t offset_ns) {
  BlockWriter p;
  p.pod<int64_t>(offset_ns);
  const ClockConverter::Calibration c = part.clock.calibration();
  p.pod<uint64_t>(c.start_ticks);
  p.pod<uint64_t>(c.start_ns);
  p.pod<double>(c.ticks_per_ns);
  p.pod<uint32_t>(c.ticks_are_ns ? 1 : 0);
  p.pod<uint32_t>(part.with_flops ? 1 : 0);
  p.pod<uint64_t>(part.start_ticks);
  p.pod<uint64_t>(part.stop_ticks);
  w.record(RecordType::kPart, 0, p.buffer());
}

void write_chunk(BlockWriter& w, uint32_t buffer_index, uint64_t first_seq, const RawEvent* slots,
                 uint64_t count) {
  const uint64_t length = 16 + count * sizeof(RawEvent);
  w.begin_record(RecordType::kChunk, buffer_index, length);
  w.pod<uint64_t>(first_seq);
  w.pod<uint64_t>(count);
  w.raw(reinterpret_cast<const char*>(slots), count * sizeof(RawEvent));
  w.end_record(length);
}

void write_part_tables(BlockWriter& w, const TracePart& part, const ThreadInfo* infos) {
  BlockWriter t;
  t.pod<uint64_t>(part.symbols.size());
  for (const Symbol& s : part.symbols) {
    t.str(s.name);
    t.str(s.file);
    t.pod<int32_t>(s.line);
    t.str(s.function);
  }
  t.pod<uint32_t>(part.unknown_python);
  t.pod<uint32_t>(part.unknown_c);
  t.pod<uint32_t>(part.unknown_range);
  t.pod<uint64_t>(part.keys.compact.size());
  for (uint32_t s : part.keys.compact) t.pod<uint32_t>(s);
  write_map(t, part.keys.python);
  write_map(t, part.keys.c_function);
  write_map(t, part.keys.static_name);
  t.pod<uint64_t>(part.threads.size());
  for (size_t i = 0; i < part.threads.size(); ++i) {
    const PartThread& th = part.threads[i];
    const ThreadInfo& info = infos ? infos[i] : th.info;
    t.pod<uint32_t>(th.buffer_index);
    t.pod<int64_t>(info.pid);
    t.pod<uint64_t>(info.os_tid);
    t.pod<uint64_t>(info.pthread_id);
    t.pod<uint64_t>(info.logical_tid);
    t.str(info.name);
    t.pod<uint64_t>(th.first_seq);
    t.pod<uint64_t>(th.ranges_base);
    t.pod<uint64_t>(th.ranges.size());
    for (const StoredRange& r : th.ranges) {
      t.pod<uint32_t>(r.symbol);
      t.pod<uint8_t>(r.scope);
      t.pod<uint32_t>(r.detail);
    }
    t.pod<uint64_t>(th.marks_base);
    t.pod<uint64_t>(th.marks.size());
    for (uint32_t m : th.marks) t.pod<uint32_t>(m);
    t.pod<uint64_t>(th.memory_base);
    t.pod<uint64_t>(th.memory.size());
    for (const MemoryRecord& m : th.memory) {
      t.pod<uint64_t>(m.address);
      t.pod<int64_t>(m.bytes);
      t.pod<int64_t>(m.total_allocated);
      t.pod<int64_t>(m.total_reserved);
      t.pod<int32_t>(m.device);
    }
    t.pod<uint64_t>(th.initial.size());
    for (const StoredFrame& f : th.initial) {
      t.pod<uint32_t>(f.symbol);
      t.pod<uint64_t>(f.address);
    }
    t.pod<uint64_t>(th.dropped);
  }
  t.pod<uint64_t>(part.details.size());
  for (const EventDetail& d : part.details) {
    t.pod<uint64_t>(d.handle);
    t.pod<int64_t>(d.seq_nr);
    t.pod<int64_t>(d.flops);
    t.pod<uint64_t>(d.inputs.size());
    for (const RangeInput& in : d.inputs) write_range_input(t, in);
  }
  t.pod<uint64_t>(part.async_ends.size());
  for (const PartAsyncEnd& a : part.async_ends) {
    t.pod<uint32_t>(a.buffer_index);
    t.pod<uint64_t>(a.begin_seq);
    t.pod<uint64_t>(a.ticks);
  }
  t.pod<uint64_t>(part.warnings.size());
  for (const std::string& s : part.warnings) t.str(s);
  t.pod<uint64_t>(part.recorded_events);
  t.pod<uint64_t>(part.dropped_events);
  // Optional trailer (files without it read as traces without CPU times): per thread, its CPU
  // clock readings.
  t.pod<uint64_t>(part.threads.size());
  for (const PartThread& th : part.threads) {
    t.pod<uint64_t>(th.info.cpu_samples.size());
    for (const CpuSample& c : th.info.cpu_samples) {
      t.pod<int64_t>(c.time_ns);
      t.pod<int64_t>(c.cpu_ns);
    }
  }
  w.record(RecordType::kTables, 0, t.buffer());
}

void write_processes(BlockWriter& w, const std::vector<ProcessInfo>& processes) {
  BlockWriter t;
  t.pod<uint64_t>(processes.size());
  for (const ProcessInfo& p : processes) {
    t.pod<int64_t>(p.pid);
    t.str(p.name);
    t.pod<uint64_t>(p.labels.size());
    for (const std::string& l : p.labels) t.str(l);
    t.pod<int32_t>(p.sort_index);
    t.str(p.metadata);
  }
  w.record(RecordType::kProcesses, 0, t.buffer());
}

namespace {

// The process table of a kProcesses record; pids are unique.
std::vector<ProcessInfo> read_processes(std::string_view payload) {
  Reader r(payload);
  std::vector<ProcessInfo> out;
  const uint64_t n = r.count(36);
  for (uint64_t i = 0; i < n; ++i) {
    ProcessInfo p;
    p.pid = r.pod<int64_t>();
    p.name = r.str();
    const uint64_t k = r.count(8);
    for (uint64_t j = 0; j < k; ++j) p.labels.push_back(r.str());
    p.sort_index = r.pod<int32_t>();
    p.metadata = r.str();
    for (const ProcessInfo& q : out) {
      if (q.pid == p.pid) fail("duplicate process");
    }
    out.push_back(std::move(p));
  }
  if (!r.done()) fail("trailing bytes in the process table");
  return out;
}

struct PendingChunk {
  uint64_t first_seq;
  const RawEvent* slots;
  uint64_t count;
};

// Reads a part's tables into `part` and attaches the chunks collected for its threads.
void read_tables(std::string_view payload, TracePart& part,
                 std::map<uint32_t, std::vector<PendingChunk>>& chunks, MappedSpan span) {
  Reader r(payload);
  uint64_t n = r.count(28);
  for (uint64_t i = 0; i < n; ++i) {
    Symbol s;
    s.name = r.str();
    s.file = r.str();
    s.line = r.pod<int32_t>();
    s.function = r.str();
    part.symbols.push_back(std::move(s));
  }
  const size_t symbols = part.symbols.size();
  part.unknown_python = r.pod<uint32_t>();
  part.unknown_c = r.pod<uint32_t>();
  part.unknown_range = r.pod<uint32_t>();
  if (part.unknown_python >= symbols || part.unknown_c >= symbols ||
      part.unknown_range >= symbols) {
    fail("symbol reference");
  }
  n = r.count(4);
  for (uint64_t i = 0; i < n; ++i) {
    const uint32_t s = r.pod<uint32_t>();
    if (s >= symbols) fail("symbol reference");
    part.keys.compact.push_back(s);
  }
  read_map(r, part.keys.python, symbols);
  read_map(r, part.keys.c_function, symbols);
  read_map(r, part.keys.static_name, symbols);
  n = r.count(96);
  std::vector<uint32_t> buffer_indices;
  for (uint64_t i = 0; i < n; ++i) {
    PartThread th;
    th.buffer_index = r.pod<uint32_t>();
    // UINT32_MAX: a thread that recorded nothing (it ran Python code at start and stayed
    // blocked); any number of them, and no chunk refers to them.
    if (th.buffer_index != kNoBuffer) {
      if (std::find(buffer_indices.begin(), buffer_indices.end(), th.buffer_index) !=
          buffer_indices.end()) {
        fail("duplicate thread");
      }
      buffer_indices.push_back(th.buffer_index);
    }
    th.info.pid = r.pod<int64_t>();
    th.info.os_tid = r.pod<uint64_t>();
    th.info.pthread_id = r.pod<uint64_t>();
    th.info.logical_tid = r.pod<uint64_t>();
    th.info.name = r.str();
    th.first_seq = r.pod<uint64_t>();
    th.ranges_base = r.pod<uint64_t>();
    uint64_t k = r.count(9);
    for (uint64_t j = 0; j < k; ++j) {
      StoredRange sr;
      sr.symbol = r.pod<uint32_t>();
      sr.scope = r.pod<uint8_t>();
      sr.detail = r.pod<uint32_t>();
      if (sr.symbol >= symbols) fail("symbol reference");
      th.ranges.push_back(sr);
    }
    th.marks_base = r.pod<uint64_t>();
    k = r.count(4);
    for (uint64_t j = 0; j < k; ++j) {
      const uint32_t s = r.pod<uint32_t>();
      if (s >= symbols) fail("symbol reference");
      th.marks.push_back(s);
    }
    th.memory_base = r.pod<uint64_t>();
    k = r.count(36);
    for (uint64_t j = 0; j < k; ++j) {
      MemoryRecord m;
      m.address = r.pod<uint64_t>();
      m.bytes = r.pod<int64_t>();
      m.total_allocated = r.pod<int64_t>();
      m.total_reserved = r.pod<int64_t>();
      m.device = r.pod<int32_t>();
      th.memory.push_back(m);
    }
    k = r.count(12);
    for (uint64_t j = 0; j < k; ++j) {
      StoredFrame f;
      f.symbol = r.pod<uint32_t>();
      f.address = r.pod<uint64_t>();
      if (f.symbol >= symbols) fail("symbol reference");
      th.initial.push_back(f);
    }
    th.dropped = r.pod<uint64_t>();
    // The thread's slots: its chunks, which must follow one another without a gap.
    auto it = th.buffer_index == kNoBuffer ? chunks.end() : chunks.find(th.buffer_index);
    if (it != chunks.end()) {
      auto& list = it->second;
      std::sort(list.begin(), list.end(), [](const PendingChunk& a, const PendingChunk& b) {
        return a.first_seq < b.first_seq;
      });
      uint64_t seq = th.first_seq;
      for (const PendingChunk& c : list) {
        if (c.first_seq != seq) fail("chunks of a thread do not follow one another");
        if (c.count > UINT64_MAX - seq) fail("chunk sequence");
        seq += c.count;
        if (c.count) th.runs.push_back({c.slots, c.count});
      }
      chunks.erase(it);
    }
    part.threads.push_back(std::move(th));
  }
  if (!chunks.empty()) fail("chunk of an unknown thread");
  n = r.count(32);
  for (uint64_t i = 0; i < n; ++i) {
    EventDetail d;
    d.handle = r.pod<uint64_t>();
    d.seq_nr = r.pod<int64_t>();
    d.flops = r.pod<int64_t>();
    const uint64_t k = r.count(33);
    for (uint64_t j = 0; j < k; ++j) d.inputs.push_back(read_range_input(r));
    part.details.push_back(std::move(d));
  }
  for (const PartThread& th : part.threads) {
    for (const StoredRange& sr : th.ranges) {
      if (sr.detail != UINT32_MAX && sr.detail >= part.details.size()) fail("detail reference");
    }
  }
  n = r.count(20);
  for (uint64_t i = 0; i < n; ++i) {
    PartAsyncEnd a;
    a.buffer_index = r.pod<uint32_t>();
    a.begin_seq = r.pod<uint64_t>();
    a.ticks = r.pod<uint64_t>();
    part.async_ends.push_back(a);
  }
  n = r.count(8);
  for (uint64_t i = 0; i < n; ++i) part.warnings.push_back(r.str());
  r.pod<uint64_t>();  // recorded events as written: recounted from the slots instead
  uint64_t slot_bytes = 0;
  for (const PartThread& th : part.threads) {
    for (const SlotRun& run : th.runs) slot_bytes += run.count * sizeof(RawEvent);
  }
  part.release_pages = !span.empty() && slot_bytes >= kReleasePagesFrom;
  if (part.release_pages) part.mapped_span = span;
  part.recorded_events = part.async_ends.size();  // as build_part counts them
  for (const PartThread& th : part.threads) {
    for (const SlotRun& run : th.runs) {
      for (uint64_t k = 0; k < run.count;) {
        const uint64_t block_start = k;
        const uint64_t block_end = std::min(run.count, k + kReleaseBlockSlots);
        for (; k < block_end; ++k) {
          const RawEvent& e = run.slots[k];
          if (is_compact_pair(e.word)) {
            part.recorded_events += e.ticks != 0 ? 2 : 1;
          } else if (kind_of(e.word) != EventKind::kPadding &&
                     kind_of(e.word) != EventKind::kBase) {
            ++part.recorded_events;
          }
        }
        if (part.release_pages) release_mapped_pages(span, run.slots + block_start, run.slots + k);
      }
    }
  }
  part.dropped_events = r.pod<uint64_t>();
  if (!r.done()) {  // the CPU readings trailer
    if (r.count(8) != part.threads.size()) fail("CPU readings of unknown threads");
    for (PartThread& th : part.threads) {
      const uint64_t k = r.count(16);
      th.info.cpu_samples.reserve(k);
      for (uint64_t j = 0; j < k; ++j) {
        CpuSample c;
        c.time_ns = r.pod<int64_t>();
        c.cpu_ns = r.pod<int64_t>();
        if (!valid_time(c.time_ns) || c.cpu_ns < 0 ||
            (!th.info.cpu_samples.empty() && (c.time_ns < th.info.cpu_samples.back().time_ns ||
                                              c.cpu_ns < th.info.cpu_samples.back().cpu_ns))) {
          fail("CPU readings out of order");
        }
        th.info.cpu_samples.push_back(c);
      }
    }
    if (!r.done()) fail("trailing bytes in tables");
  }
}

}  // namespace

}  // namespace internal

using internal::BlockWriter;

void StoredTrace::serialize(OutputSink& out) const {
  check_files();  // a loaded file changed on disk (mapped_file.h)
  BlockWriter w(out);
  internal::write_file_header(w);
  for (const PartRef& ref : parts_) {
    const internal::TracePart& part = *ref.part;
    internal::write_part_header(w, part, ref.offset_ns);
    for (const internal::PartThread& th : part.threads) {
      uint64_t seq = th.first_seq;
      for (const internal::SlotRun& run : th.runs) {
        internal::write_chunk(w, th.buffer_index, seq, run.slots, run.count);
        seq += run.count;
      }
    }
    internal::write_part_tables(w, part, threads_.data() + ref.thread_base);
  }
  if (!processes_.empty()) internal::write_processes(w, processes_);
  check_files();  // before the caller commits the output
  w.flush();
}

std::string StoredTrace::serialize() const {
  StringSink sink;
  serialize(sink);
  return std::move(sink.out);
}

StoredTrace StoredTrace::deserialize(std::string_view bytes, std::shared_ptr<const void> owner) {
  return deserialize_impl(bytes, std::move(owner), false);
}

StoredTrace StoredTrace::deserialize_impl(std::string_view bytes, std::shared_ptr<const void> owner,
                                          bool file_mapping) {
  using namespace internal;
  if (bytes.size() < 16 || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    throw TraceFormatError("framescope: not a framescope trace (.fstrace)");
  }
  uint32_t version;
  std::memcpy(&version, bytes.data() + 8, 4);
  if (version != kVersion) throw TraceFormatError("framescope: unsupported .fstrace version");
  // Slots are read in place only when they are suitably aligned and kept alive.
  const bool in_place = owner && reinterpret_cast<uintptr_t>(bytes.data()) % 8 == 0;
  StoredTrace out;
  std::shared_ptr<TracePart> part;
  int64_t offset_ns = 0;
  std::map<uint32_t, std::vector<PendingChunk>> chunks;
  bool have_processes = false;
  size_t pos = 16;
  // Reading a record header faults in the pages around it (the kernel maps up to 64 KiB around
  // a fault): a big mapped file lets go of what the scan passed, as the replay does.
  // Only a file mapping: MADV_DONTNEED would zero an owner's anonymous memory.
  MappedSpan span;
  if (in_place && file_mapping) span = {bytes.data(), bytes.data() + bytes.size()};
  const bool release = !span.empty() && bytes.size() >= kReleasePagesFrom;
  size_t released = 0;
  while (pos < bytes.size()) {
    if (release && pos - released >= kReleaseBlockSlots * sizeof(RawEvent)) {
      release_mapped_pages(span, bytes.data() + released, bytes.data() + pos);
      released = pos;
    }
    if (bytes.size() - pos < 16) fail("truncated record header");
    uint32_t type, aux;
    uint64_t length;
    std::memcpy(&type, bytes.data() + pos, 4);
    std::memcpy(&aux, bytes.data() + pos + 4, 4);
    std::memcpy(&length, bytes.data() + pos + 8, 8);
    pos += 16;
    const uint64_t padded = length + (16 - length % 16) % 16;
    if (length > bytes.size() - pos || padded > bytes.size() - pos) fail("truncated record");
    const std::string_view payload = bytes.substr(pos, length);
    pos += padded;
    switch (RecordType(type)) {
      case RecordType::kPart: {
        if (part) fail("part without tables");
        Reader r(payload);
        offset_ns = r.pod<int64_t>();
        ClockConverter::Calibration c;
        c.start_ticks = r.pod<uint64_t>();
        c.start_ns = r.pod<uint64_t>();
        c.ticks_per_ns = r.pod<double>();
        c.ticks_are_ns = r.pod<uint32_t>() != 0;
        const bool with_flops = r.pod<uint32_t>() != 0;
        part = std::make_shared<TracePart>();
        part->with_flops = with_flops;
        part->start_ticks = r.pod<uint64_t>();
        part->stop_ticks = r.pod<uint64_t>();
        if (!std::isfinite(c.ticks_per_ns) || c.ticks_per_ns < 1e-6 || c.ticks_per_ns > 1e6 ||
            c.start_ns >= uint64_t(kMaxTime) || !valid_time(offset_ns) ||
            (c.ticks_are_ns && part->stop_ticks >= uint64_t(kMaxTime))) {
          fail("clock");
        }
        part->clock = ClockConverter::from_calibration(c);
        if (part->stop_ticks < part->start_ticks) fail("stop before start");
        break;
      }
      case RecordType::kChunk: {
        if (!part) fail("chunk outside a part");
        if (length < 16) fail("chunk header");
        uint64_t first_seq, count;
        std::memcpy(&first_seq, payload.data(), 8);
        std::memcpy(&count, payload.data() + 8, 8);
        if (count != (length - 16) / sizeof(RawEvent) || (length - 16) % sizeof(RawEvent)) {
          fail("chunk size");
        }
        const char* data = payload.data() + 16;
        const RawEvent* slots;
        if (in_place) {
          slots = reinterpret_cast<const RawEvent*>(data);
        } else {
          part->owned_slots.emplace_back(count);
          if (count) std::memcpy(part->owned_slots.back().data(), data, count * sizeof(RawEvent));
          slots = part->owned_slots.back().data();
        }
        chunks[aux].push_back({first_seq, slots, count});
        break;
      }
      case RecordType::kTables: {
        if (!part) fail("tables outside a part");
        read_tables(payload, *part, chunks, span);
        if (in_place) {
          part->mapped = owner;
          if (file_mapping) part->file = static_cast<const MappedFile*>(owner.get());
        }
        out.add_part(std::move(part), offset_ns);
        part.reset();
        break;
      }
      case RecordType::kProcesses: {
        if (part) fail("process table inside a part");
        if (have_processes) fail("second process table");
        have_processes = true;
        out.processes_ = read_processes(payload);
        break;
      }
      default:
        fail("unknown record");
    }
  }
  if (release) release_mapped_pages(span, bytes.data() + released, bytes.data() + bytes.size());
  if (part) {
    throw TraceFormatError(
        "framescope: incomplete trace file: a part has no tables (the session that streamed it "
        "did not stop)");
  }
  return out;
}

namespace {

[[noreturn]] void load_error(const std::string& what, const std::string& path, int err) {
  throw OutputError("framescope: " + what + " '" + path + "': " + std::strerror(err), err, path);
}

// Reads a file that cannot be mapped (a pipe: `<(cat x.fstrace)`, a FIFO, a character device)
// into memory, 8-byte aligned so that its slots are read in place. The magic is checked after
// the first bytes, so that an endless device (/dev/zero) is refused rather than read forever.
StoredTrace load_stream(int fd, const std::string& path) {
  auto buffer = std::make_shared<std::vector<uint64_t>>();
  size_t size = 0;
  bool checked = false;
  for (;;) {
    if (buffer->size() * 8 - size < (size_t(1) << 16)) {
      buffer->resize(std::max<size_t>(buffer->size() * 2, size_t(1) << 13));
    }
    char* base = reinterpret_cast<char*>(buffer->data());
    const ssize_t n = ::read(fd, base + size, buffer->size() * 8 - size);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      load_error("cannot read", path, err);
    }
    if (n == 0) break;
    size += size_t(n);
    if (!checked && size >= 16) {
      checked = true;
      if (std::memcmp(base, internal::kMagic, sizeof internal::kMagic) != 0) break;
    }
  }
  ::close(fd);
  std::string_view bytes(reinterpret_cast<const char*>(buffer->data()), size);
  return StoredTrace::deserialize(bytes, std::shared_ptr<const void>(buffer, buffer->data()));
}

}  // namespace

StoredTrace StoredTrace::load(const std::string& path) {
  if (path.find('\0') != std::string::npos) {
    throw std::invalid_argument("framescope: path contains a NUL byte");
  }
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) load_error("cannot open", path, errno);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    load_error("cannot stat", path, err);
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw OutputError("framescope: cannot load '" + path + "': it is a directory, not a trace file",
                      EISDIR, path);
  }
  if (!S_ISREG(st.st_mode)) return load_stream(fd, path);
  std::shared_ptr<const internal::MappedFile> m;
  try {
    m = internal::MappedFile::map(fd, st, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  std::string_view bytes(m->data(), m->size());
  StoredTrace out = deserialize_impl(bytes, m, true);
  m->check();  // changed while it was being read
  return out;
}

void StoredTrace::check_files() const {
  for (const PartRef& ref : parts_) {
    if (ref.part->file) ref.part->file->check();
  }
}

}  // namespace framescope
