// framescope/session.h: profiling sessions: enable, record marks and memory, stop, replay.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "framescope/trace.h"

namespace framescope {

/// Thrown for misuse of sessions: enabling twice, stopping when none runs, a bad config.
class SessionError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

/// Which threads record into a session.
enum class ThreadScope : uint8_t {
  kAllThreads,  ///< every thread of the process (default; what the Python tracer needs)
  kPropagated,  ///< the enabling thread and threads that carry its ThreadLocalState
};

/// What to do when the session's buffers reach `memory_limit_bytes`.
enum class LimitPolicy : uint8_t {
  kStopRecording,  ///< keep the oldest events, count the rest as dropped, warn (default)
  kKeepNewest,     ///< flight recorder: each thread recycles its oldest chunk
};

/// Options of a session. Plain value type.
struct SessionConfig {
  bool record_shapes = false;   ///< keep range inputs (shapes) with their ranges
  bool profile_memory = false;  ///< keep record_memory() events
  bool with_flops = false;      ///< estimate flops of known ops from their input shapes
  ThreadScope threads = ThreadScope::kAllThreads;
  LimitPolicy on_limit = LimitPolicy::kStopRecording;
  size_t memory_limit_bytes = size_t(1) << 30;  ///< across all threads; >= one chunk per thread
  /// Event chunks faulted in at start (at most memory_limit_bytes), then reused; while the
  /// session runs, a thread of the chunk pool faults in more ahead of the recording threads,
  /// within what memory_limit_bytes leaves (none in a fork child).
  size_t prefault_bytes = size_t(8) << 20;
  bool start_stop_marks = true;  ///< record "__start_profile"/"__stop_profile" marks
  /// Read every recording thread's CPU clock this often from a thread of the session's own
  /// (ThreadInfo::cpu_samples); 0: no CPU time. The recording threads pay nothing for it.
  int64_t cpu_sample_period_ns = 0;
  /// Streaming capture: when set, full event chunks are written to this .fstrace file by a
  /// background thread while the session runs (a temporary next to it until the stop, which
  /// renames it into place), so the session's memory stays flat however long it runs.
  /// `memory_limit_bytes` then bounds the chunks in memory, and a thread that reaches it waits
  /// for the writer instead of dropping events. Not with LimitPolicy::kKeepNewest.
  /// enable_profiler() throws OutputError when the file cannot be created.
  std::string stream_path;
};

/// Per-thread raw events of a stopped session, before replay. Opaque; move-only.
struct RawTrace;
/// Deletes a RawTrace (its definition is internal).
struct RawTraceDeleter {
  void operator()(RawTrace* raw) const noexcept;
};
using RawTracePtr = std::unique_ptr<RawTrace, RawTraceDeleter>;

/// Starts the process-wide session. Throws SessionError when a session is already enabled on
/// this thread ("enabling twice") or on another thread, or for a bad config. Thread-safe.
void enable_profiler(const SessionConfig& config = {});
/// True while a session records.
bool profiler_enabled() noexcept;
/// The active session's config; throws SessionError when none is active.
SessionConfig profiler_config();
/// Stops the session and collects every thread's events (threads that exited included); a
/// streamed session's writer has written everything queued when it returns (the file is
/// completed by StoredTrace::from_raw or replay). Throws SessionError when no session is
/// enabled. Thread-safe.
RawTracePtr disable_profiler();

/// A copy of the active session's events so far, as disable_profiler() would return them had it
/// been called now, while the session goes on recording (the flight recorder's dump: with
/// LimitPolicy::kKeepNewest, the window of newest events). Copies the buffers (transiently up to
/// memory_limit_bytes more memory). Throws SessionError when no session is enabled.
/// Thread-safe; the recording threads are not stopped (a thread appending while it is copied
/// contributes its events up to that moment).
RawTracePtr snapshot_profiler();

/// Records an instant event (a mark) on the calling thread; no-op without a session.
void mark(std::string_view name) noexcept;
/// Records a native allocation (bytes > 0) or free (bytes < 0) for memory profiling: the
/// address, the size and the allocator's totals after it. No-op unless the session has
/// profile_memory. Thread-safe.
void record_memory(const void* address, int64_t bytes, int64_t total_allocated,
                   int64_t total_reserved = 0, int32_t device = -1) noexcept;

/// Resolves the opaque keys of Python and C-function events (recorded by the extension) into
/// symbols at replay. Return false to leave a key unnamed ("<unknown>").
struct KeyResolver {
  std::function<bool(uint64_t key, Symbol& out)> python;
  std::function<bool(uint64_t key, Symbol& out)> c_function;
};

/// Frames that were already running on a thread when the session started (outermost first),
/// each with the address used to recognise it in anchor events. Given by the extension.
struct InitialStack {
  uint64_t pthread_id = 0;
  /// The thread's OS id (gettid) when known, else 0. pthread ids are reused as soon as a thread
  /// exits, so a thread that exits during the session must not hand its stack to a newer one.
  uint64_t os_tid = 0;
  std::vector<uint64_t> keys;
  std::vector<uint64_t> frame_addresses;
};

namespace internal {
/// Adds the pre-existing Python stack of a thread to the active session (extension only).
void add_initial_stack(InitialStack stack);
/// Appends a warning to the active session (shown with the trace).
void add_session_warning(std::string message);
}  // namespace internal

/// Replays raw events into one tree per thread, converting ticks to ns. Unmatched ends are
/// ignored, ranges still open are closed at the stop time. Never throws on inconsistent input.
Trace replay(const RawTrace& raw, const KeyResolver& resolver = {});

/// disable_profiler() + replay() with no Python keys: what a pure C++ program wants.
Trace stop_profiler();

/// Summary of a RawTrace (for tools that want numbers before replay).
struct RawTraceStats {
  uint64_t events = 0;
  uint64_t dropped = 0;
  uint64_t threads = 0;
  uint64_t bytes = 0;  ///< memory used by event chunks
};
RawTraceStats raw_trace_stats(const RawTrace& raw);

}  // namespace framescope
