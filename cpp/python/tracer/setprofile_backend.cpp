// cpp/python/tracer/setprofile_backend.cpp: the fallback on 3.10/3.11: a C profile function on
// every thread, on new threads from their first frame, alongside other tools' profile functions.
#include "tracer/fallback_internal.h"

#if !FS_PY312
#include <string>
#include <unordered_set>
#include <vector>

#include "tracer/frame_hook.h"
#include "tracer/initial_frames.h"
#include "tracer/thread_names.h"
#include "tracer/tracer.h"

namespace framescope::py {

using fallback::g_fb;

namespace {

// Another tool's profile function found on a thread at start (sys.setprofile, cProfile, ...):
// ours takes the thread's slot and calls it for every event, and stop() puts it back. The
// capsule holding it is our function's object on that thread.
struct Chained {
  Py_tracefunc func;
  PyObject* obj;  // strong
};
const char* const kChainedName = "framescope.chained_profile";

void chained_destructor(PyObject* capsule) {
  auto* c = static_cast<Chained*>(PyCapsule_GetPointer(capsule, kChainedName));
  if (!c) {
    PyErr_Clear();
    return;
  }
  Py_XDECREF(c->obj);
  delete c;
}

// Thread states our function was put on (to tell, at stop, where someone replaced it).
std::unordered_set<PyThreadState*> g_installed;
// What the session replaced: threading._start_new_thread, _thread.start_new_thread (the same
// function unless another tool wrapped one), threading._profile_hook. Strong refs.
PyObject* g_saved_threading_start = nullptr;
PyObject* g_saved_thread_start = nullptr;
PyObject* g_saved_profile_hook = nullptr;

// Session whose first Python event this thread had (see initial_frame_restarted).
thread_local uint64_t t_first_event_epoch = 0;

// The frames whose call this thread recorded in the session and whose return it has not,
// innermost last, by identity. A return closes a slice only when it is the return of one of
// them, or of a frame running since the session's start. 3.11 resumes a generator whose
// `yield from` / `await` delegate handled a throw() and returned without a call event (it
// jumps back to the SEND instead of executing RESUME) yet sends its return: that return has no
// slice of its own to close, and closing the innermost one would end the caller's slice.
// Not "trusted" after a switch from the frame hook (tracer_switch_to_fallback): frames the hook
// recorded then end through this function, and every return closes a slice as before.
struct OpenFrames {
  uint64_t epoch = 0;
  bool trusted = false;
  std::vector<const void*> frames;
};
thread_local OpenFrames t_open;

OpenFrames& open_frames() {
  if (FRAMESCOPE_UNLIKELY(t_open.epoch != g_tracer.epoch)) {
    t_open.epoch = g_tracer.epoch;
    t_open.trusted = !g_tracer.switched_to_fallback;
    t_open.frames.clear();
  }
  return t_open;
}

// The return of frame `f` on thread `ts` (whose code this session records).
void python_return(PyThreadState* ts, const void* f) {
  OpenFrames& open = open_frames();
  if (!open.trusted) {
    fallback::record_python_return();
    return;
  }
  size_t i = open.frames.size();
  while (i-- > 0 && open.frames[i] != f) {
  }
  if (i < open.frames.size()) {
    // (frames above it whose return never came end with it, as replay would end them)
    for (size_t k = open.frames.size(); k > i; --k) fallback::record_python_return();
    open.frames.resize(i);
  } else if (initial_frame_returned(ts, f)) {
    // A frame running since the start ended (with any frame above it whose return never came).
    for (size_t k = open.frames.size() + 1; k > 0; --k) fallback::record_python_return();
    open.frames.clear();
  }
  // Otherwise its call was not recorded: not a slice of this session.
}

FsFrame* interpreter_frame_of(PyFrameObject* f) {
#if FS_PY311
  return f->f_frame;
#else
  return f;
#endif
}

int profile_callback(PyObject* chained, PyFrameObject* frame, int what, PyObject* arg) {
  // Frames this session does not record (include_files/exclude_files, framescope's own files):
  // neither their return nor their C calls (their call was not recorded: register_code()
  // answered 0). Frames from the start still end for initial_frames.h.
  const bool skipped =
      what != PyTrace_CALL && skipped_code(frame_code(interpreter_frame_of(frame)));
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
        if (FRAMESCOPE_UNLIKELY(t_first_event_epoch != g_tracer.epoch)) {
          t_first_event_epoch = g_tracer.epoch;
          // A thread stopped between a frame's push and its call event (3.11 with tracing on
          // checks the eval breaker first) has that frame among those from the start already.
          if (initial_frame_restarted(PyThreadState_Get(), f)) break;
        }
        if (fallback::record_python_call(frame_code(f), f)) open_frames().frames.push_back(f);
      }
      break;
    case PyTrace_RETURN:
      if (g_fb.python_frames) {
        if (FRAMESCOPE_UNLIKELY(t_first_event_epoch != g_tracer.epoch)) {
          t_first_event_epoch = g_tracer.epoch;
          initial_frames_first_event(PyThreadState_Get());
        }
        if (!skipped) python_return(PyThreadState_Get(), interpreter_frame_of(frame));
      } else {
        // Frame-hook backend with C calls: the frames from the start end here (initial_frames.h).
        initial_frame_ended(PyThreadState_Get(), interpreter_frame_of(frame));
      }
      break;
    case PyTrace_C_CALL:
      if (g_fb.c_calls && !skipped) fallback::record_c_call(arg);
      break;
    case PyTrace_C_RETURN:
    case PyTrace_C_EXCEPTION:
      if (g_fb.c_calls && !skipped) fallback::record_c_return(arg);
      break;
    default:
      break;
  }
  if (FRAMESCOPE_UNLIKELY(chained != nullptr)) {
    auto* c = static_cast<Chained*>(PyCapsule_GetPointer(chained, kChainedName));
    if (!c) {
      PyErr_Clear();
      return 0;
    }
    // The other tool may remove the profile function (and so free this capsule) from inside.
    Py_INCREF(chained);
    const int rc = c->func(c->obj, frame, what, arg);
    Py_DECREF(chained);
    return rc;
  }
  return 0;
}

