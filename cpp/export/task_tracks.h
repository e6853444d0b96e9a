// cpp/export/task_tracks.h: asyncio Tasks as tracks of their own, for the Chrome JSON and Perfetto
// writers.
//
// framescope._asyncio_tasks records each step of an asyncio Task (a run of its coroutine between
// two awaits) as a user range named "asyncio.Task <name> #<n>" on the loop's thread, and work the
// Task hands to another thread (asyncio.to_thread) as a range of the same name there. Writers
// show each Task on a track of its own: its lifetime (first step to last) as a slice, each step
// as a slice inside it, the time it awaited as the gaps. The tracks are built while the replay
// streams by (a few numbers per Task and thread, nothing per step), so every path that writes
// these formats (export, convert, streamed sessions, gzip) shows them the same way.
//
// A Task's steps on one thread form one track; its steps on another thread (to_thread) a second
// one, "<name> on <thread>". The first thread, in the trace's thread order, on which the Task ran
// gets the plain name (the loop's thread, unless the program created the executor's threads
// before the loop's).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "framescope/trace_visitor.h"

namespace framescope::exporters {

/// Prefix of the name of a Task step's range (framescope._asyncio_tasks.PREFIX).
constexpr std::string_view kTaskRangePrefix = "asyncio.Task ";
/// The category of the Task tracks' slices.
constexpr std::string_view kTaskCategory = "asyncio task";

class TaskTracks {
 public:
  struct Track {
    uint32_t task = 0;  ///< 1-based, in order of the Tasks' first step in the replay
    uint32_t thread = 0;
    uint32_t ordinal = 0;    ///< 0-based, in order of creation (Perfetto uuids)
    std::string name;        ///< "worker-3 #7", or "worker-3 #7 on asyncio_0" (not escaped)
    std::string key;         ///< "task7" or "task7.3": the Chrome async id
    int64_t first_ns = 0;    ///< start of its first step
    int64_t end_ns = 0;      ///< end of its last step
    int64_t running_ns = 0;  ///< sum of its steps
    uint64_t steps = 0;
  };

  void begin_trace(const TraceView& v) {
    view_ = &v;
    task_of_symbol_.assign(v.symbols.size(), 0);
    for (size_t i = 0; i < v.symbols.size(); ++i) {
      const Symbol& s = v.symbols[i];
      if (s.file.empty() && s.name.size() > kTaskRangePrefix.size() &&
          std::string_view(s.name).substr(0, kTaskRangePrefix.size()) == kTaskRangePrefix) {
        task_of_symbol_[i] = kUnnumbered;
      }
    }
  }

  /// True when `s` is a Task's step (a user range named after a Task).
  bool is_step(const Slice& s) const {
    return s.category == EventCategory::kUserAnnotation && s.symbol < task_of_symbol_.size() &&
           task_of_symbol_[s.symbol] != 0 && s.dur_ns >= 0;
  }

  /// Counts step `s` (at its slice_end) on its track; `*first` tells whether the track was just
  /// created (its lifetime begins at this step). The reference is valid until the next call.
  Track& add_step(const Slice& s, bool* first) {
    uint32_t& task = task_of_symbol_[s.symbol];
    if (task == kUnnumbered) {
      task = uint32_t(track_gen_.size());
      track_gen_.push_back(0);
      track_index_.push_back(0);
      seen_.push_back(false);
    }
    *first = track_gen_[task] != gen_;
    if (*first) {
      track_gen_[task] = gen_;
      track_index_[task] = uint32_t(tracks_.size());
      tracks_.push_back(Track{});
      Track& t = tracks_.back();
      t.task = task;
      t.thread = s.thread;
      t.ordinal = ordinal_++;
      t.name = std::string(
          std::string_view(view_->symbols[s.symbol].name).substr(kTaskRangePrefix.size()));
      t.key = "task" + std::to_string(task);
      if (seen_[task]) {  // work handed to this thread (to_thread)
        const ThreadInfo& th = view_->threads[s.thread];
        t.name += " on ";
        t.name += th.name.empty() ? "thread " + std::to_string(th.os_tid) : th.name;
        t.key += "." + std::to_string(s.thread);
      }
      t.first_ns = s.start_ns;
      t.end_ns = s.start_ns;
    }
    Track& t = tracks_[track_index_[task]];
    t.end_ns = std::max(t.end_ns, s.start_ns + s.dur_ns);
    t.running_ns += s.dur_ns;
    ++t.steps;
    return t;
  }

  /// The tracks of the thread being replayed (at its end_thread), in order of their first step.
  const std::vector<Track>& thread_tracks() const { return tracks_; }

  /// Call at each begin_thread: the previous thread's tracks are done.
  void begin_thread() {
    for (const Track& t : tracks_) seen_[t.task] = true;
    tracks_.clear();
    ++gen_;
  }

 private:
  static constexpr uint32_t kUnnumbered = UINT32_MAX;

  const TraceView* view_ = nullptr;
  std::vector<uint32_t> task_of_symbol_;  // 0: not a Task's range; kUnnumbered: not seen yet
  // Per Task (by number; index 0 unused): the thread generation and index of its track on the
  // thread being replayed, and whether it had a track on an earlier thread.
  std::vector<uint64_t> track_gen_{0};
  std::vector<uint32_t> track_index_{0};
  std::vector<bool> seen_{false};
  std::vector<Track> tracks_;  // of the thread being replayed
  uint64_t gen_ = 1;
  uint32_t ordinal_ = 0;
};

}  // namespace framescope::exporters
