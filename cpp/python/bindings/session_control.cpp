// cpp/python/bindings/session_control.cpp: start/stop as single C calls, marks, memory samples.
//
// A KeyboardInterrupt is raised at a bytecode boundary, so any Python code between the core's
// start (or stop) and the profile's own bookkeeping could be cut short: a session running with
// no profile that knows it (stop() refuses, start() finds a session running), or a stopped
// trace dropped on the floor. Here the core's state change and the profile's attributes
// (`_running`, `_trace`) change together inside one C call, which no signal handler can
// interrupt; profiler.py handles the interrupt that lands just before or after the call.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>

#include "bindings/trace_handle.h"
#include "framescope/internal/thread_buffer.h"
#include "framescope/session.h"
#include "framescope/stored_trace.h"
#include "py_text.h"
#include "tracer/initial_frames_api.h"
#include "tracer/memory_hooks.h"
#include "tracer/thread_names.h"
#include "tracer/tracer_api.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace framescope::py {

namespace {

// The profile object that started the running session (strong), null when none runs. GIL.
PyObject* g_owner = nullptr;
// The running session records torch operators (integrations/torch_ops.cpp's observers). GIL.
bool g_torch_ops = false;

// Calls framescope._core.<name>(arg) or (), a C function of integrations/torch_ops.cpp (no bytecode
// runs). False with a Python exception set.
bool call_core(const char* name, PyObject* arg) {
  PyObject* core = PyImport_ImportModule("framescope._core");          // new
  PyObject* fn = core ? PyObject_GetAttrString(core, name) : nullptr;  // new
  PyObject* r = fn ? (arg ? PyObject_CallOneArg(fn, arg) : PyObject_CallNoArgs(fn)) : nullptr;
  Py_XDECREF(r);
  Py_XDECREF(fn);
  Py_XDECREF(core);
  return r != nullptr;
}

TracerBackend parse_backend(const std::string& name) {
  if (name == "frame_hook") return TracerBackend::kFrameHook;
  if (name == "sys.monitoring" || name == "monitoring") return TracerBackend::kMonitoring;
  if (name == "setprofile") return TracerBackend::kSetProfile;
  if (name == "none") return TracerBackend::kNone;
  throw nb::value_error(("framescope: unknown tracer backend '" + name +
                         "' (expected frame_hook, sys.monitoring, setprofile or none)")
                            .c_str());
}

// Sets the profile's view of the session. False with a Python exception set (out of memory).
bool set_owner_state(PyObject* owner, bool running, PyObject* trace) {
  return PyObject_SetAttrString(owner, "_trace", trace) == 0 &&
         PyObject_SetAttrString(owner, "_running", running ? Py_True : Py_False) == 0;
}

void start_session(nb::handle owner, bool record_shapes, bool profile_memory, bool with_flops,
                   const std::string& backend, bool c_calls,
                   const std::vector<std::string>& prune_prefixes, nb::handle native_ids,
                   size_t memory_limit, bool keep_newest, bool propagated_only, bool torch_ops,
                   int64_t cpu_sample_period_ns, const std::vector<std::string>& skip_prefixes,
                   const std::vector<std::string>& skip_files,
                   const std::vector<std::string>& include_files,
                   const std::vector<std::string>& exclude_files,
                   const std::string& skip_frames_prefix, const std::string& stream_to) {
  SessionConfig config;
  config.cpu_sample_period_ns = cpu_sample_period_ns;
  config.record_shapes = record_shapes;
  config.profile_memory = profile_memory;
  config.with_flops = with_flops;
  config.memory_limit_bytes = memory_limit;
  config.on_limit = keep_newest ? LimitPolicy::kKeepNewest : LimitPolicy::kStopRecording;
  config.threads = propagated_only ? ThreadScope::kPropagated : ThreadScope::kAllThreads;
  config.stream_path = stream_to;
  TracerOptions options;
  options.backend = parse_backend(backend);
  options.c_calls = c_calls;
  options.prune_prefixes = prune_prefixes;
  options.skip_prefixes = skip_prefixes;
  options.skip_files = skip_files;
  options.include_globs = include_files;
  options.exclude_globs = exclude_files;
  if (c_calls && options.backend == TracerBackend::kNone) {
    throw nb::value_error("framescope: c_calls needs the Python tracer (with_stack=True)");
  }
  prepare_hook_thread();
  try {
    enable_profiler(config);
  } catch (const SessionError& e) {
    throw std::runtime_error(e.what());
  }
  // Before the tracer: it must know threading's bootstrap code from the first frame it sees.
  if (options.backend != TracerBackend::kNone) thread_names_start();
  if (!tracer_start(options, native_ids.ptr(), skip_frames_prefix) ||
      (torch_ops && !call_core("_torch_ops_enable", record_shapes ? Py_True : Py_False)) ||
      // torch's tensor memory (integrations/torch_memory.cpp; attached by the profile)
      (torch_ops && profile_memory && !call_core("_torch_memory_enable", nullptr)) ||
      !set_owner_state(owner.ptr(), true, Py_None)) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (torch_ops && !call_core("_torch_memory_disable", nullptr)) PyErr_Clear();
    if (torch_ops && !call_core("_torch_ops_disable", nullptr)) PyErr_Clear();
    tracer_release();
    disable_profiler();
    thread_names_release();
    PyErr_Restore(type, value, tb);
    throw nb::python_error();
  }
  g_owner = Py_NewRef(owner.ptr());
  g_torch_ops = torch_ops;
  if (profile_memory) memory_hooks_start(internal::g_session_epoch.load(std::memory_order_relaxed));
}

