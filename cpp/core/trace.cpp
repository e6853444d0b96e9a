// cpp/core/trace.cpp: symbol interning, merging, per-symbol statistics and binary form of a Trace.
#include "framescope/trace.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <unordered_map>

#include "byte_reader.h"
#include "saturating.h"

namespace framescope {

const char* category_name(EventCategory c) noexcept {
  switch (c) {
    case EventCategory::kPythonFunction:
    case EventCategory::kCFunction:
      return "python_function";
    case EventCategory::kCpuOp:
      return "cpu_op";
    case EventCategory::kUserAnnotation:
      return "user_annotation";
    case EventCategory::kMark:
      return "cpu_instant_event";
    default:
      return "other";
  }
}

uint32_t Trace::intern(Symbol s) {
  auto it = symbol_index_.find(s.name);
  if (it != symbol_index_.end()) return it->second;
  uint32_t id = uint32_t(symbols.size());
  symbol_index_.emplace(s.name, id);
  symbols.push_back(std::move(s));
  return id;
}

void Trace::merge(const Trace& other, int64_t offset_ns) {
  if (&other == this) {
    const Trace copy = other;  // merging with itself: read from a copy while appending
    merge(copy, offset_ns);
    return;
  }
  const bool was_empty = threads.empty() && events.empty();
  std::vector<uint32_t> symbol_map(other.symbols.size());
  for (size_t i = 0; i < other.symbols.size(); ++i) symbol_map[i] = intern(other.symbols[i]);
  const uint32_t thread_base = uint32_t(threads.size());
  const uint32_t detail_base = uint32_t(details.size());
  const int64_t event_base = int64_t(events.size());
  threads.insert(threads.end(), other.threads.begin(), other.threads.end());
  for (size_t i = thread_base; i < threads.size(); ++i) {
    for (CpuSample& c : threads[i].cpu_samples) c.time_ns += offset_ns;
  }
  details.insert(details.end(), other.details.begin(), other.details.end());
  events.reserve(events.size() + other.events.size());
  for (TraceEvent e : other.events) {
    e.start_ns += offset_ns;
    e.symbol = symbol_map[e.symbol];
    e.thread += thread_base;
    if (e.parent >= 0) e.parent += event_base;
    if (e.detail != UINT32_MAX) e.detail += detail_base;
    events.push_back(e);
  }
  for (MemorySample m : other.memory) {
    m.time_ns += offset_ns;
    m.thread += thread_base;
    memory.push_back(m);
  }
  warnings.insert(warnings.end(), other.warnings.begin(), other.warnings.end());
  const int64_t other_start = other.start_ns + offset_ns;
  const int64_t other_stop = other.stop_ns + offset_ns;
  start_ns = was_empty ? other_start : std::min(start_ns, other_start);
  stop_ns = was_empty ? other_stop : std::max(stop_ns, other_stop);
  dropped_events += other.dropped_events;
  recorded_events += other.recorded_events;
}

namespace {
using internal::sat_add;
int64_t end_of(const TraceEvent& e) { return sat_add(e.start_ns, e.dur_ns); }
}  // namespace

std::vector<SymbolStats> Trace::stats() const {
  std::vector<SymbolStats> by_symbol(symbols.size());
  for (size_t i = 0; i < symbols.size(); ++i) by_symbol[i].symbol = uint32_t(i);
  std::vector<int64_t> self(events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    // Instants have no time; a range ended on another thread (async) has no self time and
    // takes none from its parent (KeyAveragesVisitor::async_slice in key_averages.cpp says why).
    if (e.dur_ns < 0 || e.async_end) continue;
    self[i] = sat_add(self[i], e.dur_ns);
    if (e.parent >= 0 && events[size_t(e.parent)].dur_ns >= 0) {
      self[size_t(e.parent)] = sat_add(self[size_t(e.parent)], -e.dur_ns);
    }
  }
  // Inclusive time counts a recursive symbol once: only where no enclosing open event has the
  // same symbol. Events of a thread are in start order, so one pass with a stack per thread.
  std::vector<uint32_t> active(symbols.size(), 0);
  std::vector<size_t> stack;
  uint32_t thread = UINT32_MAX;
  for (size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    if (e.dur_ns < 0) continue;
    if (e.thread != thread) {
      for (size_t j : stack) --active[events[j].symbol];
      stack.clear();
      thread = e.thread;
    }
    while (!stack.empty()) {
      const TraceEvent& top = events[stack.back()];
      if (end_of(top) > e.start_ns ||
          (end_of(top) == e.start_ns && e.parent == int64_t(stack.back()))) {
        break;
      }
      --active[top.symbol];
      stack.pop_back();
    }
    SymbolStats& s = by_symbol[e.symbol];
    s.calls += 1;
    s.self_ns = sat_add(s.self_ns, self[i]);
    if (active[e.symbol] == 0) s.total_ns = sat_add(s.total_ns, e.dur_ns);
    if (e.async_end) continue;  // encloses nothing: never on the stack
    ++active[e.symbol];
    stack.push_back(i);
  }
  std::vector<SymbolStats> out;
  for (auto& s : by_symbol) {
    if (s.calls) out.push_back(s);
  }
  std::sort(out.begin(), out.end(),
            [](const SymbolStats& a, const SymbolStats& b) { return a.self_ns > b.self_ns; });
  return out;
}

// ---------------------------------------------------------------------------------------------
// Binary form: "FSTRACE1", then sections of little-endian fixed-width values and
// length-prefixed strings, in the order written below.

namespace {

class Writer {
 public:
  template <class T>
  void pod(T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    out.append(s);
  }
  std::string out;
};

// The old in-memory serialization has one error for every defect it finds.
struct MalformedSerializedTrace {
  [[noreturn]] void operator()(const char*) const {
    throw std::runtime_error("framescope: malformed serialized trace");
  }
};
using Reader = internal::ByteReader<MalformedSerializedTrace>;
[[noreturn]] void malformed() { MalformedSerializedTrace()(""); }

constexpr char kMagic[8] = {'F', 'S', 'T', 'R', 'A', 'C', 'E', '1'};

// Times and durations of a valid trace are far below this (2^62 ns is ~146 years).
constexpr int64_t kMaxTime = int64_t(1) << 62;
bool valid_time(int64_t t) { return t > -kMaxTime && t < kMaxTime; }

}  // namespace

std::string Trace::serialize() const {
  Writer w;
  w.out.append(kMagic, sizeof kMagic);
  w.pod<int64_t>(start_ns);
  w.pod<int64_t>(stop_ns);
  w.pod<uint64_t>(dropped_events);
  w.pod<uint64_t>(recorded_events);
  w.pod<uint64_t>(symbols.size());
  for (const Symbol& s : symbols) {
    w.str(s.name);
    w.str(s.file);
    w.pod<int32_t>(s.line);
    w.str(s.function);
  }
  w.pod<uint64_t>(threads.size());
  for (const ThreadInfo& t : threads) {
    w.pod<int64_t>(t.pid);
    w.pod<uint64_t>(t.os_tid);
    w.pod<uint64_t>(t.pthread_id);
    w.pod<uint64_t>(t.logical_tid);
    w.str(t.name);
  }
  w.pod<uint64_t>(events.size());
  for (const TraceEvent& e : events) {
    w.pod<int64_t>(e.start_ns);
    w.pod<int64_t>(e.dur_ns);
    w.pod<int64_t>(e.parent);
    w.pod<uint32_t>(e.symbol);
    w.pod<uint32_t>(e.thread);
    w.pod<uint32_t>(e.depth);
    w.pod<uint32_t>(e.detail);
    w.pod<uint8_t>(uint8_t(e.category));
    w.pod<uint8_t>(uint8_t(e.async_end) | uint8_t(e.open_at_stop) << 1);
  }
  w.pod<uint64_t>(details.size());
  for (const EventDetail& d : details) {
    w.pod<uint64_t>(d.handle);
    w.pod<int64_t>(d.seq_nr);
    w.pod<int64_t>(d.flops);
    w.pod<uint64_t>(d.inputs.size());
    for (const RangeInput& in : d.inputs) internal::write_range_input(w, in);
  }
  w.pod<uint64_t>(memory.size());
  for (const MemorySample& m : memory) {
    w.pod<int64_t>(m.time_ns);
    w.pod<uint32_t>(m.thread);
    w.pod<uint64_t>(m.address);
    w.pod<int64_t>(m.bytes);
    w.pod<int64_t>(m.total_allocated);
    w.pod<int64_t>(m.total_reserved);
    w.pod<int32_t>(m.device);
  }
  w.pod<uint64_t>(warnings.size());
  for (const std::string& s : warnings) w.str(s);
  return std::move(w.out);
}

Trace Trace::deserialize(std::string_view bytes) {
  if (bytes.size() < sizeof kMagic || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    throw std::runtime_error("framescope: not a serialized framescope trace");
  }
  Reader r(bytes.substr(sizeof kMagic));
  Trace t;
  t.start_ns = r.pod<int64_t>();
  t.stop_ns = r.pod<int64_t>();
  if (!valid_time(t.start_ns) || !valid_time(t.stop_ns)) malformed();
  t.dropped_events = r.pod<uint64_t>();
  t.recorded_events = r.pod<uint64_t>();
  uint64_t n = r.count(28);
  for (uint64_t i = 0; i < n; ++i) {
    Symbol s;
    s.name = r.str();
    s.file = r.str();
    s.line = r.pod<int32_t>();
    s.function = r.str();
    t.symbols.push_back(s);
    t.symbol_index_.emplace(s.name, uint32_t(i));
  }
  n = r.count(40);
  for (uint64_t i = 0; i < n; ++i) {
    ThreadInfo th;
    th.pid = r.pod<int64_t>();
    th.os_tid = r.pod<uint64_t>();
    th.pthread_id = r.pod<uint64_t>();
    th.logical_tid = r.pod<uint64_t>();
    th.name = r.str();
    t.threads.push_back(th);
  }
  n = r.count(42);
  t.events.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    TraceEvent e;
    e.start_ns = r.pod<int64_t>();
    e.dur_ns = r.pod<int64_t>();
    e.parent = r.pod<int64_t>();
    e.symbol = r.pod<uint32_t>();
    e.thread = r.pod<uint32_t>();
    e.depth = r.pod<uint32_t>();
    e.detail = r.pod<uint32_t>();
    uint8_t cat = r.pod<uint8_t>();
    uint8_t flags = r.pod<uint8_t>();
    if (!valid_time(e.start_ns) || !valid_time(e.dur_ns) || e.dur_ns < -1 ||
        cat > uint8_t(EventCategory::kOther) || e.symbol >= t.symbols.size() ||
        e.thread >= t.threads.size() || e.parent >= int64_t(i) || e.parent < -1) {
      malformed();
    }
    e.category = EventCategory(cat);
    e.async_end = flags & 1;
    e.open_at_stop = flags & 2;
    t.events.push_back(e);
  }
  n = r.count(32);
  for (uint64_t i = 0; i < n; ++i) {
    EventDetail d;
    d.handle = r.pod<uint64_t>();
    d.seq_nr = r.pod<int64_t>();
    d.flops = r.pod<int64_t>();
    uint64_t k = r.count(33);
    for (uint64_t j = 0; j < k; ++j) d.inputs.push_back(internal::read_range_input(r));
    t.details.push_back(std::move(d));
  }
  for (const TraceEvent& e : t.events) {
    if (e.detail != UINT32_MAX && e.detail >= t.details.size()) malformed();
  }
  n = r.count(48);  // 8+4+8+8+8+8+4 bytes per sample
  for (uint64_t i = 0; i < n; ++i) {
    MemorySample m;
    m.time_ns = r.pod<int64_t>();
    m.thread = r.pod<uint32_t>();
    m.address = r.pod<uint64_t>();
    m.bytes = r.pod<int64_t>();
    m.total_allocated = r.pod<int64_t>();
    m.total_reserved = r.pod<int64_t>();
    m.device = r.pod<int32_t>();
    if (m.thread >= t.threads.size() || !valid_time(m.time_ns)) malformed();
    t.memory.push_back(m);
  }
  n = r.count(8);
  for (uint64_t i = 0; i < n; ++i) t.warnings.push_back(r.str());
  if (!r.done()) malformed();
  return t;
}

}  // namespace framescope
