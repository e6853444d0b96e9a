// cpp/python/tracer/fallback_internal.h: state and recording shared by the fallback backends' files
// (fallback_tracer.cpp, monitoring_backend.cpp, setprofile_backend.cpp, builtin_names.cpp).
#pragma once

#include "py_compat.h"

#include <unordered_map>

#include "framescope/clock.h"
#include "framescope/internal/thread_buffer.h"
#include "framescope/session.h"

namespace framescope::py::fallback {

/// What the fallback records now. GIL-protected.
struct State {
  bool running = false;
  bool python_frames = false;  ///< Python calls and returns (the fallback backend)
  bool c_calls = false;        ///< builtin calls
#if FS_PY312
  int tool_id = -1;          ///< framescope's sys.monitoring tool, -1 when not taken
  bool hook_extras = false;  ///< frame-hook backend: local events on watched codes (tracer.h)
  std::unordered_map<PyObject*, int> watched_codes;  ///< strong refs -> WatchEvents asked for
#endif
};
extern State g_fb;

/// Takes the platform's hook (sys.monitoring tool, or the profile function on every thread) with
/// the flags of g_fb, or updates it when running. False with a Python exception set.
bool platform_start();
/// Removes everything platform_start() installed. Needs the GIL. Never fails (errors cleared).
void platform_stop();

// ---- recording (fallback_tracer.cpp): on the calling thread, when it records ----
/// Records the call of `frame`; false when nothing was recorded (the thread does not record, or
/// the session does not record `code`).
bool record_python_call(PyCodeObject* code, FsFrame* frame);
void record_python_return();
void record_c_call(PyObject* callable);
void record_c_return(PyObject* callable);

// ---- builtins (builtin_names.cpp) ----
/// Callables whose calls are not recorded as C calls: Python functions (their frames are), and
/// record_function's own methods and decorated functions (the range is), bound or not.
bool is_python_callable(PyObject* callable);
/// The key of a builtin callable, naming it on first sight (docs/tracing.md says how). GIL.
uint64_t c_function_key(PyObject* callable);
/// True when `callable` (whose c_function_key() is `key`), or the function a bound method wraps,
/// is framescope's own (its name starts with "framescope.", or it is one of framescope._core's
/// nanobind functions). Needs the GIL.
bool is_own_c_function(PyObject* callable, uint64_t key);
bool resolve_c_function_key(uint64_t key, Symbol& out);
void release_c_function_names();

}  // namespace framescope::py::fallback
