// cpp/core/chunk_pool.cpp: mmap-backed pre-faulted chunk pool.
#include "chunk_pool.h"

#include <sys/mman.h>

#include <cstdlib>

namespace framescope::internal {

ChunkPool& ChunkPool::instance() {
  static ChunkPool* pool = new ChunkPool();  // leaked on purpose: used by exiting threads
  return *pool;
}

static RawEvent* map_chunk() noexcept {
  void* p = mmap(nullptr, ChunkPool::kChunkBytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<RawEvent*>(p);
}

RawEvent* ChunkPool::acquire(size_t events) noexcept {
  if (events < kChunkEvents) {
    // 64-byte aligned: the slots of a chunk never share a cache line with other data.
    return static_cast<RawEvent*>(std::aligned_alloc(64, events * sizeof(RawEvent)));
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!free_.empty()) {
      RawEvent* c = free_.back();
      free_.pop_back();
      return c;
    }
  }
  return map_chunk();
}

void ChunkPool::release(RawEvent* chunk, size_t events) noexcept {
  if (!chunk) return;
  if (events < kChunkEvents) {
    std::free(chunk);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_.size() * kChunkBytes < kRetainBytes) {
      free_.push_back(chunk);
      return;
    }
  }
  munmap(chunk, kChunkBytes);
}

void ChunkPool::reserve(size_t bytes) noexcept {
  size_t want = (bytes + kChunkBytes - 1) / kChunkBytes;
  std::lock_guard<std::mutex> lock(mutex_);
  while (free_.size() < want) {
    RawEvent* c = map_chunk();
    if (!c) break;
    free_.push_back(c);
  }
}

size_t ChunkPool::free_chunks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return free_.size();
}

}  // namespace framescope::internal
