// cpp/python/fallback_tracer.cpp: sys.monitoring (3.12+) and setprofile (3.10/3.11) backends,
// used for C calls and when Python frames cannot come from the frame hook.
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "frame_hook.h"
#include "framescope/clock.h"
#include "py_compat.h"
#include "thread_names.h"
#include "tracer.h"
#include "tracer_api.h"

namespace framescope::py {

namespace {

struct FallbackState {
  bool running = false;
  bool python_frames = false;
  bool c_calls = false;
#if FS_PY312
  int tool_id = -1;
#else
  PyObject* saved_thread_hook = nullptr;  // threading._profile_hook before us (strong)
#endif
};
FallbackState g_fb;

// C-function symbols of this session, resolved when first seen (the callable is at hand then).
// Types used as keys are kept alive until release.
std::unordered_map<uint64_t, Symbol> g_c_symbols;
std::vector<PyObject*> g_c_held;  // strong refs

std::string type_short_name(PyTypeObject* t) { return t->tp_name ? t->tp_name : "?"; }

// Callables whose calls are not recorded as C calls: Python functions (their frames are), and
// record_function's own methods and decorated functions (the range is), bound or not.
bool is_python_callable(PyObject* callable) {
  if (PyMethod_Check(callable)) callable = PyMethod_GET_FUNCTION(callable);  // borrowed
  return PyFunction_Check(callable) || is_record_function_method(callable);
}

std::string module_prefix(PyObject* self) {
  if (!self || PyModule_Check(self)) {
    if (self) {
      const char* name = PyModule_GetName(self);
      if (name) return std::string(name) + ".";
      PyErr_Clear();
    }
    return "";
  }
  return type_short_name(Py_TYPE(self)) + ".";
}

// Key of a builtin callable, naming it on first sight. Keys: the PyMethodDef of builtin
// functions and method descriptors (static for the module's life); the type | 2 otherwise.
uint64_t c_function_key(PyObject* callable) {
  uint64_t key;
  std::string name;
  PyObject* hold = nullptr;
  if (PyCFunction_Check(callable)) {
    auto* f = reinterpret_cast<PyCFunctionObject*>(callable);
    key = reinterpret_cast<uint64_t>(f->m_ml);
    if (g_c_symbols.count(key)) return key;
    name = module_prefix(f->m_self) + f->m_ml->ml_name;
  } else if (Py_IS_TYPE(callable, &PyMethodDescr_Type)) {
    auto* d = reinterpret_cast<PyMethodDescrObject*>(callable);
    key = reinterpret_cast<uint64_t>(d->d_method);
    if (g_c_symbols.count(key)) return key;
    name = type_short_name(PyDescr_TYPE(d)) + "." + d->d_method->ml_name;
  } else {
    PyTypeObject* t =
        PyType_Check(callable) ? reinterpret_cast<PyTypeObject*>(callable) : Py_TYPE(callable);
    key = reinterpret_cast<uint64_t>(t) | 2;
    if (g_c_symbols.count(key)) return key;
    name = PyType_Check(callable) ? type_short_name(t) : type_short_name(t) + ".__call__";
    hold = reinterpret_cast<PyObject*>(t);
  }
  Symbol s;
  s.name = "<built-in method " + name + ">";
  s.function = s.name;
  s.file = "~";
  g_c_symbols.emplace(key, std::move(s));
  if (hold) {
    Py_INCREF(hold);
    g_c_held.push_back(hold);
  }
  return key;
}

FRAMESCOPE_ALWAYS_INLINE void record(internal::EventKind kind, uint64_t payload) {
  if (internal::ThreadBuffer* b = internal::current_buffer()) {
    b->append(now_ticks(), internal::pack_word(kind, payload));
  }
}

void record_python_call(PyCodeObject* code, FsFrame* frame) {
  if (internal::current_buffer() == nullptr) return;
  uint64_t key = frame_key(code, frame);
  if (key) record(internal::EventKind::kPyCall, key);
}

void record_c_call(PyObject* callable) {
  if (internal::current_buffer() == nullptr || is_python_callable(callable)) return;
  record(internal::EventKind::kCCall, c_function_key(callable));
}

void record_c_return(PyObject* callable) {
  if (is_python_callable(callable)) return;
  record(internal::EventKind::kCReturn, 0);
}

#if FS_PY312
// ---------------------------------------------------------------------------------------------
// sys.monitoring: C fastcall callbacks, interpreter-wide (all threads, new ones included).

FsFrame* current_interpreter_frame() {
  PyThreadState* ts = PyThreadState_Get();
#if FS_PY313
  return ts->current_frame;
#else
  return ts->cframe->current_frame;
#endif
}

// PY_START, PY_RESUME, PY_THROW(code, offset[, exc])
PyObject* mon_enter(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (g_fb.python_frames && nargs >= 1 && PyCode_Check(args[0])) {
    FsFrame* frame = current_interpreter_frame();
    PyCodeObject* code = reinterpret_cast<PyCodeObject*>(args[0]);
    if (frame && frame_code(frame) != code) frame = nullptr;
    record_python_call(code, frame);
  }
  Py_RETURN_NONE;
}
// PY_RETURN, PY_YIELD, PY_UNWIND
PyObject* mon_exit(PyObject*, PyObject* const*, Py_ssize_t) {
  if (g_fb.python_frames) record(internal::EventKind::kPyReturn, 0);
  Py_RETURN_NONE;
}
// CALL(code, offset, callable, arg0)
PyObject* mon_call(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (g_fb.c_calls && nargs >= 3) record_c_call(args[2]);
  Py_RETURN_NONE;
}
// C_RETURN, C_RAISE(code, offset, callable, arg0)
PyObject* mon_c_exit(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (g_fb.c_calls && nargs >= 3) record_c_return(args[2]);
  Py_RETURN_NONE;
}

PyMethodDef kMonEnter = {"framescope_enter", (PyCFunction)(void (*)(void))mon_enter, METH_FASTCALL,
                         nullptr};
PyMethodDef kMonExit = {"framescope_exit", (PyCFunction)(void (*)(void))mon_exit, METH_FASTCALL,
                        nullptr};
PyMethodDef kMonCall = {"framescope_call", (PyCFunction)(void (*)(void))mon_call, METH_FASTCALL,
                        nullptr};
PyMethodDef kMonCExit = {"framescope_c_exit", (PyCFunction)(void (*)(void))mon_c_exit,
                         METH_FASTCALL, nullptr};

struct EventBinding {
  const char* event;
  PyMethodDef* def;
  bool python;  // a Python-frame event (else a C-call event)
};
const EventBinding kBindings[] = {
    {"PY_START", &kMonEnter, true}, {"PY_RESUME", &kMonEnter, true}, {"PY_THROW", &kMonEnter, true},
    {"PY_RETURN", &kMonExit, true}, {"PY_YIELD", &kMonExit, true},   {"PY_UNWIND", &kMonExit, true},
    {"CALL", &kMonCall, false},     {"C_RETURN", &kMonCExit, false}, {"C_RAISE", &kMonCExit, false},
};

PyObject* monitoring_module() {
  PyObject* sys = PyImport_ImportModule("sys");  // new
  if (!sys) return nullptr;
  PyObject* mon = PyObject_GetAttrString(sys, "monitoring");  // new
  Py_DECREF(sys);
  return mon;
}

bool monitoring_apply(PyObject* mon) {
  PyObject* events = PyObject_GetAttrString(mon, "events");  // new
  if (!events) return false;
  long mask = 0;
  for (const EventBinding& b : kBindings) {
    bool want = b.python ? g_fb.python_frames : g_fb.c_calls;
    PyObject* ev = PyObject_GetAttrString(events, b.event);  // new
    if (!ev) {
      Py_DECREF(events);
      return false;
    }
    PyObject* func = want ? PyCFunction_New(b.def, nullptr) : Py_NewRef(Py_None);  // new
    PyObject* r = func
                      ? PyObject_CallMethod(mon, "register_callback", "iOO", g_fb.tool_id, ev, func)
                      : nullptr;
    if (want) mask |= PyLong_AsLong(ev);
    Py_XDECREF(func);
    Py_DECREF(ev);
    if (!r) {
      Py_DECREF(events);
      return false;
    }
    Py_DECREF(r);
  }
  Py_DECREF(events);
  PyObject* r = PyObject_CallMethod(mon, "set_events", "il", g_fb.tool_id, mask);
  if (!r) return false;
  Py_DECREF(r);
  return true;
}

bool platform_start() {
  PyObject* mon = monitoring_module();
  if (!mon) return false;
  if (g_fb.tool_id < 0) {
    // PROFILER_ID (2) first, as profilers should; otherwise any free tool id.
    static const int kCandidates[] = {2, 4, 3, 5, 1, 0};
    for (int id : kCandidates) {
      PyObject* r = PyObject_CallMethod(mon, "use_tool_id", "is", id, "framescope");
      if (r) {
        Py_DECREF(r);
        g_fb.tool_id = id;
        break;
      }
      PyErr_Clear();
    }
    if (g_fb.tool_id < 0) {
      Py_DECREF(mon);
      PyErr_SetString(PyExc_RuntimeError,
                      "framescope: every sys.monitoring tool id is taken by other tools");
      return false;
    }
  }
  bool ok = monitoring_apply(mon);
  Py_DECREF(mon);
  return ok;
}

void platform_stop() {
  if (g_fb.tool_id < 0) return;
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (PyObject* mon = monitoring_module()) {
    g_fb.python_frames = g_fb.c_calls = false;
    if (!monitoring_apply(mon)) PyErr_Clear();
    PyObject* r = PyObject_CallMethod(mon, "free_tool_id", "i", g_fb.tool_id);
    if (!r) PyErr_Clear();
    Py_XDECREF(r);
    Py_DECREF(mon);
  } else {
    PyErr_Clear();
  }
  g_fb.tool_id = -1;
  PyErr_Restore(type, value, tb);
}

#else
// ---------------------------------------------------------------------------------------------
// setprofile: a C profile function on every thread. Threads started later get it through
// threading._profile_hook, which threading installs with sys.setprofile at thread start: our
// hook replaces itself with the C function on its first event.

FsFrame* interpreter_frame_of(PyFrameObject* f) {
#if FS_PY311
  return f->f_frame;
#else
  return f;
#endif
}

int profile_callback(PyObject*, PyFrameObject* frame, int what, PyObject* arg) {
  switch (what) {
    case PyTrace_CALL:
#if !FS_PY311
      // 3.10 recurses in C for every Python call; where plain 3.10 would overflow the stack
      // (a segfault), fail the call with RecursionError instead. Nothing was recorded yet,
      // and 3.10 sends no return event for a call whose profile function failed.
      if (FRAMESCOPE_UNLIKELY(c_stack_nearly_exhausted())) {
        PyErr_SetString(PyExc_RecursionError,
                        "maximum recursion depth exceeded (framescope: the C stack is nearly "
                        "exhausted)");
        return -1;
      }
#endif
      if (g_fb.python_frames) {
        FsFrame* f = interpreter_frame_of(frame);
        record_python_call(frame_code(f), f);
      }
      break;
    case PyTrace_RETURN:
      if (g_fb.python_frames) record(internal::EventKind::kPyReturn, 0);
      break;
    case PyTrace_C_CALL:
      if (g_fb.c_calls) record_c_call(arg);
      break;
    case PyTrace_C_RETURN:
    case PyTrace_C_EXCEPTION:
      if (g_fb.c_calls) record_c_return(arg);
      break;
    default:
      break;
  }
  return 0;
}

// threading._profile_hook: called as a Python profile function (frame, event, arg).
PyObject* thread_start_hook(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!g_fb.running) Py_RETURN_NONE;
  PyEval_SetProfile(profile_callback, nullptr);
  thread_names_note_current();  // _bootstrap_inner ran before this thread had a profile function
  if (nargs == 3 && PyFrame_Check(args[0]) && PyUnicode_Check(args[1])) {
    const char* ev = PyUnicode_AsUTF8(args[1]);
    int what = -1;
    if (!ev) return nullptr;
    if (!strcmp(ev, "call"))
      what = PyTrace_CALL;
    else if (!strcmp(ev, "return"))
      what = PyTrace_RETURN;
    else if (!strcmp(ev, "c_call"))
      what = PyTrace_C_CALL;
    else if (!strcmp(ev, "c_return"))
      what = PyTrace_C_RETURN;
    else if (!strcmp(ev, "c_exception"))
      what = PyTrace_C_EXCEPTION;
    if (what >= 0) {
      profile_callback(nullptr, reinterpret_cast<PyFrameObject*>(args[0]), what, args[2]);
    }
  }
  Py_RETURN_NONE;
}
PyMethodDef kThreadStartHook = {"framescope_thread_start",
                                (PyCFunction)(void (*)(void))thread_start_hook, METH_FASTCALL,
                                nullptr};

void set_profile_all_threads(Py_tracefunc func) {
  PyInterpreterState* interp = PyThreadState_Get()->interp;
  for (PyThreadState* t = PyInterpreterState_ThreadHead(interp); t; t = PyThreadState_Next(t)) {
    if (func || t->c_profilefunc == profile_callback) {
      if (_PyEval_SetProfile(t, func, nullptr) < 0) PyErr_Clear();
    }
  }
}

bool platform_start() {
  if (g_fb.running) return true;  // flags already updated; the callback reads them
  PyObject* threading = PyImport_ImportModule("threading");  // new
  if (!threading) return false;
  PyObject* saved = PyObject_GetAttrString(threading, "_profile_hook");  // new
  if (!saved) {
    PyErr_Clear();
    saved = Py_NewRef(Py_None);
  }
  PyObject* hook = PyCFunction_New(&kThreadStartHook, nullptr);  // new
  if (!hook || PyObject_SetAttrString(threading, "_profile_hook", hook) < 0) {
    Py_XDECREF(hook);
    Py_DECREF(saved);
    Py_DECREF(threading);
    return false;
  }
  Py_DECREF(hook);
  Py_DECREF(threading);
  g_fb.saved_thread_hook = saved;
  set_profile_all_threads(profile_callback);
  return true;
}

void platform_stop() {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  set_profile_all_threads(nullptr);
  if (g_fb.saved_thread_hook) {
    if (PyObject* threading = PyImport_ImportModule("threading")) {
      if (PyObject_SetAttrString(threading, "_profile_hook", g_fb.saved_thread_hook) < 0) {
        PyErr_Clear();
      }
      Py_DECREF(threading);
    } else {
      PyErr_Clear();
    }
    Py_CLEAR(g_fb.saved_thread_hook);
  }
  PyErr_Restore(type, value, tb);
}
#endif

}  // namespace

bool fallback_start(bool python_frames, bool c_calls) {
  bool old_py = g_fb.python_frames, old_c = g_fb.c_calls;
  g_fb.python_frames = g_fb.python_frames || python_frames;
  g_fb.c_calls = g_fb.c_calls || c_calls;
  if (!platform_start()) {
    g_fb.python_frames = old_py;
    g_fb.c_calls = old_c;
    return false;
  }
  g_fb.running = true;
  return true;
}

void fallback_stop() {
  if (!g_fb.running) return;
  platform_stop();
  g_fb = FallbackState{};
}

bool resolve_c_function(uint64_t key, Symbol& out) {
  auto it = g_c_symbols.find(key);
  if (it == g_c_symbols.end()) return false;
  out = it->second;
  return true;
}

void fallback_release() {
  g_c_symbols.clear();
  for (PyObject* o : g_c_held) Py_DECREF(o);
  g_c_held.clear();
}

}  // namespace framescope::py
