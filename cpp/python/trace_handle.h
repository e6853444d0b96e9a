// cpp/python/trace_handle.h: the Python-side handle of a stored trace, safe to share by threads.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "framescope/stored_trace.h"

namespace framescope::py {

/// What a framescope._core.Trace holds. The StoredTrace itself is immutable; merge() swaps in a
/// new one (copy-on-write) under `mutex`, and every reader takes a reference to the current one
/// first (`current()`), so exports, serialize, events() and merge may run on several threads at
/// once, with the GIL released, without one seeing another's half-done work.
struct TraceState {
  std::mutex mutex;  // guards `stored` and `index`
  std::shared_ptr<const StoredTrace> stored;
  std::shared_ptr<const Trace> index;  // materialized on first random access, dropped by merge
  std::mutex index_build;              // one thread builds the index at a time
  std::string backend;

  std::shared_ptr<const StoredTrace> current() {
    std::lock_guard<std::mutex> lock(mutex);
    return stored;
  }
};

struct PyTrace {
  std::shared_ptr<TraceState> state = std::make_shared<TraceState>();
};

}  // namespace framescope::py
