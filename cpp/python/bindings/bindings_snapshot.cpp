// cpp/python/bindings/bindings_snapshot.cpp: the running session's events so far, as a trace.
#include <nanobind/nanobind.h>

#include "bindings/trace_handle.h"
#include "framescope/session.h"
#include "framescope/stored_trace.h"
#include "tracer/memory_hooks.h"
#include "tracer/thread_names.h"
#include "tracer/tracer_api.h"

namespace nb = nanobind;

namespace framescope::py {

void bind_snapshot(nb::module_& m) {
  m.def(
      "_snapshot",
      [] {
        // The GIL stays held: the resolver reads the code objects the tracer holds, and the
        // thread names are read from threading's objects.
        if (!profiler_enabled()) {
          throw std::runtime_error("framescope: no profiling session is enabled");
        }
        auto names = thread_names_collect();
        RawTracePtr raw;
        try {
          raw = snapshot_profiler();
        } catch (const SessionError& e) {
          throw std::runtime_error(e.what());
        }
        PyTrace out;
        out.state->stored = std::make_shared<const StoredTrace>(StoredTrace::from_raw(
            std::move(*raw), tracer_resolver(), {names.begin(), names.end()}));
        out.state->backend = tracer_backend_description();
        return out;
      },
      "The running session's events so far as a Trace; the session goes on recording "
      "(RuntimeError when none runs).");
  m.def(
      "_rearm_memory_hooks", [] { return memory_hooks_rearm(); },
      "During a profile_memory session: puts framescope's counting allocator wrappers back when "
      "another tool unlinked them (tracemalloc.stop()); returns whether it did.");
  m.def(
      "_allocators_wrapped",
      [] { return nb::make_tuple(memory_hooks_on_top(false), memory_hooks_on_top(true)); },
      "(MEM, OBJ): whether framescope's counting wrapper is the installed allocator (tests).");
}

}  // namespace framescope::py
