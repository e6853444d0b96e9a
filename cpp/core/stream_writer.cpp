// cpp/core/stream_writer.cpp: the background writer of streaming capture (see stream_writer.h).
#include "stream_writer.h"

#include <unistd.h>

#include <algorithm>
#include <iterator>

#include "session_impl.h"
#include "trace_file.h"
#include "trace_part.h"

namespace framescope::internal {

namespace {

// Moves `from` to the end of `to`, provided `from` starts where `to` ends (its payload indices
// follow on): the records handed to the writer come before those still in the buffer at stop.
template <class T>
void prepend(std::vector<T>& to_front, uint64_t front_base, std::vector<T>& list, uint64_t& base) {
  if (to_front.empty() || front_base + to_front.size() != base) return;
  to_front.insert(to_front.end(), std::make_move_iterator(list.begin()),
                  std::make_move_iterator(list.end()));
  list = std::move(to_front);
  base = front_base;
}

template <class T>
void append_side(std::vector<T>& to, uint64_t& to_base, bool first, std::vector<T>& from,
                 uint64_t from_base) {
  if (first) {
    to = std::move(from);
    to_base = from_base;
    return;
  }
  // Hand-offs of one buffer follow one another, so `from` continues `to` (records a buffer
  // could not move, out of memory, leave a gap of empty ones: later indices stay right).
  if (from_base > to_base + to.size()) to.resize(size_t(from_base - to_base));
  to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
}

}  // namespace

StreamWriter::StreamWriter(const std::string& path, Session& session)
    : path_(path), session_(session), pid_(getpid()) {
  file_ = open_seekable_file_output(path);
  BlockWriter w(*file_);
  write_file_header(w);
  // The part record is completed at finish (the clock's rate is known at stop only); its size
  // does not depend on the values.
  TracePart placeholder;
  placeholder.clock = session.clock;
  placeholder.start_ticks = session.start_ticks;
  placeholder.stop_ticks = session.start_ticks;
  placeholder.with_flops = session.config.with_flops;
  BlockWriter header;
  write_part_header(header, placeholder, 0);
  part_record_ = header.buffer();
  w.raw(part_record_.data(), part_record_.size());
  w.flush();
  thread_ = new std::thread([this] { run(); });
}

StreamWriter::~StreamWriter() {
  if (forked_away()) {
    // The parent's thread, file and shared state: neither joined, closed, unlinked nor
    // destroyed (see Shared).
    (void)file_.release();
    (void)shared_.release();
    thread_ = nullptr;
    return;
  }
  drain();
}

bool StreamWriter::forked_away() const noexcept { return getpid() != pid_; }

bool StreamWriter::accepting() const noexcept {
  if (forked_away()) return false;
  Shared& sh = *shared_;
  std::lock_guard<std::mutex> lock(sh.mutex);
  return sh.accepting;
}

void StreamWriter::hand_off(StreamedChunk&& chunk) noexcept {
  Shared& sh = *shared_;
  RawEvent* events = chunk.events;
  const uint32_t capacity = chunk.capacity;
  {
    std::lock_guard<std::mutex> lock(sh.mutex);
    try {
      sh.queue.push_back(std::move(chunk));
      events = nullptr;
    } catch (...) {
      sh.failed = true;
      sh.error = "framescope: out of memory queueing a chunk for the stream to '" + path_ + "'";
    }
  }
  if (events) {
    session_.give_back_chunk(events, capacity);
    sh.room_cv.notify_all();
    return;
  }
  sh.work_cv.notify_one();
}

RawEvent* StreamWriter::wait_for_chunk(uint32_t& events) noexcept {
  if (forked_away()) return nullptr;
  Shared& sh = *shared_;
  std::unique_lock<std::mutex> lock(sh.mutex);
  const uint32_t wanted = events;
  for (;;) {
    if (sh.failed || sh.drained) return nullptr;
    const uint64_t seen = sh.returned;
    const bool in_flight = !sh.queue.empty() || sh.writing;
    lock.unlock();
    events = wanted;
    if (RawEvent* c = session_.take_chunk(events)) return c;
    lock.lock();
    if (!in_flight && sh.returned == seen) {
      // Nothing was in flight and nothing came back since: the budget is held by the threads'
      // current chunks (hundreds of threads, each with a chunk it has not filled), and waiting
      // could last as long as the slowest of them. One smallest chunk beyond the limit instead
      // (at most one per thread at a time: this thread handed all of its chunks off).
      lock.unlock();
      return session_.take_chunk(events, /*over_limit=*/true);
    }
    sh.room_cv.wait(lock, [&] { return sh.returned != seen || sh.failed; });
  }
}

void StreamWriter::close_intake() noexcept {
  if (forked_away()) return;
  Shared& sh = *shared_;
  std::lock_guard<std::mutex> lock(sh.mutex);
  sh.accepting = false;
}

void StreamWriter::drain() noexcept {
  if (forked_away() || !thread_) return;
  Shared& sh = *shared_;
  {
    std::lock_guard<std::mutex> lock(sh.mutex);
    sh.stopping = true;
  }
  sh.work_cv.notify_all();
  thread_->join();
  delete thread_;
  thread_ = nullptr;
  std::lock_guard<std::mutex> lock(sh.mutex);
  sh.drained = true;
  sh.room_cv.notify_all();
}

void StreamWriter::run() noexcept {
  Shared& sh = *shared_;
  for (;;) {
    StreamedChunk c;
    bool skip;
    {
      std::unique_lock<std::mutex> lock(sh.mutex);
      sh.work_cv.wait(lock, [&] { return !sh.queue.empty() || sh.stopping; });
      if (sh.queue.empty()) return;
      c = std::move(sh.queue.front());
      sh.queue.pop_front();
      sh.writing = true;
      skip = sh.failed;
    }
    std::string error;
    int error_code = 0;
    if (!skip) {
      try {
        write(c);
      } catch (const OutputError& e) {
        error = e.what();
        error_code = e.error_code();
      } catch (const std::exception& e) {
        error = std::string("framescope: streaming to '") + path_ + "' failed: " + e.what();
      }
    }
    session_.give_back_chunk(c.events, c.capacity);
    {
      std::lock_guard<std::mutex> lock(sh.mutex);
      sh.writing = false;
      ++sh.returned;
      if (!error.empty() && !sh.failed) {
        sh.failed = true;
        sh.error = std::move(error);
        sh.error_code = error_code;
      }
    }
    sh.room_cv.notify_all();
  }
}

void StreamWriter::write(StreamedChunk& c) {
  // Keys the slots refer to, resolved at stop (compact calls go through the session's table).
  uint64_t events = 0;
  for (uint64_t i = 0; i < c.count; ++i) {
    const RawEvent& e = c.events[i];
    if (is_compact_pair(e.word)) {
      events += e.ticks != 0 ? 2 : 1;
      continue;
    }
    const uint64_t payload = payload_of(e.word);
    switch (kind_of(e.word)) {
      case EventKind::kRangeBegin:
        if (payload & kPointerMask) keys_.static_name.insert(payload & kPointerMask);
        break;
      case EventKind::kPyCall:
        keys_.python.insert(payload);
        break;
      case EventKind::kCCall:
        keys_.c_function.insert(payload);
        break;
      default:
        break;
    }
    const EventKind k = kind_of(e.word);
    events += (k == EventKind::kPadding || k == EventKind::kBase) ? 0 : 1;
  }
  auto [it, first] = threads_.try_emplace(c.buffer_index);
  StreamedThread& t = it->second;
  if (first) {
    t.first_seq = c.first_seq;
  } else if (c.first_seq != t.next_seq) {
    throw OutputError(
        "framescope: internal error: chunks of a thread out of sequence in the stream", 0, path_);
  }
  t.next_seq = c.first_seq + c.count;
  append_side(t.details, t.details_base, first, c.details, c.details_base);
  append_side(t.strings, t.strings_base, first, c.strings, c.strings_base);
  append_side(t.memory, t.memory_base, first, c.memory, c.memory_base);
  if (c.count) {
    BlockWriter w(*file_);
    write_chunk(w, c.buffer_index, c.first_seq, c.events, c.count);
    w.flush();
  }
  written_events_ += events;
  written_bytes_ = file_->size();
}

StoredTrace StreamWriter::finish(RawTrace&& raw, const KeyResolver& resolver,
                                 const std::vector<std::pair<uint64_t, std::string>>& names) {
  if (finished_) return StoredTrace::load(path_);
  close_intake();
  drain();
  Shared& sh = *shared_;
  if (sh.failed) {
    file_.reset();  // removes the temporary file
    throw OutputError(sh.error, sh.error_code, path_);
  }
  // Each thread's slots: those written during the session, then those still in memory at stop
  // (written below). Side records of the written slots go back in front of the snapshot's.
  std::vector<uint64_t> snapshot_first(raw.threads.size());
  for (size_t i = 0; i < raw.threads.size(); ++i) {
    RawThread& t = raw.threads[i];
    snapshot_first[i] = t.data.first_seq;
    auto it = threads_.find(t.buffer_index);
    if (it == threads_.end()) continue;
    StreamedThread& st = it->second;
    prepend(st.details, st.details_base, t.data.details, t.data.details_base);
    prepend(st.strings, st.strings_base, t.data.strings, t.data.strings_base);
    prepend(st.memory, st.memory_base, t.data.memory, t.data.memory_base);
  }
  std::shared_ptr<TracePart> part = build_part(std::move(raw), resolver, names, &keys_);
  BlockWriter w(*file_);
  for (size_t i = 0; i < part->threads.size(); ++i) {
    PartThread& pt = part->threads[i];
    uint64_t seq = i < snapshot_first.size() ? snapshot_first[i] : pt.first_seq;
    for (const SlotRun& run : pt.runs) {
      write_chunk(w, pt.buffer_index, seq, run.slots, run.count);
      seq += run.count;
    }
    auto it = threads_.find(pt.buffer_index);
    if (it != threads_.end()) {
      pt.first_seq = it->second.first_seq;
      threads_.erase(it);
    }
  }
  // A buffer the stop did not collect (none normally): listed, so that the file stays valid.
  for (const auto& [index, st] : threads_) {
    PartThread pt;
    pt.buffer_index = index;
    pt.first_seq = st.first_seq;
    pt.info.pid = getpid();
    part->threads.push_back(std::move(pt));
  }
  threads_.clear();
  write_part_tables(w, *part);
  w.flush();
  BlockWriter header;
  write_part_header(header, *part, 0);
  if (header.buffer().size() != part_record_.size()) {
    throw OutputError("framescope: internal error: part record size changed", 0, path_);
  }
  file_->write_at(16, header.buffer().data(), header.buffer().size());
  file_->commit();
  file_.reset();
  finished_ = true;
  return StoredTrace::load(path_);
}

}  // namespace framescope::internal
