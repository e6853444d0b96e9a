// cpp/core/chunk_pool.h: process-wide pool of pre-faulted event chunks, reused across sessions.
#pragma once

#include <pthread.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "framescope/internal/raw_event.h"

namespace framescope::internal {

/// Hands out fixed-size, pre-faulted blocks of RawEvents, and keeps some ready ahead of the
/// threads that record.
///
/// Fresh anonymous memory costs ~1.4 us per 4 KiB page here (the kernel's fault, zeroing and
/// accounting on a KVM guest): ~90 us for a full chunk, 2.7 ns per event. Mapped by the thread
/// that records, when its chunk is full, that time lands inside whichever frame or range is open
/// then, as its own time: one stall every 8192 calls, 7.5% of a traced fib's time moved onto
/// ~130 random calls. So full chunks are mapped and faulted in (MAP_POPULATE) by the pool's
/// refill thread: a recording thread that takes a chunk and leaves fewer than
/// kRefillBelowChunks free wakes it, and it maps chunks until kRefillToChunks are free (fewer
/// when the taker's memory limit leaves less room: half of that room, and all of it). A
/// recording thread maps a chunk itself only when none is free (the refill thread behind, or
/// not running). The refill thread runs while a session records: start_refilling() at the
/// session's start starts it and stop_refilling() at its stop joins it, so that no thread of
/// framescope's is left in a process that then forks (Python 3.12+ warns at os.fork() in a
/// process with several threads). It never runs in a fork child (whose session goes on, or a new
/// one): another thread of the parent may have held a lock of the allocator at the fork, which a
/// new thread's start can then wait on for ever (ASan's allocator does); the child maps its
/// chunks on demand, as without the thread. Between sessions, chunks are mapped on demand too
/// (a C++ range recorded with no session).
///
/// Freed chunks are kept for the next session up to `kRetainBytes`. Thread-safe: one mutex,
/// taken once per chunk.
class ChunkPool {
 public:
  static constexpr size_t kChunkEvents = 16384;  // 256 KiB
  static constexpr size_t kChunkBytes = kChunkEvents * sizeof(RawEvent);
  /// A thread's first chunk is this small (4 KiB); each next one is 4x its predecessor, up to
  /// kChunkEvents: a thread that records little holds little (thousands of short-lived threads,
  /// hundreds of mostly idle ones), one that records much soon takes full chunks.
  static constexpr size_t kMinChunkEvents = 256;
  static constexpr size_t kRetainBytes = size_t(64) << 20;
  /// The refill thread is woken when a chunk taken leaves fewer than this many free (4 MiB)...
  static constexpr size_t kRefillBelowChunks = 16;
  /// ... and maps chunks until this many are free (8 MiB): ~3 ms of its time, ~9 ms of a
  /// thread recording at full speed.
  static constexpr size_t kRefillToChunks = 32;

  /// What the pool has mapped since the process (or its fork child) started, and holds now.
  struct Stats {
    size_t mapped_ahead = 0;      ///< chunks the refill thread or reserve() mapped
    size_t mapped_on_demand = 0;  ///< chunks a recording thread mapped itself (none was free)
    size_t free_chunks = 0;       ///< full chunks ready now
  };

  static ChunkPool& instance();  // never destroyed (threads may exit after static teardown)

  /// A chunk of `events` events (kChunkEvents, or a smaller power of 4 down to kMinChunkEvents),
  /// or nullptr when the OS refuses memory. Full chunks come pre-faulted from the pool (mapped
  /// here only when it has none); smaller ones from malloc (a thread's first few, cheap to
  /// fault in). `headroom_bytes` is what the taker may still take after this chunk (its
  /// session's memory limit less what it holds): the refill thread maps no more ahead than that,
  /// so that free chunks never take a session's memory past its limit.
  RawEvent* acquire(size_t events = kChunkEvents, size_t headroom_bytes = SIZE_MAX) noexcept;
  /// Returns a chunk of `events` events; beyond kRetainBytes of free full chunks it is unmapped.
  void release(RawEvent* chunk, size_t events = kChunkEvents) noexcept;
  /// Faults in free chunks until `bytes` are available without page faults, on the calling
  /// thread (a session's start).
  void reserve(size_t bytes) noexcept;
  /// Starts the refill thread (a session's start); if it cannot start, recording threads map
  /// their chunks themselves.
  void start_refilling() noexcept;
  /// Stops and joins the refill thread (a session's stop); chunks are mapped on demand until
  /// the next start_refilling(). Must not be called with the pool's mutex held.
  void stop_refilling() noexcept;
  Stats stats() const;
  /// Waits until the refill thread has no work asked of it, for at most `timeout_ms`. True when
  /// it has none. For tests and benchmarks: the pool's state is otherwise not observable.
  bool wait_until_refilled(int timeout_ms);
  /// Takes / releases the pool's mutex around fork() (session.cpp's handlers only).
  void lock_for_fork() noexcept { mutex_.lock(); }
  void unlock_after_fork() noexcept { mutex_.unlock(); }
  /// In the child, with the mutex still taken by lock_for_fork(): the refill thread does not
  /// exist there and is never started again, so it is forgotten and its condition variables are
  /// made anew (the parent's waiter on them is not in the child).
  void forget_refill_thread_in_fork_child() noexcept;

 private:
  /// Maps chunks until `free_chunks` are free (or the refill thread is told to stop, or the OS
  /// refuses memory), with the mutex released around each mapping.
  void map_ahead_locked(std::unique_lock<std::mutex>& lock, size_t free_chunks) noexcept;
  void start_refill_thread_locked() noexcept;
  void request_refill_locked(size_t headroom_bytes) noexcept;
  static void* run_refill_thread(void* self) noexcept;
  void refill_loop() noexcept;

  mutable std::mutex mutex_;
  std::vector<RawEvent*> free_;
  std::condition_variable refill_wanted_cv_;  // the refill thread waits here for work or stop
  std::condition_variable refilled_cv_;       // wait_until_refilled() waits here
  pthread_t refill_thread_{};
  bool refill_thread_running_ = false;  // refill_thread_ is a thread of this process, to join
  bool in_fork_child_ = false;          // no refill thread is started here
  bool refilling_ = false;              // between start_refilling() and stop_refilling()
  bool refill_wanted_ = false;          // work asked of the refill thread
  size_t refill_to_ = kRefillToChunks;  // free chunks the refill thread maps up to
  bool refill_stop_ = false;            // the refill thread is to exit
  Stats counts_;  // mapped_ahead and mapped_on_demand (free_chunks is free_.size())
};

}  // namespace framescope::internal
