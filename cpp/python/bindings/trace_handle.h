// cpp/python/bindings/trace_handle.h: the Python-side handle of a stored trace (thread-safe).
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include <nanobind/nanobind.h>

#include "framescope/stored_trace.h"

namespace nb = nanobind;

namespace framescope::py {

/// What a framescope._core.Trace holds. The StoredTrace itself is immutable; merge() swaps in a
/// new one (copy-on-write) under `mutex`, and every reader takes a reference to the current one
/// first (`current()`), so exports, serialize, events() and merge may run on several threads at
/// once, with the GIL released, without one seeing another's half-done work.
struct TraceState {
  std::mutex mutex;  // guards `stored` and `index`
  std::shared_ptr<const StoredTrace> stored;
  std::shared_ptr<const Trace> index;  // materialized on first random access, dropped by merge
  // Every event's duration by index (bindings_events.cpp): built by the first iteration.
  std::shared_ptr<const std::vector<int64_t>> durations;
  std::mutex index_build;  // one thread builds the index (or the durations) at a time
  std::string backend;

  std::shared_ptr<const StoredTrace> current() {
    std::lock_guard<std::mutex> lock(mutex);
    return stored;
  }

  /// What `build(stored)` makes of the current trace, cached in `slot` (a member of this state
  /// that merge() clears): built once, by one thread at a time (`index_build`), with the GIL
  /// released; the result is kept only if no merge swapped the trace meanwhile. Call with the
  /// GIL held.
  template <class T, class Build>
  std::shared_ptr<const T> built_once(std::shared_ptr<const T> TraceState::* slot, Build build) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (this->*slot) return this->*slot;
    }
    nanobind::gil_scoped_release release;
    std::lock_guard<std::mutex> building(index_build);
    std::shared_ptr<const StoredTrace> source;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (this->*slot) return this->*slot;  // built by the thread this one waited for
      source = stored;
    }
    std::shared_ptr<const T> made = build(*source);
    std::lock_guard<std::mutex> lock(mutex);
    if (stored == source) this->*slot = made;
    return made;
  }
};

struct EventContext;  // bindings_events.cpp

struct PyTrace {
  std::shared_ptr<TraceState> state = std::make_shared<TraceState>();
  /// Names as str objects and the trace they belong to, shared by Events (GIL only).
  std::shared_ptr<EventContext> events_context;
};

/// `s` as a str, invalid UTF-8 replaced by U+FFFD (names may hold anything).
nb::str py_str(const std::string& s);
/// Sets OSError(errno, message, path) for `e` (OSError(message) when it has no errno).
void set_output_error(const OutputError& e);
/// The materialized index of the current trace (random access), built once per trace state.
std::shared_ptr<const Trace> index_of(TraceState& st);
/// Adds the event methods (iter_events, find, children, random access) and the Event class.
void bind_events(nb::module_& m, nb::class_<PyTrace>& trace);

}  // namespace framescope::py