// Puts our function on `ts`, chained to whatever other tool's function is there (not to ours,
// nor to the initial-frame watch, which ours replaces: see initial_frames.h).
void install(PyThreadState* ts) {
  PyObject* chained = nullptr;
  if (ts->c_profilefunc == profile_callback) return;
  if (ts->c_profilefunc && !is_initial_watch_function(ts->c_profilefunc)) {
    auto* c = new Chained{ts->c_profilefunc, Py_XNewRef(ts->c_profileobj)};
    chained = PyCapsule_New(c, kChainedName, chained_destructor);  // new
    if (!chained) {
      Py_XDECREF(c->obj);
      delete c;
      PyErr_Clear();
      return;  // leave the other tool alone
    }
  }
  if (_PyEval_SetProfile(ts, profile_callback, chained) < 0) {
    PyErr_Clear();
  } else {
    g_installed.insert(ts);
  }
  Py_XDECREF(chained);
}

// Takes our function off `ts`, putting back the function it chained to. False when it is not
// ours any more (someone replaced it).
bool uninstall(PyThreadState* ts) {
  if (ts->c_profilefunc != profile_callback) return false;
  Py_tracefunc func = nullptr;
  PyObject* obj = nullptr;
  if (ts->c_profileobj) {
    if (auto* c = static_cast<Chained*>(PyCapsule_GetPointer(ts->c_profileobj, kChainedName))) {
      func = c->func;
      obj = Py_XNewRef(c->obj);  // outlives the capsule, which the call below frees
    } else {
      PyErr_Clear();
    }
  }
  if (_PyEval_SetProfile(ts, func, obj) < 0) PyErr_Clear();
  Py_XDECREF(obj);
  return true;
}

// ---- threads started during the session ----------------------------------------------------
// threading installs threading._profile_hook with sys.setprofile in _bootstrap_inner, right
// before run(): too late for _bootstrap, _bootstrap_inner and what they call. So the session
// wraps the function that starts threads: the new thread runs thread_entry first, which puts our
// function on it, then the thread's function, whose frames are then all seen.

