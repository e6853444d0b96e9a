// cpp/core/stream_writer.h: streaming capture: full event chunks go to a .fstrace file from a
// background thread while the session runs.
//
// How a streamed session flows (the file is the .fstrace layout of trace_file.cpp):
//   start:  the file (a temporary next to the target) gets its header and a placeholder part
//           record; the writer thread starts.
//   run:    a ThreadBuffer whose chunk is full hands it, with the side records that only it and
//           older chunks reference, to hand_off() and takes a fresh chunk; the writer thread
//           appends it as a chunk record, notes which keys it refers to (code objects, C
//           functions, static names) and gives the chunk back to the session's budget. When the
//           budget (SessionConfig::memory_limit_bytes) is used up, the recording thread waits for
//           the writer (wait_for_chunk) instead of dropping events.
//   stop:   disable_profiler() closes the intake before it snapshots the buffers (so a chunk is
//           either written or in a snapshot, never both), then drains the queue; finish() writes
//           the chunks still in memory and the part's tables, completes the part record, renames
//           the file into place and maps it: the trace reads from the file.
// So memory stays flat however long the session runs: chunks in flight plus the side records
// (range details, mark names, memory samples), which stay in memory until stop.
//
// Fork: the writer thread does not exist in a forked child. Every entry point checks the pid:
// in a child the stream takes nothing (buffers keep their chunks, as without streaming) and the
// writer is abandoned, never joined or closed (the parent still writes the file).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "framescope/internal/thread_buffer.h"
#include "framescope/output.h"
#include "framescope/session.h"
#include "framescope/stored_trace.h"

namespace framescope::internal {

class Session;

/// Keys that slots written to the stream refer to; resolved into symbols at stop.
struct RecordedKeys {
  std::unordered_set<uint64_t> python, c_function, static_name;
};

/// A chunk handed to the writer with the side records that only it (and chunks handed before
/// it) reference.
struct StreamedChunk {
  uint32_t buffer_index = 0;
  uint64_t first_seq = 0;
  RawEvent* events = nullptr;  // a chunk of the session's budget, given back once written
  uint32_t capacity = 0;       // its size in slots
  uint64_t count = 0;          // committed slots
  std::vector<RangeDetail> details;
  std::vector<std::string> strings;
  std::vector<MemoryRecord> memory;
  uint64_t details_base = 0;  // payload index of details[0] (and so on)
  uint64_t strings_base = 0;
  uint64_t memory_base = 0;
};

/// What the writer wrote of one thread buffer.
struct StreamedThread {
  uint64_t first_seq = 0;  // of the first chunk written
  uint64_t next_seq = 0;   // after the last chunk written
  std::vector<RangeDetail> details;
  std::vector<std::string> strings;
  std::vector<MemoryRecord> memory;
  uint64_t details_base = 0, strings_base = 0, memory_base = 0;
  bool has_side = false;
};

/// One streaming session's file and writer thread. Created by enable_profiler(), shared by the
/// Session and the RawTrace of its stop. Thread-safe where stated.
class StreamWriter {
 public:
  /// Creates the file (a temporary in the folder of `path`, renamed at finish) and starts the
  /// writer thread. `session` must outlive drain(). Throws OutputError when the file cannot be
  /// created, std::invalid_argument for a path with a NUL byte.
  StreamWriter(const std::string& path, Session& session);
  /// Joins the writer (if finish() did not) and removes the temporary file unless finished.
  /// In a forked child: abandons everything (the parent owns the file and the thread).
  ~StreamWriter();
  StreamWriter(const StreamWriter&) = delete;
  StreamWriter& operator=(const StreamWriter&) = delete;

  /// True while chunks may be handed off: in the process that started the stream, before
  /// close_intake(). Call under the handing buffer's mutex (close_intake() is ordered with it).
  bool accepting() const noexcept;
  /// Queues a chunk (the caller checked accepting() under its buffer mutex). Never fails: when
  /// the writer failed, the chunk is given back unwritten and the error reported at finish().
  /// Thread-safe.
  void hand_off(StreamedChunk&& chunk) noexcept;
  /// Waits until the writer gave back a chunk, then takes one of up to `events` slots from the
  /// session's budget (`events` is set to the size taken). When nothing is in flight (the budget
  /// is held by the threads' current chunks, which only they can fill), a smallest chunk beyond
  /// the limit: a streamed session never drops events while the writer keeps up. Returns null
  /// only when the writer failed, was drained, or in a forked child. Thread-safe.
  RawEvent* wait_for_chunk(uint32_t& events) noexcept;

  /// No more hand-offs (disable_profiler, before it snapshots the buffers).
  void close_intake() noexcept;
  /// Writes what is queued and stops the writer thread. Idempotent.
  void drain() noexcept;
  /// Completes the file with the chunks still in `raw` (the stop's snapshots) and the part's
  /// tables, renames it into place and returns it mapped. Throws OutputError (errno, path) when
  /// writing failed at any point; then no file replaces `path`. Idempotent: a second call maps
  /// the finished file again.
  StoredTrace finish(RawTrace&& raw, const KeyResolver& resolver,
                     const std::vector<std::pair<uint64_t, std::string>>& names);

  /// True in a child forked while this stream ran (the stream is the parent's).
  bool forked_away() const noexcept;
  const std::string& path() const noexcept { return path_; }
  /// Events written so far (read after drain()).
  uint64_t written_events() const noexcept { return written_events_; }
  uint64_t written_bytes() const noexcept { return written_bytes_; }

 private:
  void run() noexcept;
  void write(StreamedChunk& c);

  const std::string path_;
  Session& session_;
  const int64_t pid_;
  std::unique_ptr<SeekableOutput> file_;
  std::string part_record_;        // the placeholder part record, patched at finish
  std::thread* thread_ = nullptr;  // a pointer: leaked, never destroyed, in a forked child

  // What the recording threads and the writer share. On the heap, so that a forked child can
  // abandon it: the parent's writer may have been waiting on a condition variable at the fork,
  // and destroying the child's copy of it would wait for that waiter forever.
  struct Shared {
    std::mutex mutex;
    std::condition_variable work_cv;  // writer: chunks queued or stopping
    std::condition_variable room_cv;  // recorders: a chunk went back
    std::deque<StreamedChunk> queue;
    uint64_t returned = 0;  // chunks given back so far
    bool writing = false;   // the writer holds a chunk out of the queue
    bool stopping = false;
    bool accepting = true;
    bool failed = false;
    bool drained = false;
    std::string error;
    int error_code = 0;
  };
  std::unique_ptr<Shared> shared_ = std::make_unique<Shared>();

  // Owned by the writer thread until drain() joined it.
  std::unordered_map<uint32_t, StreamedThread> threads_;
  RecordedKeys keys_;
  uint64_t written_events_ = 0;
  uint64_t written_bytes_ = 0;
  bool finished_ = false;
};

}  // namespace framescope::internal
