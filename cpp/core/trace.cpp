// cpp/core/trace.cpp: a materialized Trace: symbol interning and merging.
#include "framescope/trace.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>

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

}  // namespace framescope
