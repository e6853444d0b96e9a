// cpp/core/thread_buffer.cpp: chunk management, side records and snapshots of a ThreadBuffer.
#include "framescope/internal/thread_buffer.h"

#include <algorithm>

#include "chunk_pool.h"
#include "session_impl.h"
#include "stream_writer.h"

namespace framescope::internal {

static_assert(ChunkPool::kMinChunkEvents == 256, "thread_buffer.h starts next_chunk_events_ there");

ThreadBuffer::ThreadBuffer(Session* session, uint32_t index) : session_(session), index_(index) {}

ThreadBuffer::~ThreadBuffer() { release_chunks(); }

bool ThreadBuffer::reserve_slots_locked(size_t slots, uint64_t first_word) noexcept {
  if (full_ || detached_) return false;
  if (size_t(limit_ - cursor_) >= slots) return true;
  // Chunks are always used up to the end, so that seq - first_seq locates a slot: pad the
  // slots this chunk cannot use (kind 0, which replay skips).
  while (cursor_ != limit_) write_slot(0, 0);
  const SideRecordMarks first_side = side_marks_from(first_word);
  // Streaming capture: the full chunk goes to the writer thread; at the memory limit this thread
  // waits for the writer to give one back rather than drop events.
  StreamWriter* stream = session_->stream.get();
  const bool streaming = stream && stream->accepting();
  if (streaming) stream_chunks_locked(*stream, first_side);
  uint32_t events = next_chunk_events_;
  RawEvent* chunk = session_->take_chunk(events);
  if (!chunk && streaming) {
    chunk = stream->wait_for_chunk(events);
  } else if (!chunk && session_->config.on_limit == LimitPolicy::kKeepNewest && chunks_.empty()) {
    // Flight recorder (never streamed: enable_profiler refuses the pair): a thread that starts
    // once the limit is reached has no chunk of its own to recycle (the session let go of
    // exited threads' events to make room for it, see create_buffer, but live threads may hold
    // it all); it gets one smallest chunk beyond the limit (at most one per live thread, as the
    // limit's contract allows), else its newest events, those a dump is for, would be lost.
    chunk = session_->take_chunk(events, /*over_limit=*/true);
  }
  if (!chunk) {
    if (session_->config.on_limit == LimitPolicy::kKeepNewest && !chunks_.empty()) {
      // Flight recorder: recycle this thread's oldest chunk (the full current one when it has
      // only one; the owner is the caller, so nothing else writes to it).
      Chunk oldest = chunks_.front();
      chunks_.pop_front();
      // The ranges and calls that enclose the kept events must stay visible: their begins (and
      // the side records they need) are carried before the records go.
      const uint64_t carried_before = carried_events_locked();
      carry_open_begins(oldest, oldest.capacity);
      // Dropped counts events, as recorded_events does, not slots: a pair slot holds two compact
      // events, a base or padding slot none. Each carried entry is one event that replays
      // (and counts as recorded) in place of its recycled original, so what the chunk held plus
      // what was carried before is what is carried now plus what is gone for good. That also
      // counts a carried begin whose end was recycled now, or that the carried cap pushed out.
      const uint64_t carried_after = carried_events_locked();
      dropped_.fetch_add(
          count_events(oldest.events, oldest.capacity) + carried_before - carried_after,
          std::memory_order_relaxed);
      // Records referenced only by the recycled chunk go with it: those below the first
      // records the remaining chunks (or the event being appended) may reference.
      release_side_records_below(chunks_.empty() ? first_side : chunks_.front().first_side);
      chunk = oldest.events;
      events = oldest.capacity;
    } else {
      session_->warn_limit_once();
      full_ = true;
      return false;
    }
  }
  // The next chunk is 4x this one (up to a full chunk): small for threads that record little.
  if (events >= next_chunk_events_) {
    next_chunk_events_ = uint32_t(std::min<size_t>(ChunkPool::kChunkEvents, size_t(events) * 4));
  }
  const uint64_t seq = committed_locked();
  try {
    chunks_.push_back(Chunk{chunk, seq, events, first_side});
  } catch (...) {
    session_->give_back_chunk(chunk, events);
    return false;
  }
  seq_bias_ = seq - (reinterpret_cast<uintptr_t>(chunk) >> 4);  // seq_of(chunk) == seq
  publish_cursor(chunk);
  limit_ = chunk + events;
  pending_end_ = nullptr;
  base_window_ = 0;  // compact events in the new chunk need a base of their own
  return true;
}

uint64_t ThreadBuffer::append_slow(uint64_t ticks, uint64_t word) noexcept {
  if (counting_only_) {  // shared by many threads: no lock, nothing kept
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return kDroppedSeq;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (!reserve_slots_locked(1, word)) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return kDroppedSeq;
  }
  return write_slot(ticks, word);
}

void ThreadBuffer::append_compact_slow(uint64_t ticks, uint64_t bits) noexcept {
  // A new chunk, the first compact event of a chunk, or a gap beyond the base's window: write a
  // base (an ordinary slot) and start a new pair slot right after it, in the same chunk.
  if (counting_only_) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t base_word = pack_word(EventKind::kBase, 0);
  if (!reserve_slots_locked(2, base_word)) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  write_slot(ticks, base_word);
  base_ticks_ = ticks;
  base_window_ = kCompactDeltaLimit;
  open_pair(cursor_, bits);  // delta 0
}

SideRecordMarks ThreadBuffer::side_marks_from(uint64_t first_word) const noexcept {
  // By default the next record to be appended; but a side event's record is appended before
  // the event itself, so when the chunk starts with one, its record is the first referenced.
  SideRecordMarks marks{details_base_ + details_.size(), strings_base_ + strings_.size(),
                        memory_base_ + memory_.size()};
  switch (kind_of(first_word)) {
    case EventKind::kRangeBeginSide:
      marks.details = payload_of(first_word);
      break;
    case EventKind::kMark:
      marks.strings = payload_of(first_word);
      break;
    case EventKind::kMemory:
      marks.memory = payload_of(first_word);
      break;
    default:
      break;
  }
  return marks;
}

void ThreadBuffer::stream_chunks_locked(StreamWriter& stream,
                                        const SideRecordMarks& keep) noexcept {
  const uint64_t committed = committed_locked();
  // Records handed to the writer are the stream's from here: no longer this session's to count.
  auto take = [this](auto& list, uint64_t& base, uint64_t below, auto& out, uint64_t& out_base) {
    out_base = base;
    while (!list.empty() && base < below) {
      const int64_t bytes = bytes_of(list.front());
      out.push_back(std::move(list.front()));
      list.pop_front();
      session_->charge(-bytes);
      ++base;
    }
  };
  while (!chunks_.empty()) {
    const Chunk c = chunks_.front();
    StreamedChunk sc;
    sc.buffer_index = index_;
    sc.first_seq = c.first_seq;
    sc.events = c.events;
    sc.capacity = c.capacity;
    sc.count =
        committed > c.first_seq ? std::min<uint64_t>(c.capacity, committed - c.first_seq) : 0;
    const SideRecordMarks& below = chunks_.size() > 1 ? chunks_[1].first_side : keep;
    try {
      take(details_, details_base_, below.details, sc.details, sc.details_base);
      take(strings_, strings_base_, below.strings, sc.strings, sc.strings_base);
      take(memory_, memory_base_, below.memory, sc.memory, sc.memory_base);
    } catch (...) {
      // Out of memory moving records: those not moved are released (their events replay
      // without them), so that the next hand-off's records still follow on.
      release_side_records_below(below);
    }
    chunks_.pop_front();
    stream.hand_off(std::move(sc));
  }
  // The owner must not write into a chunk it handed off: the next event takes the slow path.
  drop_cursor_locked();
}

void ThreadBuffer::owner_exiting() noexcept {
  if (counting_only_) return;  // not one thread's: it never exits
  std::lock_guard<std::mutex> lock(mutex_);
  exited_.store(true, std::memory_order_release);
  if (detached_ || chunks_.empty()) return;  // detached: the session may be gone
  StreamWriter* stream = session_->stream.get();
  if (stream && stream->accepting()) stream_chunks_locked(*stream, side_marks_from(0));
}

int64_t ThreadBuffer::bytes_of(const RangeDetail& d) noexcept {
  int64_t n = int64_t(sizeof(RangeDetail) + d.name.capacity());
  for (const RangeInput& in : d.inputs) {
    n += int64_t(sizeof(RangeInput) + in.text.capacity() + in.shape.capacity() * sizeof(int64_t));
  }
  return n;
}

int64_t ThreadBuffer::bytes_of(const std::string& s) noexcept {
  return int64_t(sizeof(std::string) + s.capacity());
}

bool ThreadBuffer::try_charge(size_t bytes) noexcept {
  if (counting_only_) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  // Not detached: the session is alive (it detaches every buffer before it goes).
  return !full_ && !detached_ && session_->try_charge(bytes);
}

uint64_t ThreadBuffer::evict_exited() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t committed = committed_locked();  // the owner is gone
  uint64_t n = dropped_.exchange(0, std::memory_order_relaxed) + carried_events_locked();
  for (const Chunk& c : chunks_) {
    if (c.first_seq < committed) {
      n += count_events(c.events, size_t(std::min<uint64_t>(c.capacity, committed - c.first_seq)));
    }
    session_->give_back_chunk(c.events, c.capacity);
  }
  chunks_.clear();
  drop_cursor_locked();
  release_side_records_below(side_marks_from(0));
  open_begins_.clear();
  open_details_.clear();
  initial_closes_.clear();
  full_ = true;
  return n;
}

