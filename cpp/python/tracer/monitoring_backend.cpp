// cpp/python/tracer/monitoring_backend.cpp: the fallback on 3.12+: C callbacks of a sys.monitoring
// tool, interpreter-wide (all threads, new ones included); also the frame-hook backend's few
// watched code objects (tracer.h).
#include "tracer/fallback_internal.h"

#if FS_PY312
#include <cstring>

#include "tracer/initial_frames.h"
#include "tracer/inline_frames.h"
#include "tracer/tracer.h"

// requicken.c: forms 3.12's superinstructions again in a code no tool instruments (the number
// formed, -1 when instrumented or not 3.12). Needs the GIL.
extern "C" int framescope_requicken(PyObject* code);

namespace framescope::py {

using fallback::g_fb;
using fallback::record_c_call;
using fallback::record_c_return;
using fallback::record_python_call;
using fallback::record_python_return;

namespace {
// ---------------------------------------------------------------------------------------------
// sys.monitoring: C fastcall callbacks, interpreter-wide (all threads, new ones included).

// Session whose first Python event this thread had (see initial_frame_restarted).
thread_local uint64_t t_first_event_epoch = 0;

// The frame `ts` runs when it is a frame of `code` (the frame a PY_START/PY_RETURN... event is
// about), else null.
FsFrame* event_frame(PyThreadState* ts, PyObject* code) {
  FsFrame* frame = ts ? current_interpreter_frame(ts) : nullptr;
  return frame && reinterpret_cast<PyObject*>(frame_code(frame)) == code ? frame : nullptr;
}

// Callbacks receive (code, offset, ...) as sys.monitoring passes them (vectorcall convention).

// PY_START, PY_RESUME, PY_THROW(code, offset[, exc]): the fallback backend.
PyObject* mon_enter(PyObject*, PyObject* const* args, size_t nargsf, PyObject*) {
  if (PyVectorcall_NARGS(nargsf) < 1 || !PyCode_Check(args[0])) Py_RETURN_NONE;
  PyThreadState* ts = current_thread_state();
  FsFrame* frame = event_frame(ts, args[0]);
  PyCodeObject* code = reinterpret_cast<PyCodeObject*>(args[0]);
  if (g_fb.python_frames) {
    if (FRAMESCOPE_UNLIKELY(t_first_event_epoch != g_tracer.epoch)) {
      t_first_event_epoch = g_tracer.epoch;
      if (frame && initial_frame_restarted(ts, frame)) Py_RETURN_NONE;  // open since the start
    }
    record_python_call(code, frame);
  }
  Py_RETURN_NONE;
}
// True when args[0] is a code object whose frames (and C calls) this session does not record
// (include_files/exclude_files, framescope's own files): its call was not recorded either.
bool skipped_code_arg(PyObject* const* args, Py_ssize_t nargs) {
  return nargs >= 1 && PyCode_Check(args[0]) &&
         skipped_code(reinterpret_cast<PyCodeObject*>(args[0]));
}
// PY_RETURN, PY_YIELD, PY_UNWIND(code, offset, ...): the fallback backend.
PyObject* mon_exit(PyObject*, PyObject* const* args, size_t nargsf, PyObject*) {
  if (g_fb.python_frames) {
    if (FRAMESCOPE_UNLIKELY(t_first_event_epoch != g_tracer.epoch)) {
      t_first_event_epoch = g_tracer.epoch;
      initial_frames_first_event(PyThreadState_Get());
    }
    if (!skipped_code_arg(args, PyVectorcall_NARGS(nargsf))) record_python_return();
  }
  Py_RETURN_NONE;
}
// PY_START of a code the frame-hook backend watches (inline_frames.h). These two run on every
// call of a watched code (3.13's inlinable __init__s), so they do only what that needs.
PyObject* watched_enter(PyObject*, PyObject* const* args, size_t nargsf, PyObject*) {
  if (FRAMESCOPE_LIKELY(PyVectorcall_NARGS(nargsf) >= 1)) {
    if (FsFrame* frame = event_frame(current_thread_state(), args[0])) {
      inline_frame_started(reinterpret_cast<PyCodeObject*>(args[0]), frame);
    }
  }
  Py_RETURN_NONE;
}
// PY_RETURN, PY_YIELD of a watched code, and PY_UNWIND of any (it cannot be local): the frame
// hook backend's inline frames and frames open since the session's start (initial_frames.h).
PyObject* watched_exit(PyObject*, PyObject* const* args, size_t nargsf, PyObject*) {
  if (FRAMESCOPE_LIKELY(PyVectorcall_NARGS(nargsf) >= 1)) {
    PyThreadState* ts = current_thread_state();
    if (FsFrame* frame = event_frame(ts, args[0])) {
      inline_frame_ended(frame);
      initial_frame_ended(ts, frame);
    }
  }
  Py_RETURN_NONE;
}
// CALL(code, offset, callable, arg0): `code` is the caller's
PyObject* mon_call(PyObject*, PyObject* const* args, size_t nargsf, PyObject*) {
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (g_fb.c_calls && nargs >= 3 && !skipped_code_arg(args, nargs)) record_c_call(args[2]);
  Py_RETURN_NONE;
}
// C_RETURN, C_RAISE(code, offset, callable, arg0)
PyObject* mon_c_exit(PyObject*, PyObject* const* args, size_t nargsf, PyObject*) {
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (g_fb.c_calls && nargs >= 3 && !skipped_code_arg(args, nargs)) record_c_return(args[2]);
  Py_RETURN_NONE;
}

// The callables registered with sys.monitoring: objects of a type of our own that CPython calls
// through their vectorcall slot directly. A builtin function (PyCFunction) costs
// cfunction_vectorcall_FASTCALL's recursion check and thread-state lookup on top, about 30
// instructions per event (docs/performance.md), and 3.13 pays two events per call of an
// inlinable __init__.
struct MonitoringCallback {
  PyObject_HEAD vectorcallfunc vectorcall;
};

PyMemberDef kCallbackMembers[] = {
    {"__vectorcalloffset__", Py_T_PYSSIZET,
     static_cast<Py_ssize_t>(offsetof(MonitoringCallback, vectorcall)), Py_READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr},
};
// Instances of a heap type hold a reference to it (PyObject_New takes one).
void callback_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  PyObject_Free(self);
  Py_DECREF(type);
}
PyType_Slot kCallbackSlots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(callback_dealloc)},
    {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
    {Py_tp_members, kCallbackMembers},
    {Py_tp_doc, const_cast<char*>("A framescope sys.monitoring callback.")},
    {0, nullptr},
};
PyType_Spec kCallbackSpec = {
    "framescope._core.MonitoringCallback", sizeof(MonitoringCallback), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    kCallbackSlots};