// The new thread's entry: self = the thread's function.
PyObject* thread_entry(PyObject* func, PyObject* args, PyObject* kwargs) {
  if (g_fb.running) install(PyThreadState_Get());
  return PyObject_Call(func, args, kwargs);
}
PyMethodDef kThreadEntry = {"framescope_thread_entry", (PyCFunction)(void (*)(void))thread_entry,
                            METH_VARARGS | METH_KEYWORDS, nullptr};

// start_new_thread(function, args[, kwargs]) with `function` wrapped; bound to the _thread
// module, so that a C call of it shows as _thread.start_new_thread, which it stands for.
PyObject* start_new_thread(PyObject*, PyObject* args) {
  PyObject *func, *fargs, *kwargs = nullptr;
  if (!PyArg_ParseTuple(args, "OO|O:start_new_thread", &func, &fargs, &kwargs)) return nullptr;
  PyObject* original = g_saved_threading_start ? g_saved_threading_start : g_saved_thread_start;
  if (!original) {
    PyErr_SetString(PyExc_RuntimeError, "framescope: start_new_thread is not wrapped any more");
    return nullptr;
  }
  PyObject* entry = PyCFunction_New(&kThreadEntry, func);  // new
  if (!entry) return nullptr;
  PyObject* r = kwargs ? PyObject_CallFunctionObjArgs(original, entry, fargs, kwargs, nullptr)
                       : PyObject_CallFunctionObjArgs(original, entry, fargs, nullptr);
  Py_DECREF(entry);
  return r;
}
PyMethodDef kStartNewThread = {"start_new_thread", start_new_thread, METH_VARARGS, nullptr};

// threading._profile_hook while another tool's is set (threading.setprofile): _bootstrap_inner
// calls sys.setprofile(this), replacing ours; on its first event this puts ours back, chained to
// that tool's function (the trampoline sys.setprofile installed, with the tool's hook).
PyObject* chaining_profile_hook(PyObject* tool_hook, PyObject* const* args, Py_ssize_t nargs) {
  PyThreadState* ts = PyThreadState_Get();
  if (g_fb.running && ts->c_profilefunc != profile_callback) {
    Py_tracefunc trampoline = ts->c_profilefunc;
    auto* c = new Chained{trampoline, Py_NewRef(tool_hook)};
    PyObject* chained = PyCapsule_New(c, kChainedName, chained_destructor);  // new
    if (!chained) {
      Py_DECREF(c->obj);
      delete c;
      return nullptr;
    }
    const int rc = trampoline ? _PyEval_SetProfile(ts, profile_callback, chained) : -1;
    Py_DECREF(chained);
    if (rc < 0) return nullptr;
    g_installed.insert(ts);
    // Unless thread_entry ran first, _bootstrap_inner ran before our function was there.
    thread_names_note_current();
  }
  // This event was meant for the tool's hook: let ours record it and pass it on.
  if (nargs == 3 && PyFrame_Check(args[0]) && PyUnicode_Check(args[1])) {
    static const struct {
      const char* name;
      int what;
    } kEvents[] = {{"call", PyTrace_CALL},
                   {"return", PyTrace_RETURN},
                   {"c_call", PyTrace_C_CALL},
                   {"c_return", PyTrace_C_RETURN},
                   {"c_exception", PyTrace_C_EXCEPTION}};
    const char* ev = PyUnicode_AsUTF8(args[1]);
    if (!ev) return nullptr;
    for (const auto& e : kEvents) {
      if (!strcmp(ev, e.name) && ts->c_profilefunc == profile_callback &&
          profile_callback(ts->c_profileobj, reinterpret_cast<PyFrameObject*>(args[0]), e.what,
                           args[2]) < 0) {
        return nullptr;
      }
    }
  }
  Py_RETURN_NONE;
}
PyMethodDef kChainingProfileHook = {"framescope_profile_hook",
                                    (PyCFunction)(void (*)(void))chaining_profile_hook,
                                    METH_FASTCALL, nullptr};

// Replaces `module.name` with `replacement`, keeping the old value in *saved. False with an
// exception set.
bool replace_attr(PyObject* module, const char* name, PyObject* replacement, PyObject** saved) {
  *saved = PyObject_GetAttrString(module, name);  // new
  if (!*saved) return false;
  if (PyObject_SetAttrString(module, name, replacement) < 0) {
    Py_CLEAR(*saved);
    return false;
  }
  return true;
}

