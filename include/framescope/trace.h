// framescope/trace.h: the replayed result of a session: events in one tree per thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "framescope/range_input.h"

namespace framescope {

/// Category of a replayed event (exported as the Chrome/Kineto `cat`).
enum class EventCategory : uint8_t {
  kPythonFunction = 0,  ///< a Python frame ("python_function")
  kCFunction = 1,       ///< a builtin called from Python ("python_function", torch does the same)
  kCpuOp = 2,           ///< a RecordScope::kFunction range ("cpu_op")
  kUserAnnotation = 3,  ///< a user range: record_function, the C ABI ("user_annotation")
  kMark = 4,            ///< an instant ("cpu_instant_event")
  kOther = 5,           ///< other scopes
};

/// The Chrome/Kineto category string of a category.
const char* category_name(EventCategory c) noexcept;

/// What a name refers to: a Python function (file and line known), a builtin, or a range.
struct Symbol {
  std::string name;      ///< display name, e.g. "app/main.py(12): run" or "nn.Module: Linear"
  std::string file;      ///< source file for Python functions, else empty
  int32_t line = 0;      ///< first line for Python functions, else 0
  std::string function;  ///< bare function name (pstats), else the name
};

/// One replayed event. `dur_ns` is -1 for instants. Plain value type.
struct TraceEvent {
  int64_t start_ns = 0;  ///< CLOCK_MONOTONIC ns
  int64_t dur_ns = 0;
  int64_t parent = -1;  ///< index of the enclosing event on the same thread, -1 at the root
  uint32_t symbol = 0;  ///< index into Trace::symbols
  uint32_t thread = 0;  ///< index into Trace::threads
  uint32_t depth = 0;
  uint32_t detail = UINT32_MAX;  ///< index into Trace::details or UINT32_MAX
  EventCategory category = EventCategory::kOther;
  bool async_end = false;     ///< ended on another thread
  bool open_at_stop = false;  ///< still open when the session stopped (closed at stop time)
};

/// Inputs and ids of a range that had them.
struct EventDetail {
  uint64_t handle = 0;
  int64_t seq_nr = -1;
  int64_t flops = -1;
  std::vector<RangeInput> inputs;
};

/// MemorySample::device of Python's allocations (profile_memory): `bytes` were allocated
/// through PyMem/PyObject on the thread since its previous event, `total_allocated` is the
/// thread's running sum since the session started (allocations only: frees are not seen).
constexpr int32_t kPythonAllocatorDevice = -2;

/// A memory sample reported through record_memory(), or Python's allocations between two events
/// of a thread (device kPythonAllocatorDevice).
struct MemorySample {
  int64_t time_ns = 0;
  uint32_t thread = 0;
  uint64_t address = 0;
  int64_t bytes = 0;
  int64_t total_allocated = 0;
  int64_t total_reserved = 0;
  int32_t device = -1;
};

/// One reading of a thread's CPU clock (CLOCK_THREAD_CPUTIME_ID) at a time of the trace's clock.
/// Sessions with CPU sampling read every recording thread's clock every period (Python: 4 ms)
/// (cpp/core/cpu_sampler.cpp); readers interpolate between readings (cpu_clock.h).
struct CpuSample {
  int64_t time_ns = 0;  ///< CLOCK_MONOTONIC ns, like the events
  int64_t cpu_ns = 0;   ///< CPU time the thread had used by then
};

/// A thread (or, after merge(), a thread of another process) that recorded events.
struct ThreadInfo {
  int64_t pid = 0;
  uint64_t os_tid = 0;
  uint64_t pthread_id = 0;
  uint64_t logical_tid = 0;
  std::string name;
  /// CPU clock readings in time order; empty when the session did not sample CPU time.
  std::vector<CpuSample> cpu_samples;
};

/// A process of a trace (one per pid): what viewers call its group of thread tracks. Traces of
/// several processes (children followed by `framescope run`, ranks of a job) carry one each.
/// Plain value type.
struct ProcessInfo {
  int64_t pid = 0;
  std::string name;                 ///< e.g. "rank 0" or "SpawnPoolWorker-1"; empty: "python <pid>"
  std::vector<std::string> labels;  ///< shown beside the name (the command line, "rank 1"...)
  int32_t sort_index = 0;           ///< order of the process groups in viewers (lower first)
  std::string metadata;             ///< JSON object text kept for framescope.processes (rank,
                                    ///< host, clock measurements); not interpreted here
};

/// Aggregate over events of one symbol (summary tables).
struct SymbolStats {
  uint32_t symbol = 0;
  uint64_t calls = 0;
  int64_t total_ns = 0;  ///< inclusive, counting recursive calls once
  /// Exclusive: the events' time minus their children's. 0 for ranges ended on another thread
  /// (async_end): their thread's other slices hold that time.
  int64_t self_ns = 0;
};

/// The result of a session. Events of one thread are ordered by start; a parent precedes its
/// children. Value type; not thread-safe to mutate concurrently.
class Trace {
 public:
  std::vector<Symbol> symbols;
  std::vector<TraceEvent> events;
  std::vector<ThreadInfo> threads;
  std::vector<EventDetail> details;
  std::vector<MemorySample> memory;
  std::vector<std::string> warnings;
  int64_t start_ns = 0;  ///< session start (monotonic ns)
  int64_t stop_ns = 0;
  /// Events not kept at the memory limit, counted as recorded_events counts them (a range is
  /// two events, its begin and end; a compact Python call and its return two), so that the two
  /// add up to every event produced, with either limit policy.
  uint64_t dropped_events = 0;
  /// Events kept (16 bytes each; compact Python calls and returns 8; a range's end on another
  /// thread is kept by the session and counts too).
  uint64_t recorded_events = 0;

  /// Interns a symbol by display name; returns its index.
  uint32_t intern(Symbol s);
  /// Appends the events of another trace (e.g. from another process) keeping their pids and
  /// shifting their times by `offset_ns`. Symbols are re-interned.
  void merge(const Trace& other, int64_t offset_ns = 0);
  // Per-symbol statistics: compute_stats(MaterializedSource(trace), ...) (framescope/
  // key_averages.h), the one accounting. The binary form is StoredTrace's (.fstrace).

 private:
  std::unordered_map<std::string, uint32_t> symbol_index_;
};

}  // namespace framescope