void ThreadBuffer::release_side_records_below(const SideRecordMarks& keep) noexcept {
  auto release = [this](auto& list, uint64_t& base, uint64_t keep_from) {
    while (!list.empty() && base < keep_from) {
      session_->charge(-bytes_of(list.front()));
      list.pop_front();
      ++base;
    }
  };
  release(details_, details_base_, keep.details);
  release(strings_, strings_base_, keep.strings);
  release(memory_, memory_base_, keep.memory);
}

void ThreadBuffer::carry_open_begins(const Chunk& chunk, size_t slots) noexcept {
  auto is_python = [](uint64_t word) {
    return is_compact_pair(word) || kind_of(word) == EventKind::kPyCall;
  };
  auto remove_innermost = [this](auto&& matches) {
    for (size_t i = open_begins_.size(); i-- > 0;) {
      if (matches(open_begins_[i])) {
        open_begins_.erase(open_begins_.begin() + long(i));
        return true;
      }
    }
    return false;
  };
  auto push = [this](uint64_t ticks, uint64_t word, uint64_t seq) {
    if (open_begins_.size() >= kMaxCarried) {
      // The outermost begin is lost (counted dropped by the caller: carried events went down).
      open_begins_.erase(open_begins_.begin());
    }
    open_begins_.push_back({ticks, word, seq});
  };
  // A Python return with no carried call closes a frame that was running at the session start
  // (replay pops it from the initial stack), as an anchor may.
  auto close_initial = [this](uint64_t ticks, uint64_t word) {
    if (initial_closes_.size() >= kMaxInitialCloses) {
      initial_closes_.erase(initial_closes_.begin());
    }
    initial_closes_.push_back({ticks, word});
  };
  try {
    uint64_t base = 0;
    auto compact = [&](uint64_t e) {
      const uint64_t ticks = base + compact_delta(e);
      if (compact_is_return(e)) {
        if (!remove_innermost([&](const OpenBegin& b) { return is_python(b.word); })) {
          close_initial(ticks, pack_word(EventKind::kPyReturn, 0));
        }
      } else {
        push(ticks, e & ~(kCompactDeltaLimit - 1), 0);
      }
    };
    for (size_t i = 0; i < slots; ++i) {
      const RawEvent& e = chunk.events[i];
      const uint64_t seq = chunk.first_seq + i;
      if (is_compact_pair(e.word)) {
        compact(e.word);
        if (e.ticks != 0) compact(e.ticks);
        continue;
      }
      const uint64_t payload = payload_of(e.word);
      switch (kind_of(e.word)) {
        case EventKind::kRangeBegin:
        case EventKind::kPyCall:
        case EventKind::kCCall:
          push(e.ticks, e.word, seq);
          break;
        case EventKind::kRangeBeginSide:
          if (payload >= details_base_ && payload - details_base_ < details_.size()) {
            open_details_.push_back(details_[payload - details_base_]);
            push(e.ticks, pack_word(EventKind::kRangeBeginSide, open_details_.size() - 1), seq);
          }
          break;
        case EventKind::kRangeEnd:
          remove_innermost([&](const OpenBegin& b) {
            const EventKind k = is_compact_pair(b.word) ? EventKind::kPadding : kind_of(b.word);
            return (k == EventKind::kRangeBegin || k == EventKind::kRangeBeginSide) &&
                   b.seq == payload;
          });
          break;
        case EventKind::kPyReturn:
          if (!remove_innermost([&](const OpenBegin& b) { return is_python(b.word); })) {
            close_initial(e.ticks, e.word);
          }
          break;
        case EventKind::kCReturn:
          remove_innermost([](const OpenBegin& b) {
            return !is_compact_pair(b.word) && kind_of(b.word) == EventKind::kCCall;
          });
          break;
        case EventKind::kPyAnchor:
        case EventKind::kPyInitialExit:
          close_initial(e.ticks, e.word);
          break;
        // (kPyExitEarly is not carried: a frame whose early end lies in a recycled chunk ends at
        // its return event, with what ran while its locals were freed inside it.)
        case EventKind::kBase:
          base = e.ticks;
          break;
        default:
          break;
      }
    }
    // Drop the side records of carried ranges that closed meanwhile (renumbering the rest).
    size_t side = 0;
    for (const OpenBegin& b : open_begins_) {
      side += !is_compact_pair(b.word) && kind_of(b.word) == EventKind::kRangeBeginSide;
    }
    if (open_details_.size() > 2 * side + 64) {
      std::vector<RangeDetail> kept;
      kept.reserve(side);
      for (OpenBegin& b : open_begins_) {
        if (is_compact_pair(b.word) || kind_of(b.word) != EventKind::kRangeBeginSide) continue;
        kept.push_back(std::move(open_details_[payload_of(b.word)]));
        b.word = pack_word(EventKind::kRangeBeginSide, kept.size() - 1);
      }
      open_details_ = std::move(kept);
    }
  } catch (...) {
    // Out of memory: the carried begins are lost (the caller counts them dropped).
    open_begins_.clear();
    open_details_.clear();
  }
}