// Stops the session `owner` started: its trace goes to owner._trace (None unless `keep`).
// Returns false, changing nothing, when `owner` does not own the running session.
bool stop_session(nb::handle owner, bool keep) {
  if (!g_owner || owner.ptr() != g_owner) return false;
  PyObject* const owner_ref = g_owner;  // the session's reference, dropped at the end
  g_owner = nullptr;
  if (g_torch_ops && !call_core("_torch_memory_disable", nullptr)) PyErr_Clear();
  if (g_torch_ops && !call_core("_torch_ops_disable", nullptr)) PyErr_Clear();
  g_torch_ops = false;
  auto names = thread_names_collect();
  thread_names_release();
  const std::string backend = tracer_backend_description();
  if (g_memory_tracking) {
    switch (memory_hooks_stop()) {
      case MemoryHooksState::kRestored:
        break;
      case MemoryHooksState::kUnderAnother:
        internal::add_session_warning(
            "framescope: another tool (tracemalloc?) wrapped Python's allocators during the "
            "session; framescope's counting wrappers stay under it, counting nothing");
        break;
      case MemoryHooksState::kDropped:
        internal::add_session_warning(
            "framescope: another tool replaced Python's allocators during the session, "
            "unlinking framescope's counting wrappers (tracemalloc.stop() of a tracemalloc "
            "started before the session does, unless through the tracemalloc module, which "
            "framescope re-arms after): the Python allocations made after that were not "
            "counted, so the memory figures are too low");
        break;
    }
  }
  tracer_stop();
  RawTracePtr raw;
  try {
    raw = disable_profiler();
  } catch (const SessionError&) {
    // Stopped underneath through the C++ API: no events to keep.
  }
  nb::object trace = nb::none();
  try {
    if (keep && raw) {
      PyTrace out;
      out.state->stored = std::make_shared<const StoredTrace>(
          StoredTrace::from_raw(std::move(*raw), tracer_resolver(), {names.begin(), names.end()}));
      out.state->backend = backend;
      trace = nb::cast(std::move(out));
    }
  } catch (...) {
    // Out of memory in replay: the session is over all the same.
    raw.reset();
    tracer_release();
    release_record_function_names();
    set_owner_state(owner_ref, false, Py_None);
    Py_DECREF(owner_ref);
    throw;
  }
  raw.reset();
  tracer_release();
  release_record_function_names();
  const bool stored = set_owner_state(owner_ref, false, trace.ptr());
  Py_DECREF(owner_ref);
  if (!stored) throw nb::python_error();
  return true;
}

// int argument `value` of `fn` as a signed 64-bit integer, or a clear TypeError / OverflowError.
int64_t int64_arg(nb::handle value, const char* fn, const char* name) {
  if (!PyLong_Check(value.ptr())) {
    PyErr_Format(PyExc_TypeError, "%s: %s must be an int, not %.100s", fn, name,
                 Py_TYPE(value.ptr())->tp_name);
    throw nb::python_error();
  }
  const long long v = PyLong_AsLongLong(value.ptr());
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Format(PyExc_OverflowError, "%s: %s does not fit in 64 bits", fn, name);
    throw nb::python_error();
  }
  return int64_t(v);
}

std::string str_arg(nb::handle value, const char* fn, const char* name) {
  if (!PyUnicode_Check(value.ptr())) {
    PyErr_Format(PyExc_TypeError, "%s: %s must be a str, not %.100s", fn, name,
                 Py_TYPE(value.ptr())->tp_name);
    throw nb::python_error();
  }
  return utf8_of(value.ptr());
}

// ---- profile.start / stop / __enter__ / __exit__ -------------------------------------------
// Plain CPython functions wrapped as instance methods of framescope.profile. Being C, they run no
// bytecode of their own: nothing between the core's start and the return to the caller, so a
// `with` statement either enters its block with the session running or raises with nothing
// running; nothing between the caller and the core's stop but the check that this profile runs.
// The Python parts run where an interrupt changes nothing: profile._start_arguments() before
// the start, profile._after_stop() (warnings) once the trace is stored.

