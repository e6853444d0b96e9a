// cpp/core/snapshot.cpp: a copy of the running session's events (the flight recorder's dump).
#include "framescope/session.h"
#include "session_impl.h"

namespace framescope {

RawTracePtr snapshot_profiler() {
  std::shared_ptr<internal::Session> session = internal::active_session();
  if (!session) throw SessionError("framescope: no profiling session is enabled");
  RawTracePtr raw(new RawTrace());
  raw->config = session->config;
  // The stop time of the copy: events a thread appends after it are left out by the replay, so
  // every thread's copy ends at the same moment however long copying takes.
  raw->stop_ticks = now_ticks();
  raw->clock = session->clock;
  raw->clock.finish();  // a copy: the session's own calibration goes on until its stop
  raw->start_ticks = session->start_ticks;
  std::lock_guard<std::mutex> lock(session->mutex);
  for (const auto& buffer : session->buffers) {
    RawThread t = internal::copy_raw_thread(*session, *buffer);
    raw->threads.push_back(std::move(t));
  }
  raw->initial_stacks = session->initial_stacks;
  raw->async_ends = session->async_ends;
  raw->compact_keys = session->compact_keys;
  {
    std::lock_guard<std::mutex> warnings_lock(session->warnings_mutex);
    raw->warnings = session->warnings;
  }
  for (const RawThread& t : raw->threads) {
    if (t.data.dropped) {
      raw->warnings.push_back("framescope: " + std::to_string(t.data.dropped) +
                              " events dropped on thread " + std::to_string(t.os_tid) +
                              (session->config.on_limit == LimitPolicy::kKeepNewest
                                   ? " (older than the kept window)"
                                   : ""));
    }
  }
  return raw;
}

}  // namespace framescope