std::vector<RawEvent> ThreadBuffer::restart_in_fork_child(uint64_t fork_ticks,
                                                          uint64_t os_tid) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t committed = committed_locked();
  for (const Chunk& c : chunks_) {
    if (c.first_seq >= committed) break;
    carry_open_begins(c, size_t(std::min<uint64_t>(c.capacity, committed - c.first_seq)));
    ChunkPool::instance().release(c.events, c.capacity);
  }
  chunks_.clear();
  drop_cursor_locked();
  release_side_records_below(side_marks_from(0));  // records of the parent's events
  full_ = false;
  dropped_.store(0, std::memory_order_relaxed);
  carried_floor_ticks_ = fork_ticks;
  this->os_tid = os_tid;
  std::vector<RawEvent> closes;
  closes.swap(initial_closes_);
  return closes;
}

template <class Records, class Record>
uint64_t ThreadBuffer::append_side(uint64_t ticks, EventKind kind, Records& records,
                                   const uint64_t& base, Record&& record) noexcept {
  if (counting_only_) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return kDroppedSeq;
  }
  uint64_t index;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (full_ || detached_) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return kDroppedSeq;
    }
    index = base + records.size();
    const int64_t bytes = bytes_of(record);
    records.push_back(std::forward<Record>(record));
    session_->charge(bytes);
  }
  return append(ticks, pack_word(kind, index));
}

