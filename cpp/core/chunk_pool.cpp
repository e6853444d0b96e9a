// cpp/core/chunk_pool.cpp: mmap-backed pre-faulted chunk pool and its refill thread.
#include "chunk_pool.h"

#include <pthread.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdlib>
#include <new>
#include <thread>

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
    RawEvent* c = nullptr;
    if (!free_.empty()) {
      c = free_.back();
      free_.pop_back();
    }
    if (free_.size() < kRefillBelowChunks) request_refill_locked();
    if (c) return c;
  }
  RawEvent* c = map_chunk();
  if (c) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++counts_.mapped_on_demand;
  }
  return c;
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
    ++counts_.mapped_ahead;
  }
}

ChunkPool::Stats ChunkPool::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Stats s = counts_;
  s.free_chunks = free_.size();
  return s;
}

bool ChunkPool::wait_until_refilled(int timeout_ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  return refilled_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                               [this] { return !refill_wanted_; });
}

void ChunkPool::forget_refill_thread_in_fork_child() noexcept {
  // The parent's refill thread may have been waiting on refill_wanted_cv_: its record in the
  // condition variable would make the child's next wait or notify act on a thread that does not
  // exist. No thread of the child uses either variable yet (the mutex is held), so they are
  // constructed anew over the old ones.
  new (&refill_wanted_cv_) std::condition_variable();
  new (&refilled_cv_) std::condition_variable();
  refill_thread_ = nullptr;  // its handle is leaked: joining a thread the child lacks would hang
  refill_wanted_ = false;
  refill_stop_ = false;
  counts_ = Stats{};
}

void ChunkPool::start_refilling() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  refilling_ = true;
  start_refill_thread_locked();
}

void ChunkPool::stop_refilling() noexcept {
  std::thread* thread;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    refilling_ = false;
    thread = refill_thread_;
    refill_thread_ = nullptr;
    if (!thread) return;
    refill_stop_ = true;
    refill_wanted_cv_.notify_one();
  }
  thread->join();  // at most one chunk's mapping away (~90 us)
  delete thread;
  std::lock_guard<std::mutex> lock(mutex_);
  refill_stop_ = false;
  refill_wanted_ = false;
  refilled_cv_.notify_all();
}

void ChunkPool::start_refill_thread_locked() noexcept {
  if (refill_thread_ || !refilling_) return;
  try {
    refill_thread_ = new std::thread([this] { refill_loop(); });
  } catch (...) {
    // No thread (EAGAIN, no memory): recording threads map their chunks themselves.
    refill_thread_ = nullptr;
  }
}

void ChunkPool::request_refill_locked() noexcept {
  if (refill_wanted_) return;
  start_refill_thread_locked();  // a fork child's first chunk, or after a failed start
  if (!refill_thread_) return;
  refill_wanted_ = true;
  refill_wanted_cv_.notify_one();
}

void ChunkPool::refill_loop() {
  pthread_setname_np(pthread_self(), "framescope-pool");
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    refill_wanted_cv_.wait(lock, [this] { return refill_wanted_ || refill_stop_; });
    if (refill_stop_) return;
    while (free_.size() < kRefillToChunks && !refill_stop_) {
      lock.unlock();  // mapping takes ~90 us: recording threads take and return chunks meanwhile
      RawEvent* c = map_chunk();
      lock.lock();
      if (!c) break;  // out of memory: asked again at the next chunk taken
      free_.push_back(c);
      ++counts_.mapped_ahead;
    }
    refill_wanted_ = false;
    refilled_cv_.notify_all();
  }
}

}  // namespace framescope::internal
