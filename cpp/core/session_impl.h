// cpp/core/session_impl.h: the process-wide session object and the RawTrace it produces.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cpu_sampler.h"
#include "framescope/clock.h"
#include "framescope/internal/thread_buffer.h"
#include "framescope/session.h"

namespace framescope {

namespace internal {

class StreamWriter;

/// A range started on one thread and ended on another.
struct AsyncEnd {
  uint32_t buffer_index = 0;  // buffer of the starting thread
  uint64_t begin_seq = 0;
  uint64_t ticks = 0;
};

/// State of one enabled session. Created by enable_profiler(), owned by the global slot until
/// disable_profiler(); buffers keep a raw pointer to it only while it is the active session.
class Session {
 public:
  Session(const SessionConfig& config, uint64_t epoch);

  /// Creates and registers a buffer for the calling thread; nullptr once the session stopped
  /// (a buffer created after the stop would never be detached), and when the memory limit
  /// leaves no room for one more thread (stop policy: the thread is counted as not recorded;
  /// keep-newest lets go of exited threads' events first). Thread-safe.
  std::shared_ptr<ThreadBuffer> create_buffer();
  /// Takes a chunk of `events` slots if the memory limit allows, else of a smaller size class
  /// that fits (`events` is set to the size taken); regardless of the limit, a chunk of
  /// ChunkPool::kMinChunkEvents with `over_limit`. nullptr otherwise.
  RawEvent* take_chunk(uint32_t& events, bool over_limit = false) noexcept;
  void give_back_chunk(RawEvent* chunk, uint32_t events) noexcept;
  /// Counts `bytes` (negative: given back) of what the session holds besides chunks (side
  /// records, per-thread state) against the memory limit. May pass the limit: the next chunk is
  /// then refused, which applies the limit's policy.
  void charge(int64_t bytes) noexcept { bytes_in_use_.fetch_add(bytes, std::memory_order_relaxed); }
  /// Charges `bytes` only if they fit within the limit.
  bool try_charge(size_t bytes) noexcept;
  void warn_limit_once() noexcept;
  void add_async_end(const AsyncEnd& end);
  void add_warning(std::string message);
  /// In a forked child (single-threaded, see session.cpp): the session goes on in the child
  /// with `kept` (the forking thread's buffer, or null) as its only buffer, starting at
  /// `fork_ticks`. Other threads' chunks go back to the pool. Throws std::bad_alloc only.
  void continue_in_fork_child(ThreadBuffer* kept, uint64_t fork_ticks);

  const SessionConfig config;
  const uint64_t epoch;
  const uint64_t enabling_thread;  // logical id
  ClockConverter clock;
  uint64_t start_ticks = 0;

  // Lock order: g_session_mutex (session.cpp), then `mutex`, then ThreadBuffer mutexes, then
  // `warnings_mutex` and the ChunkPool's (the fork handlers take them all in this order).
  std::mutex mutex;
  bool stopped = false;  // set under `mutex` by disable_profiler() before it collects buffers
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  uint32_t next_buffer_index = 0;  // buffer indices stay unique when a fork drops buffers
  std::vector<InitialStack> initial_stacks;
  std::vector<AsyncEnd> async_ends;
  std::vector<uint64_t> compact_keys;  // index of a compact call -> its Python key
  // CPU clock readings of the threads (null without cpu_sample_period_ns); its tracks are
  // guarded by `mutex`.
  std::unique_ptr<CpuSampler> cpu_sampler;
  // Own (leaf) mutex: warnings are added while a ThreadBuffer's mutex is held (memory limit),
  // and disable_profiler() takes buffer mutexes while holding `mutex`.
  std::mutex warnings_mutex;
  std::vector<std::string> warnings;
  // Streaming capture (SessionConfig::stream_path): set before the session is published, read
  // by buffers on their slow path. Declared last so that it goes first: its writer thread gives
  // chunks back to this session.
  std::shared_ptr<StreamWriter> stream;
  // Threads not recorded: started at the limit (stop policy), given `overflow`, the one buffer
  // that keeps nothing and counts their events as dropped. Under `mutex`.
  uint64_t unrecorded_threads = 0;
  std::shared_ptr<ThreadBuffer> overflow;
  // Exited threads whose events keep-newest let go of to make room, and their events (under
  // `mutex`): counted as dropped in the trace.
  uint64_t evicted_threads = 0;
  uint64_t evicted_events = 0;

  /// What a thread's buffer costs besides its chunks (the object, its deques' first blocks,
  /// bookkeeping), counted against the limit when it is created.
  static constexpr int64_t kThreadBytes = 4096;

 private:
  // Keep-newest, at the limit, before a new thread's buffer is made (under `mutex`): releases
  // the events of exited threads, oldest first, until the limit leaves room for it.
  void evict_exited_locked() noexcept;

  // Bytes of chunks, side records and thread state held, against config.memory_limit_bytes.
  std::atomic<int64_t> bytes_in_use_{0};
  int64_t limit_bytes_;
  std::atomic<bool> limit_warned_{false};
};

/// The active session (null when none runs). Thread-safe.
std::shared_ptr<Session> active_session();

}  // namespace internal

/// One thread's events plus its identity.
struct RawThread {
  internal::ThreadBuffer::Snapshot data;
  uint32_t buffer_index = 0;
  uint64_t os_tid = 0;
  uint64_t pthread_id = 0;
  uint64_t logical_tid = 0;
  std::vector<internal::CpuReading> cpu;  // CPU clock readings (empty without sampling)
};

namespace internal {
/// A copy of `buffer`'s events and identity, with its CPU readings taken now when `session`
/// samples them. The caller holds `session.mutex`. Defined in session.cpp.
RawThread copy_raw_thread(Session& session, ThreadBuffer& buffer);
}  // namespace internal

struct RawTrace {
  SessionConfig config;
  ClockConverter clock;
  uint64_t start_ticks = 0;
  uint64_t stop_ticks = 0;
  std::vector<RawThread> threads;
  std::vector<InitialStack> initial_stacks;
  std::vector<internal::AsyncEnd> async_ends;
  std::vector<uint64_t> compact_keys;  // Python keys of compact calls, by index
  std::vector<std::string> warnings;
  // Events of exited threads the flight recorder let go of at the limit (counted as dropped).
  uint64_t evicted_events = 0;
  // A streamed session: the slots written during the session are in this stream's file (the
  // threads above hold only what was still in memory at stop). StoredTrace::from_raw finishes it.
  std::shared_ptr<internal::StreamWriter> stream;
};

}  // namespace framescope
