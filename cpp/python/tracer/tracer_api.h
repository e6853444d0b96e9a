// cpp/python/tracer/tracer_api.h: the tracer's interface for the bindings (no CPython internals).
#pragma once

#include <Python.h>

#include <cstdint>
#include <string>
#include <vector>

#include "framescope/session.h"

namespace framescope::py {

/// Where Python frames come from during a session.
enum class TracerBackend : uint8_t {
  kNone = 0,        ///< not tracing Python frames
  kFrameHook = 1,   ///< the PEP 523 hook (fastest)
  kMonitoring = 2,  ///< sys.monitoring (3.12+)
  kSetProfile = 3,  ///< PyEval_SetProfile on every thread (3.10/3.11 fallback)
};

/// Options of the Python tracer for one session.
struct TracerOptions {
  TracerBackend backend = TracerBackend::kFrameHook;  ///< requested backend
  bool c_calls = false;                               ///< also record builtins called from Python
  std::vector<std::string> prune_prefixes;            ///< path prefixes removed from file names
  // Which files' frames are recorded (code_filter.h): decided once per code object.
  std::vector<std::string> skip_prefixes;  ///< never recorded (framescope's own package)
  std::vector<std::string> skip_files;     ///< never recorded (the launcher's files)
  std::vector<std::string> include_globs;  ///< when set, only matching files are recorded
  std::vector<std::string> exclude_globs;  ///< matching files are not recorded
};

/// Learns the calling thread's stack bounds for the frame hook, if not known yet. Call it before
/// a session starts: for the main thread it parses /proc/self/maps (~0.3 ms), which would
/// otherwise land inside the first recorded slice.
void prepare_hook_thread();

/// Describes the PEP 523 function another tool installed ("symbol in libfoo.so", or an address),
/// or returns an empty string when the interpreter runs CPython's default evaluation or
/// framescope's own hook. Needs the GIL. (frame_hook.cpp)
std::string foreign_frame_hook();

/// Starts tracing into the active core session. The frames running on every thread now become
/// open slices (initial_frames.h): `native_ids` maps thread idents to OS ids (dict or None), and
/// with the frame-hook backend the calling thread's innermost frames whose file starts with
/// `skip_prefix` (framescope's own) are left out. Returns false with a Python exception set.
bool tracer_start(const TracerOptions& options, PyObject* native_ids,
                  const std::string& skip_prefix);
/// Stops recording Python frames (before the core session is disabled). Needs the GIL.
void tracer_stop();
/// Resolver of the keys recorded in this session (valid until tracer_release()).
KeyResolver tracer_resolver();
/// Drops the references the session held (code objects, labelled classes, C callables).
void tracer_release();
/// Name of the backend in use (after a switch: "frame_hook->sys.monitoring").
std::string tracer_backend_description();
/// Labels calls of `code` as "<label>: <class of self>" (e.g. nn.Module.__call__), or with
/// `per_instance` "<label>: <class>_<n>", n numbering the instances of the class in the session
/// in the order of their first call (torch's "nn.Module: Linear_0"). `label` is copied. Returns
/// false with a Python exception set.
bool tracer_label_calls(PyObject* code, const std::string& label, bool per_instance = false);

/// Adds the eval_frame API (functions and types) to the extension module. False on error.
bool eval_frame_api_init(PyObject* module);
/// Adds the record_function type and the C ABI capsule to the module. False on error.
bool record_function_init(PyObject* module);
bool c_api_init(PyObject* module);
/// True for record_function's __enter__/__exit__ (bound or not) and for functions decorated with
/// it: their calls are not C calls of the trace, the range itself shows. Needs the GIL.
bool is_record_function_method(PyObject* callable);
/// Releases names the record_function type pinned for the last session (after replay).
void release_record_function_names();

}  // namespace framescope::py
