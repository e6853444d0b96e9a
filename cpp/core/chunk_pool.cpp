// cpp/core/chunk_pool.cpp: mmap-backed pre-faulted chunk pool and its refill thread.
#include "chunk_pool.h"

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <new>

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

RawEvent* ChunkPool::acquire(size_t events, size_t headroom_bytes) noexcept {
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
    request_refill_locked(headroom_bytes);
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

void ChunkPool::map_ahead_locked(std::unique_lock<std::mutex>& lock, size_t free_chunks) noexcept {
  while (free_.size() < free_chunks && !refill_stop_) {
    lock.unlock();  // mapping takes ~90 us: other threads take and return chunks meanwhile
    RawEvent* c = map_chunk();
    lock.lock();
    if (!c) return;  // out of memory: asked again at the next chunk taken or session started
    free_.push_back(c);
    ++counts_.mapped_ahead;
  }
}

void ChunkPool::reserve(size_t bytes) noexcept {
  std::unique_lock<std::mutex> lock(mutex_);
  map_ahead_locked(lock, (bytes + kChunkBytes - 1) / kChunkBytes);
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
  refill_thread_running_ = false;  // not joined: the child lacks it
  refill_wanted_ = false;
  refill_stop_ = false;
  in_fork_child_ = true;
  counts_ = Stats{};
}

void ChunkPool::start_refilling() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  refilling_ = true;
  start_refill_thread_locked();
}

void ChunkPool::stop_refilling() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    refilling_ = false;
    if (!refill_thread_running_) return;
    refill_thread_running_ = false;
    refill_stop_ = true;
    refill_wanted_cv_.notify_one();
  }
  pthread_join(refill_thread_, nullptr);  // at most one chunk's mapping away (~90 us)
  std::lock_guard<std::mutex> lock(mutex_);
  refill_stop_ = false;
  refill_wanted_ = false;
  refilled_cv_.notify_all();
}

void ChunkPool::start_refill_thread_locked() noexcept {
  if (refill_thread_running_ || !refilling_ || in_fork_child_) return;
  // The thread must never run a signal handler (Python's, say): everything is blocked in it. The
  // mask is inherited from the creating thread, so it is set around pthread_create.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  refill_thread_running_ =
      pthread_create(&refill_thread_, nullptr, &ChunkPool::run_refill_thread, this) == 0;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  // No thread (EAGAIN): recording threads map their chunks themselves.
  if (refill_thread_running_) pthread_setname_np(refill_thread_, "framescope-pool");
}

void ChunkPool::request_refill_locked(size_t headroom_bytes) noexcept {
  if (refill_wanted_ || !refill_thread_running_) return;
  // As many ahead as the taker may still take, at most kRefillToChunks; asked for when fewer
  // than half of that (at most kRefillBelowChunks) are free.
  const size_t to = std::min(kRefillToChunks, headroom_bytes / kChunkBytes);
  if (free_.size() >= std::min(kRefillBelowChunks, (to + 1) / 2)) return;
  refill_to_ = to;
  refill_wanted_ = true;
  refill_wanted_cv_.notify_one();
}

void* ChunkPool::run_refill_thread(void* self) noexcept {
  static_cast<ChunkPool*>(self)->refill_loop();
  return nullptr;
}

void ChunkPool::refill_loop() noexcept {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    refill_wanted_cv_.wait(lock, [this] { return refill_wanted_ || refill_stop_; });
    if (refill_stop_) return;
    map_ahead_locked(lock, refill_to_);
    refill_wanted_ = false;
    refilled_cv_.notify_all();
  }
}

}  // namespace framescope::internal