// A new callback object calling `fn` (null with an exception set).
PyObject* new_callback(vectorcallfunc fn) {
  static PyObject* type = nullptr;  // kept for the process
  if (!type && !(type = PyType_FromSpec(&kCallbackSpec))) return nullptr;
  auto* cb = PyObject_New(MonitoringCallback, reinterpret_cast<PyTypeObject*>(type));
  if (!cb) return nullptr;
  cb->vectorcall = fn;
  return reinterpret_cast<PyObject*>(cb);
}

struct EventBinding {
  const char* event;
  vectorcallfunc fallback;  // with python_frames (the fallback backend) or c_calls
  vectorcallfunc watched;   // for the frame hook's watched codes (hook_extras), or null
  bool python;              // a Python-frame event (else a C-call event)
};
const EventBinding kBindings[] = {
    {"PY_START", mon_enter, watched_enter, true}, {"PY_RESUME", mon_enter, nullptr, true},
    {"PY_THROW", mon_enter, nullptr, true},       {"PY_RETURN", mon_exit, watched_exit, true},
    {"PY_YIELD", mon_exit, watched_exit, true},   {"PY_UNWIND", mon_exit, watched_exit, true},
    {"CALL", mon_call, nullptr, false},           {"C_RETURN", mon_c_exit, nullptr, false},
    {"C_RAISE", mon_c_exit, nullptr, false},
};

PyObject* monitoring_module() {
  PyObject* sys = PyImport_ImportModule("sys");  // new
  if (!sys) return nullptr;
  PyObject* mon = PyObject_GetAttrString(sys, "monitoring");  // new
  Py_DECREF(sys);
  return mon;
}

// Event numbers of sys.monitoring.events, by name.
long event_number(PyObject* events, const char* name) {
  PyObject* ev = PyObject_GetAttrString(events, name);  // new
  if (!ev) return -1;
  long n = PyLong_AsLong(ev);
  Py_DECREF(ev);
  return n;
}