uint64_t ThreadBuffer::append_range_detail(uint64_t ticks, RangeDetail detail) noexcept {
  return append_side(ticks, EventKind::kRangeBeginSide, details_, details_base_, std::move(detail));
}

uint64_t ThreadBuffer::append_mark(uint64_t ticks, std::string name) noexcept {
  return append_side(ticks, EventKind::kMark, strings_, strings_base_, std::move(name));
}

uint64_t ThreadBuffer::append_memory(uint64_t ticks, const MemoryRecord& rec) noexcept {
  return append_side(ticks, EventKind::kMemory, memory_, memory_base_, rec);
}

ThreadBuffer::Snapshot ThreadBuffer::snapshot() const {
  Snapshot s;
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t committed = committed_locked();
  s.first_seq = chunks_.empty() ? committed : chunks_.front().first_seq;
  if (committed > s.first_seq) s.events.reserve(committed - s.first_seq);
  for (const Chunk& c : chunks_) {
    if (c.first_seq >= committed) break;
    uint64_t n = std::min<uint64_t>(c.capacity, committed - c.first_seq);
    if (c.first_seq + n < committed) {
      s.events.insert(s.events.end(), c.events, c.events + n);
      continue;
    }
    // The newest slot may be a pair slot whose second half the owner writes at any moment.
    s.events.insert(s.events.end(), c.events, c.events + n - 1);
    const RawEvent& last = c.events[n - 1];
    s.events.push_back(RawEvent{__atomic_load_n(&last.ticks, __ATOMIC_RELAXED), last.word});
  }
  s.details.assign(details_.begin(), details_.end());
  s.strings.assign(strings_.begin(), strings_.end());
  s.memory.assign(memory_.begin(), memory_.end());
  s.details_base = details_base_;
  s.strings_base = strings_base_;
  s.memory_base = memory_base_;
  s.dropped = dropped_.load(std::memory_order_relaxed);
  if (!open_begins_.empty() || !initial_closes_.empty()) {
    const uint64_t floor = carried_floor_ticks_;
    auto add = [&s, floor](uint64_t ticks, uint64_t word, uint64_t seq) {
      s.carried.push_back({std::max(ticks, floor), word});
      s.carried_seq.push_back(seq);
    };
    for (const RawEvent& e : initial_closes_) add(e.ticks, e.word, kDroppedSeq);
    for (const OpenBegin& b : open_begins_) {
      if (is_compact_pair(b.word)) {
        // A compact call needs a base: one of its own, with the call at delta 0.
        add(b.ticks, pack_word(EventKind::kBase, 0), kDroppedSeq);
        s.carried.push_back({0, b.word});
        s.carried_seq.push_back(kDroppedSeq);
      } else {
        add(b.ticks, b.word, b.seq);
      }
    }
    s.carried_details = open_details_;
  }
  return s;
}

