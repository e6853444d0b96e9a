// cpp/core/chunk_pool.h: process-wide pool of pre-faulted event chunks, reused across sessions.
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

#include "framescope/internal/raw_event.h"

namespace framescope::internal {

/// Hands out fixed-size, pre-faulted blocks of RawEvents. Fresh memory costs ~150 ns per event in
/// page faults on first touch, so blocks are faulted in when mapped (MAP_POPULATE) and kept for
/// the next session up to `kRetainBytes`. Thread-safe (one mutex; only hit once per chunk).
class ChunkPool {
 public:
  static constexpr size_t kChunkEvents = 16384;  // 256 KiB
  static constexpr size_t kChunkBytes = kChunkEvents * sizeof(RawEvent);
  /// A thread's first chunk is this small (4 KiB); each next one is 4x its predecessor, up to
  /// kChunkEvents: a thread that records little holds little (thousands of short-lived threads,
  /// hundreds of mostly idle ones), one that records much soon takes full chunks.
  static constexpr size_t kMinChunkEvents = 256;
  static constexpr size_t kRetainBytes = size_t(64) << 20;

  static ChunkPool& instance();  // never destroyed (threads may exit after static teardown)

  /// A chunk of `events` events (kChunkEvents, or a smaller power of 4 down to kMinChunkEvents),
  /// or nullptr when the OS refuses memory. Full chunks come pre-faulted from the pool; smaller
  /// ones from malloc (a thread's first few, cheap to fault in).
  RawEvent* acquire(size_t events = kChunkEvents) noexcept;
  /// Returns a chunk of `events` events; beyond kRetainBytes of free full chunks it is unmapped.
  void release(RawEvent* chunk, size_t events = kChunkEvents) noexcept;
  /// Faults in free chunks until `bytes` are available without page faults.
  void reserve(size_t bytes) noexcept;
  size_t free_chunks() const;
  /// Takes / releases the pool's mutex around fork() (session.cpp's handlers only).
  void lock_for_fork() noexcept { mutex_.lock(); }
  void unlock_after_fork() noexcept { mutex_.unlock(); }

 private:
  mutable std::mutex mutex_;
  std::vector<RawEvent*> free_;
};

}  // namespace framescope::internal