// Registers the callbacks and the global events the current flags need (none when all are off).
bool monitoring_apply(PyObject* mon) {
  PyObject* events = PyObject_GetAttrString(mon, "events");  // new
  if (!events) return false;
  long mask = 0;
  for (const EventBinding& b : kBindings) {
    // The fallback backend records every Python frame itself; the frame hook's watched codes
    // need only their own events.
    vectorcallfunc fn = b.python ? (g_fb.python_frames ? b.fallback
                                    : g_fb.hook_extras ? b.watched
                                                       : nullptr)
                                 : (g_fb.c_calls ? b.fallback : nullptr);
    bool want = fn != nullptr;
    PyObject* ev = PyObject_GetAttrString(events, b.event);  // new
    if (!ev) {
      Py_DECREF(events);
      return false;
    }
    PyObject* func = want ? new_callback(fn) : Py_NewRef(Py_None);  // new
    PyObject* r = func
                      ? PyObject_CallMethod(mon, "register_callback", "iOO", g_fb.tool_id, ev, func)
                      : nullptr;
    // Without python_frames, Python events come from the watched codes' local events, and
    // PY_UNWIND (which cannot be local) globally.
    if (want && (!b.python || g_fb.python_frames || !strcmp(b.event, "PY_UNWIND"))) {
      mask |= PyLong_AsLong(ev);
    }
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

// Sets the local events of every watched code (0 at stop).
void monitoring_apply_local(PyObject* mon, bool clear) {
  PyObject* events = PyObject_GetAttrString(mon, "events");  // new
  if (!events) {
    PyErr_Clear();
    return;
  }
  const long ends = event_number(events, "PY_RETURN") | event_number(events, "PY_YIELD");
  const long starts = event_number(events, "PY_START");
  Py_DECREF(events);
  for (auto& [code, wanted] : g_fb.watched_codes) {
    long mask = 0;
    if (!clear && (wanted & kWatchEnds)) mask |= ends;
    if (!clear && (wanted & kWatchStarts)) mask |= starts;
    PyObject* r = PyObject_CallMethod(mon, "set_local_events", "iOl", g_fb.tool_id, code, mask);
    if (!r) PyErr_Clear();
    Py_XDECREF(r);
  }
}

}  // namespace

bool fallback::platform_start() {
  PyObject* mon = monitoring_module();
  if (!mon) return false;
  if (g_fb.tool_id < 0) {
    // A tool id that no other kind of tool expects: sys.monitoring reserves 0 (DEBUGGER_ID),
    // 1 (COVERAGE_ID), 2 (PROFILER_ID) and 5 (OPTIMIZER_ID) by convention, and 3 and 4 are
    // nobody's. Holding PROFILER_ID made cProfile.enable() (which asks for exactly that id)
    // fail with "Another profiling tool is already active" inside a session; so 4, then 3, and
    // only when both are taken the reserved ones, the least likely to be wanted later first
    // (a debugger or coverage started after framescope would find theirs taken).
    static const int kCandidates[] = {4, 3, 5, 2, 1, 0};
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

void fallback::platform_stop() {
  if (g_fb.tool_id < 0) return;
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (PyObject* mon = monitoring_module()) {
    g_fb.python_frames = g_fb.c_calls = g_fb.hook_extras = false;
    monitoring_apply_local(mon, true);
    if (!monitoring_apply(mon)) PyErr_Clear();
    PyObject* r = PyObject_CallMethod(mon, "free_tool_id", "i", g_fb.tool_id);
    if (!r) PyErr_Clear();
    Py_XDECREF(r);
    Py_DECREF(mon);
  } else {
    PyErr_Clear();
  }
  g_fb.tool_id = -1;
  // The watched codes' events are off now (set_local_events de-instruments at once): on 3.12
  // that took their superinstructions out for good, so form them again (requicken.c).
  for (auto& entry : g_fb.watched_codes) framescope_requicken(entry.first);
  for (auto& entry : g_fb.watched_codes) Py_DECREF(entry.first);
  g_fb.watched_codes.clear();
  PyErr_Restore(type, value, tb);
}

bool monitoring_watch_start() {
  const bool old = g_fb.hook_extras;
  g_fb.hook_extras = true;
  if (!fallback::platform_start()) {
    g_fb.hook_extras = old;
    return false;
  }
  g_fb.running = true;
  return true;
}

bool monitoring_watch_code(PyCodeObject* code, int events) {
  if (g_fb.tool_id < 0 || !g_fb.hook_extras) {
    PyErr_SetString(PyExc_RuntimeError, "framescope: sys.monitoring watch not started");
    return false;
  }
  PyObject* key = reinterpret_cast<PyObject*>(code);
  auto it = g_fb.watched_codes.find(key);
  const int before = it == g_fb.watched_codes.end() ? 0 : it->second;
  if ((before | events) == before) return true;
  if (it == g_fb.watched_codes.end()) {
    it = g_fb.watched_codes.emplace(Py_NewRef(key), 0).first;
  }
  it->second = before | events;
  PyObject* mon = monitoring_module();
  if (!mon) return false;
  PyObject* ev = PyObject_GetAttrString(mon, "events");  // new
  long mask = 0;
  if (ev) {
    if (it->second & kWatchEnds) {
      mask |= event_number(ev, "PY_RETURN") | event_number(ev, "PY_YIELD");
    }
    if (it->second & kWatchStarts) mask |= event_number(ev, "PY_START");
    Py_DECREF(ev);
  }
  PyObject* r = ev && !PyErr_Occurred()
                    ? PyObject_CallMethod(mon, "set_local_events", "iOl", g_fb.tool_id, key, mask)
                    : nullptr;
  Py_DECREF(mon);
  if (!r) return false;
  Py_DECREF(r);
  return true;
}

}  // namespace framescope::py
#endif