// module: framescope._core (the functions' self), profile: the instance.
PyObject* profile_start(PyObject* module, PyObject* profile) {
  PyObject* kwargs = PyObject_CallMethod(profile, "_start_arguments", nullptr);  // new
  if (!kwargs) return nullptr;
  PyObject* start = PyObject_GetAttrString(module, "_start");   // new
  PyObject* args = start ? PyTuple_Pack(1, profile) : nullptr;  // new
  PyObject* result = args && PyDict_Check(kwargs) ? PyObject_Call(start, args, kwargs) : nullptr;
  if (args && !PyDict_Check(kwargs)) {
    PyErr_SetString(PyExc_TypeError, "profile._start_arguments() must return a dict");
  }
  Py_XDECREF(args);
  Py_XDECREF(start);
  Py_DECREF(kwargs);
  if (!result) return nullptr;
  Py_DECREF(result);
  return Py_NewRef(profile);
}

PyObject* profile_stop(PyObject*, PyObject* profile) {
  if (!g_owner || profile != g_owner) {
    PyErr_SetString(PyExc_RuntimeError, "this profile is not running");
    return nullptr;
  }
  try {
    stop_session(nb::handle(profile), true);
  } catch (nb::python_error& e) {
    e.restore();
    return nullptr;
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
    return nullptr;
  } catch (const OutputError& e) {  // a streamed session's file could not be completed
    set_output_error(e);
    return nullptr;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  PyObject* r = PyObject_CallMethod(profile, "_after_stop", nullptr);  // prints the warnings
  if (!r) return nullptr;
  Py_DECREF(r);
  return Py_NewRef(profile);
}

PyObject* profile_exit(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1) {
    PyErr_SetString(PyExc_TypeError, "profile.__exit__ needs the profile");
    return nullptr;
  }
  PyObject* r = profile_stop(module, args[0]);
  if (!r) return nullptr;
  Py_DECREF(r);
  Py_RETURN_NONE;  // exceptions of the block propagate
}

PyMethodDef kProfileStart = {"start", profile_start, METH_O,
                             "start()\n--\n\nStarts recording; returns the profile."};
PyMethodDef kProfileEnter = {"__enter__", profile_start, METH_O, "Starts recording."};
PyMethodDef kProfileStop = {
    "stop", profile_stop, METH_O,
    "stop()\n--\n\nStops recording and replays the trace (prof.trace); returns the profile."};
PyMethodDef kProfileExit = {"__exit__", (PyCFunction)(void (*)(void))profile_exit, METH_FASTCALL,
                            "Stops recording."};

// ---- process-level hooks: plain CPython functions (they may outlive nanobind's teardown) ----

// atexit: a session still running when the interpreter exits (a module-level profile never
// stopped) is stopped and discarded, releasing the frame hook and what the tracer holds before
// the interpreter tears down.
PyObject* at_exit(PyObject*, PyObject*) {
  if (g_owner) {
    try {
      stop_session(nb::handle(g_owner), false);
    } catch (...) {  // nothing to report to at exit
    }
    PyErr_Clear();
  }
  Py_RETURN_NONE;
}

// os.register_at_fork(after_in_child=...): Python-side state of the child (see session.cpp for
// the core's): the parent's other threads are gone.
PyObject* after_fork_in_child(PyObject*, PyObject*) {
  thread_names_after_fork_child();
  initial_frames_after_fork_child();
  Py_RETURN_NONE;
}

PyMethodDef kAtExit = {"_framescope_at_exit", at_exit, METH_NOARGS, nullptr};
PyMethodDef kAfterForkInChild = {"_framescope_after_fork_in_child", after_fork_in_child,
                                 METH_NOARGS, nullptr};

// Calls module.fn(*args, **kwargs) with a new builtin function made from `def`.
bool register_hook(const char* module, const char* fn, PyMethodDef* def, const char* keyword) {
  PyObject* mod = PyImport_ImportModule(module);  // new
  if (!mod) return false;
  PyObject* callable = PyCFunction_New(def, nullptr);       // new
  PyObject* register_fn = PyObject_GetAttrString(mod, fn);  // new
  PyObject* result = nullptr;
  if (callable && register_fn) {
    if (keyword) {
      PyObject* args = PyTuple_New(0);
      PyObject* kwargs = Py_BuildValue("{sO}", keyword, callable);
      if (args && kwargs) result = PyObject_Call(register_fn, args, kwargs);
      Py_XDECREF(args);
      Py_XDECREF(kwargs);
    } else {
      result = PyObject_CallOneArg(register_fn, callable);
    }
  }
  Py_XDECREF(result);
  Py_XDECREF(register_fn);
  Py_XDECREF(callable);
  Py_DECREF(mod);
  return result != nullptr;
}

}  // namespace

