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
  static constexpr size_t kRetainBytes = size_t(64) << 20;

  static ChunkPool& instance();  // never destroyed (threads may exit after static teardown)

  /// A chunk of kChunkEvents events, or nullptr when the OS refuses memory.
  RawEvent* acquire() noexcept;
  /// Returns a chunk; beyond kRetainBytes of free chunks it is unmapped.
  void release(RawEvent* chunk) noexcept;
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
