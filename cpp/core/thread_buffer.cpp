// cpp/core/thread_buffer.cpp: chunk management, side records and snapshots of a ThreadBuffer.
#include "framescope/internal/thread_buffer.h"

#include <algorithm>

#include "chunk_pool.h"
#include "session_impl.h"

namespace framescope::internal {

ThreadBuffer::ThreadBuffer(Session* session, uint32_t index) : session_(session), index_(index) {}

ThreadBuffer::~ThreadBuffer() { release_chunks(); }

uint64_t ThreadBuffer::append_slow(uint64_t ticks, uint64_t word) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  if (full_ || detached_) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return kDroppedSeq;
  }
  RawEvent* chunk = session_->take_chunk();
  if (!chunk) {
    if (session_->config.on_limit == LimitPolicy::kKeepNewest && !chunks_.empty()) {
      // Flight recorder: recycle this thread's oldest chunk (the full current one when it has
      // only one; the owner is the caller, so nothing else writes to it).
      Chunk oldest = chunks_.front();
      chunks_.pop_front();
      dropped_.fetch_add(oldest.capacity, std::memory_order_relaxed);
      release_side_records(oldest);
      chunk = oldest.events;
    } else {
      session_->warn_limit_once();
      full_ = true;
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return kDroppedSeq;
    }
  }
  chunks_.push_back(Chunk{chunk, next_seq_, uint32_t(ChunkPool::kChunkEvents)});
  cursor_ = chunk;
  limit_ = chunk + ChunkPool::kChunkEvents;
  cursor_->ticks = ticks;
  cursor_->word = word;
  ++cursor_;
  uint64_t seq = next_seq_++;
  committed_.store(next_seq_, std::memory_order_release);
  return seq;
}

void ThreadBuffer::release_side_records(const Chunk& chunk) noexcept {
  // Side records are appended in the order of their events, so the records of the oldest chunk
  // are a prefix of each list: release up to the highest index it references.
  uint64_t last_detail = 0, last_string = 0, last_memory = 0;
  bool any_detail = false, any_string = false, any_memory = false;
  for (uint32_t i = 0; i < chunk.capacity; ++i) {
    const uint64_t word = chunk.events[i].word;
    switch (kind_of(word)) {
      case EventKind::kRangeBeginSide:
        last_detail = payload_of(word);
        any_detail = true;
        break;
      case EventKind::kMark:
        last_string = payload_of(word);
        any_string = true;
        break;
      case EventKind::kMemory:
        last_memory = payload_of(word);
        any_memory = true;
        break;
      default:
        break;
    }
  }
  auto release = [](auto& list, uint64_t& base, bool any, uint64_t last) {
    if (!any) return;
    while (!list.empty() && base <= last) {
      list.pop_front();
      ++base;
    }
  };
  release(details_, details_base_, any_detail, last_detail);
  release(strings_, strings_base_, any_string, last_string);
  release(memory_, memory_base_, any_memory, last_memory);
}

uint64_t ThreadBuffer::append_range_detail(uint64_t ticks, RangeDetail detail) noexcept {
  uint64_t index;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (full_ || detached_) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return kDroppedSeq;
    }
    index = details_base_ + details_.size();
    details_.push_back(std::move(detail));
  }
  return append(ticks, pack_word(EventKind::kRangeBeginSide, index));
}

uint64_t ThreadBuffer::append_mark(uint64_t ticks, std::string name) noexcept {
  uint64_t index;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (full_ || detached_) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return kDroppedSeq;
    }
    index = strings_base_ + strings_.size();
    strings_.push_back(std::move(name));
  }
  return append(ticks, pack_word(EventKind::kMark, index));
}

uint64_t ThreadBuffer::append_memory(uint64_t ticks, const MemoryRecord& rec) noexcept {
  uint64_t index;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (full_ || detached_) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return kDroppedSeq;
    }
    index = memory_base_ + memory_.size();
    memory_.push_back(rec);
  }
  return append(ticks, pack_word(EventKind::kMemory, index));
}

ThreadBuffer::Snapshot ThreadBuffer::snapshot() const {
  Snapshot s;
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t committed = committed_.load(std::memory_order_acquire);
  s.first_seq = chunks_.empty() ? committed : chunks_.front().first_seq;
  if (committed > s.first_seq) s.events.reserve(committed - s.first_seq);
  for (const Chunk& c : chunks_) {
    if (c.first_seq >= committed) break;
    uint64_t n = std::min<uint64_t>(c.capacity, committed - c.first_seq);
    s.events.insert(s.events.end(), c.events, c.events + n);
  }
  s.details.assign(details_.begin(), details_.end());
  s.strings.assign(strings_.begin(), strings_.end());
  s.memory.assign(memory_.begin(), memory_.end());
  s.details_base = details_base_;
  s.strings_base = strings_base_;
  s.memory_base = memory_base_;
  s.dropped = dropped_.load(std::memory_order_relaxed);
  return s;
}

void ThreadBuffer::detach(bool owner_is_caller) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  detached_ = true;
  // The owner's lock-free fast path can only touch the newest chunk, so every older chunk can go
  // back to the pool now; the newest goes when the owner lets go of the buffer.
  while (chunks_.size() > (owner_is_caller ? 0u : 1u)) {
    session_->give_back_chunk(chunks_.front().events);
    chunks_.pop_front();
  }
  if (owner_is_caller) cursor_ = limit_ = nullptr;
}

void ThreadBuffer::release_chunks() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Chunk& c : chunks_) ChunkPool::instance().release(c.events);
  chunks_.clear();
  cursor_ = limit_ = nullptr;
}

}  // namespace framescope::internal