void bind_session_control(nb::module_& m) {
  m.def("_start", &start_session, "owner"_a, "record_shapes"_a, "profile_memory"_a, "with_flops"_a,
        "backend"_a, "c_calls"_a, "prune_prefixes"_a, "native_ids"_a.none(), "memory_limit"_a,
        "keep_newest"_a, "propagated_only"_a = false, "torch_ops"_a = false,
        "cpu_sample_period_ns"_a = 0, "skip_prefixes"_a = std::vector<std::string>(),
        "skip_files"_a = std::vector<std::string>(), "include_files"_a = std::vector<std::string>(),
        "exclude_files"_a = std::vector<std::string>(), "skip_frames_prefix"_a = "",
        "stream_to"_a = "");
  m.def("_stop", &stop_session, "owner"_a, "keep"_a = true);
  // One C call around the whole call: a Python-level pause ... finally: resume could be cut
  // between the two by KeyboardInterrupt (a signal handler runs between bytecodes), leaving the
  // thread unrecorded for good.
  m.def(
      "_call_unrecorded",
      [](nb::handle fn, nb::args args, nb::kwargs kwargs) {
        struct Paused {
          Paused() { internal::pause_thread_recording(); }
          ~Paused() { internal::resume_thread_recording(); }
        } paused;
        return fn(*args, **kwargs);
      },
      "fn(*args, **kwargs) with the calling thread not recording (nested calls are counted).");
  m.def(
      "_session_owner", [] { return g_owner ? nb::borrow(g_owner) : nb::none(); },
      "The profile object whose session runs, or None.");
  m.def("is_enabled", &profiler_enabled, "True while a framescope session records.");
  m.def(
      "mark", [](nb::handle name) { framescope::mark(str_arg(name, "mark()", "name")); },
      "name"_a.none(),
      "Record an instant event (a mark) on the calling thread; no-op without a session.");
  m.def(
      "record_memory",
      [](nb::handle address, nb::handle bytes, nb::handle total_allocated,
         nb::handle total_reserved, nb::handle device) {
        const char* fn = "record_memory()";
        // An address is unsigned: the whole range 0..2**64-1 (a negative int down to -2**63 is
        // taken as its two's complement, as before).
        if (!PyLong_Check(address.ptr())) int64_arg(address, fn, "address");  // the TypeError
        uint64_t addr = PyLong_AsUnsignedLongLong(address.ptr());
        if (addr == uint64_t(-1) && PyErr_Occurred()) {
          PyErr_Clear();
          const long long v = PyLong_AsLongLong(address.ptr());
          if (v == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_SetString(PyExc_OverflowError,
                            "record_memory(): address must be within 0..2**64-1");
            throw nb::python_error();
          }
          addr = uint64_t(v);
        }
        const int64_t dev = int64_arg(device, fn, "device");
        if (dev < INT32_MIN || dev > INT32_MAX) {
          throw nb::value_error("record_memory(): device must fit in 32 bits");
        }
        framescope::record_memory(reinterpret_cast<const void*>(uintptr_t(addr)),
                                  int64_arg(bytes, fn, "bytes"),
                                  int64_arg(total_allocated, fn, "total_allocated"),
                                  int64_arg(total_reserved, fn, "total_reserved"), int32_t(dev));
      },
      "address"_a.none(), "bytes"_a.none(), "total_allocated"_a.none(),
      "total_reserved"_a.none() = 0, "device"_a.none() = -1,
      // The signature nanobind's TypeError for a wrong call shows (ints, not `object`).
      nb::sig("def record_memory(address: int, bytes: int, total_allocated: int, "
              "total_reserved: int = 0, device: int = -1) -> None"),
      "Record a memory sample when profile_memory is on: `bytes` allocated (> 0) or freed (< 0) "
      "at `address`, the allocator's totals after it (`total_allocated`, `total_reserved`) and "
      "the device (-1: CPU), as torch's memory profiler reports them.");
  const std::pair<const char*, PyMethodDef*> methods[] = {{"_profile_start", &kProfileStart},
                                                          {"_profile_enter", &kProfileEnter},
                                                          {"_profile_stop", &kProfileStop},
                                                          {"_profile_exit", &kProfileExit}};
  for (const auto& [name, def] : methods) {
    // An instance method: profile.start() passes the profile as the function's argument.
    nb::object fn = nb::steal(PyCFunction_New(def, m.ptr()));
    if (!fn.is_valid()) throw nb::python_error();
    nb::object method = nb::steal(PyInstanceMethod_New(fn.ptr()));
    if (!method.is_valid()) throw nb::python_error();
    m.attr(name) = method;
  }
  if (!register_hook("atexit", "register", &kAtExit, nullptr) ||
      !register_hook("os", "register_at_fork", &kAfterForkInChild, "after_in_child")) {
    throw nb::python_error();
  }
}

}  // namespace framescope::py
