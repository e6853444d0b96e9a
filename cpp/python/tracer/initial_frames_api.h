// cpp/python/tracer/initial_frames_api.h: what the bindings call of initial_frames.cpp (no Python
// internals here: nanobind translation units cannot include py_compat.h).
#pragma once

namespace framescope::py {

/// In a forked child (GIL held): forgets the parent's other threads' frames from the start.
void initial_frames_after_fork_child() noexcept;

}  // namespace framescope::py