// Puts `module.name` back unless someone else replaced our value meanwhile.
void restore_attr(PyObject* module, const char* name, PyObject* ours, PyObject** saved) {
  if (!*saved) return;
  PyObject* now = module ? PyObject_GetAttrString(module, name) : nullptr;  // new
  if (!now) PyErr_Clear();
  if (now && now == ours && PyObject_SetAttrString(module, name, *saved) < 0) PyErr_Clear();
  Py_XDECREF(now);
  Py_CLEAR(*saved);
}

PyObject* g_wrapper = nullptr;        // our start_new_thread (strong)
PyObject* g_chaining_hook = nullptr;  // our threading._profile_hook, when one was set (strong)

bool wrap_thread_start() {
  PyObject* thread_mod = PyImport_ImportModule("_thread");                          // new
  PyObject* threading = thread_mod ? PyImport_ImportModule("threading") : nullptr;  // new
  bool ok = threading != nullptr;
  if (ok) g_wrapper = PyCFunction_New(&kStartNewThread, thread_mod);  // new
  ok = ok && g_wrapper &&
       replace_attr(threading, "_start_new_thread", g_wrapper, &g_saved_threading_start) &&
       replace_attr(thread_mod, "start_new_thread", g_wrapper, &g_saved_thread_start);
  if (ok) {
    g_saved_profile_hook = PyObject_GetAttrString(threading, "_profile_hook");  // new
    if (!g_saved_profile_hook) {
      PyErr_Clear();
    } else if (g_saved_profile_hook == Py_None) {
      Py_CLEAR(g_saved_profile_hook);
    } else {
      g_chaining_hook = PyCFunction_New(&kChainingProfileHook, g_saved_profile_hook);
      ok = g_chaining_hook &&
           PyObject_SetAttrString(threading, "_profile_hook", g_chaining_hook) == 0;
    }
  }
  Py_XDECREF(thread_mod);
  Py_XDECREF(threading);
  return ok;
}

void unwrap_thread_start() {
  PyObject* thread_mod = PyImport_ImportModule("_thread");  // new
  if (!thread_mod) PyErr_Clear();
  PyObject* threading = PyImport_ImportModule("threading");  // new
  if (!threading) PyErr_Clear();
  if (threading) restore_attr(threading, "_start_new_thread", g_wrapper, &g_saved_threading_start);
  if (thread_mod) restore_attr(thread_mod, "start_new_thread", g_wrapper, &g_saved_thread_start);
  if (threading && g_chaining_hook) {
    restore_attr(threading, "_profile_hook", g_chaining_hook, &g_saved_profile_hook);
  }
  Py_CLEAR(g_saved_threading_start);
  Py_CLEAR(g_saved_thread_start);
  Py_CLEAR(g_saved_profile_hook);
  Py_CLEAR(g_chaining_hook);
  Py_CLEAR(g_wrapper);
  Py_XDECREF(thread_mod);
  Py_XDECREF(threading);
}

}  // namespace

bool fallback::platform_start() {
  if (g_fb.running) return true;  // flags already updated; the callback reads them
  if (!wrap_thread_start()) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    unwrap_thread_start();
    PyErr_Restore(type, value, tb);
    return false;
  }
  PyInterpreterState* interp = PyThreadState_Get()->interp;
  for (PyThreadState* t = PyInterpreterState_ThreadHead(interp); t; t = PyThreadState_Next(t)) {
    install(t);
  }
  return true;
}

void fallback::platform_stop() {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  unwrap_thread_start();
  size_t replaced = 0;
  PyInterpreterState* interp = PyThreadState_Get()->interp;
  for (PyThreadState* t = PyInterpreterState_ThreadHead(interp); t; t = PyThreadState_Next(t)) {
    if (!uninstall(t) && g_installed.count(t)) ++replaced;
  }
  g_installed.clear();
  if (replaced) {
    internal::add_session_warning(
        "framescope: sys.setprofile() replaced framescope's profile function during the session "
        "on " +
        std::to_string(replaced) + " thread(s); their calls after that were not recorded");
  }
  PyErr_Restore(type, value, tb);
}

}  // namespace framescope::py
#endif