void ThreadBuffer::detach(bool owner_is_caller) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  detached_ = true;
  // The owner's lock-free fast path can only touch the newest chunk, so every older chunk can go
  // back to the pool now; the newest goes when the owner lets go of the buffer.
  while (chunks_.size() > (owner_is_caller ? 0u : 1u)) {
    session_->give_back_chunk(chunks_.front().events, chunks_.front().capacity);
    chunks_.pop_front();
  }
  if (owner_is_caller) {
    drop_cursor_locked();
  }
}

void ThreadBuffer::release_chunks() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Chunk& c : chunks_) ChunkPool::instance().release(c.events, c.capacity);
  chunks_.clear();
  drop_cursor_locked();
}

uint64_t count_events(const RawEvent* slots, size_t count) noexcept {
  uint64_t n = 0;
  for (const RawEvent* e = slots; e != slots + count; ++e) {
    if (is_compact_pair(e->word)) {
      n += e->ticks != 0 ? 2 : 1;
    } else {
      EventKind k = kind_of(e->word);
      n += (k == EventKind::kPadding || k == EventKind::kBase) ? 0 : 1;
    }
  }
  return n;
}

uint64_t count_events(const std::vector<RawEvent>& slots) noexcept {
  return count_events(slots.data(), slots.size());
}

}  // namespace framescope::internal
