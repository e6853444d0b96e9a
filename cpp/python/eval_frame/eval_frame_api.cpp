// cpp/python/eval_frame/eval_frame_api.cpp: the eval_frame API's Python functions: per-thread
// callbacks (set_eval_frame, with isolation and guard-error settings), per-code exec strategies,
// resets, and the process-wide hooks and flags. What happens to an intercepted frame is in
// eval_frame_lookup.cpp.
#include "eval_frame/eval_frame_internal.h"  // first: Python.h with the internal frame headers

#include <cstring>

#include "tracer/tracer_api.h"

namespace framescope::py {

// Lives in the thread's dict (PyThreadState_GetDict) from the thread's first non-None callback.
// CPython clears that dict when the thread ends, on the thread itself: the callback's reference
// and the thread's share of the hook are given back then, so a thread that exits with a callback
// set leaves neither behind.
struct ThreadGuardObject {
  PyObject ob_base;     // PyObject_HEAD
  unsigned long ident;  // the owning thread
  bool counted;         // the thread counts in g_enabled_threads
};

namespace {

Py_ssize_t g_enabled_threads = 0;  // threads whose callback is not None (GIL-protected)
PyObject* g_thread_key = nullptr;  // key of the ThreadGuard in each thread's dict

// ---- threads -----------------------------------------------------------------------------------

void enter_enabled() {
  if (g_enabled_threads++ == 0) hook_acquire(kHookUserEvalApi);
}

void leave_enabled() {
  if (--g_enabled_threads == 0) hook_release(kHookUserEvalApi);
}

void thread_guard_dealloc(PyObject* self_obj) {
  auto* self = reinterpret_cast<ThreadGuardObject*>(self_obj);
  PyObject* callback = nullptr;
  // Only the owning thread can reach its TLS; a foreign thread (after fork, at shutdown) only
  // gives back the count.
  if (PyThread_get_thread_ident() == self->ident && t_eval.guard == self) {
    t_eval.guard = nullptr;
    callback = hook_thread().eval_callback;
    hook_thread().eval_callback = nullptr;
    Py_CLEAR(t_eval.isolation);
    release_thread_locals_cache();
  }
  if (self->counted) {
    self->counted = false;
    leave_enabled();
  }
  PyObject_Free(self_obj);
  Py_XDECREF(callback);
}

PyTypeObject g_thread_guard_type = {PyVarObject_HEAD_INIT(nullptr, 0)};

ThreadGuardObject* thread_guard() {
  if (t_eval.guard) return t_eval.guard;
  PyObject* dict = PyThreadState_GetDict();  // borrowed
  if (!dict) {
    PyErr_SetString(PyExc_RuntimeError, "set_eval_frame: this thread has no thread state dict");
    return nullptr;
  }
  auto* guard = PyObject_New(ThreadGuardObject, &g_thread_guard_type);
  if (!guard) return nullptr;
  guard->ident = PyThread_get_thread_ident();
  guard->counted = false;
  int rc = PyDict_SetItem(dict, g_thread_key, reinterpret_cast<PyObject*>(guard));
  Py_DECREF(guard);  // the dict owns it
  if (rc < 0) return nullptr;
  t_eval.guard = guard;
  return guard;
}

// ---- Python functions --------------------------------------------------------------------------

// set_eval_frame(callback, *, isolate=False, guard_errors="raise")
PyObject* set_eval_frame_py(PyObject*, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"callback", "isolate", "guard_errors", nullptr};
  PyObject* callback = nullptr;
  PyObject* isolate = Py_False;
  const char* guard_errors = "raise";
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$Os:set_eval_frame", const_cast<char**>(kwlist),
                                   &callback, &isolate, &guard_errors)) {
    return nullptr;
  }
  if (callback != Py_None && callback != Py_False && !PyCallable_Check(callback)) {
    PyErr_Format(PyExc_TypeError, "set_eval_frame: expected None, False or a callable, not %.100s",
                 Py_TYPE(callback)->tp_name);
    return nullptr;
  }
  bool fail_mode;
  if (std::strcmp(guard_errors, "raise") == 0) {
    fail_mode = false;
  } else if (std::strcmp(guard_errors, "fail") == 0) {
    fail_mode = true;
  } else {
    PyErr_Format(PyExc_ValueError,
                 "set_eval_frame: guard_errors must be 'raise' or 'fail', not '%.100s'",
                 guard_errors);
    return nullptr;
  }
  // isolate: False/None = shared entries; True = the callback is the key; anything else is the key.
  PyObject* key = nullptr;
  if (isolate == Py_True) {
    if (!PyCallable_Check(callback)) {
      PyErr_SetString(PyExc_ValueError,
                      "set_eval_frame: isolate=True keys the entries by the callback, which must "
                      "then be a callable (pass an isolation id for run-only mode)");
      return nullptr;
    }
    key = callback;
  } else if (isolate != Py_False && isolate != Py_None) {
    if (callback == Py_None) {
      PyErr_SetString(PyExc_ValueError,
                      "set_eval_frame: an isolation id needs a callback (None intercepts nothing)");
      return nullptr;
    }
    key = isolate;
  }
  const bool enable = callback != Py_None;
  ThreadGuardObject* guard = t_eval.guard;
  if (enable && !guard && !(guard = thread_guard())) return nullptr;
  PyObject* previous =
      hook_thread().eval_callback ? hook_thread().eval_callback : Py_NewRef(Py_None);
  hook_thread().eval_callback = enable ? Py_NewRef(callback) : nullptr;
  Py_XSETREF(t_eval.isolation, Py_XNewRef(key));
  t_eval.guard_errors_fail = fail_mode;
  ++t_eval.generation;
  if (enable && !guard->counted) {
    guard->counted = true;
    enter_enabled();
  } else if (!enable && guard && guard->counted) {
    guard->counted = false;
    leave_enabled();
  }
  return previous;  // the reference the thread held
}

PyObject* get_eval_frame_callback_py(PyObject*, PyObject*) {
  return Py_NewRef(hook_thread().eval_callback ? hook_thread().eval_callback : Py_None);
}

// (callback, isolation key or None, guard_errors): what use_callback() saves and restores.
PyObject* eval_frame_setting_py(PyObject*, PyObject*) {
  return Py_BuildValue("(OOs)", hook_thread().eval_callback ? hook_thread().eval_callback : Py_None,
                       t_eval.isolation ? t_eval.isolation : Py_None,
                       t_eval.guard_errors_fail ? "fail" : "raise");
}

PyCodeObject* code_arg(PyObject* arg, const char* fn) {
  if (!PyCode_Check(arg)) {
    PyErr_Format(PyExc_TypeError, "%s: expected a code object, not %.100s", fn,
                 Py_TYPE(arg)->tp_name);
    return nullptr;
  }
  return reinterpret_cast<PyCodeObject*>(arg);
}

PyObject* skip_code_py(PyObject*, PyObject* arg) {
  PyCodeObject* code = code_arg(arg, "skip_code");
  if (!code) return nullptr;
  EvalState* st = state_for(code);
  if (!st) return nullptr;
  st->strategy = ExecStrategy{kActionSkip, kActionDefault};  // as torch's skip_code
  Py_RETURN_NONE;
}

PyObject* set_code_exec_strategy_py(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_Format(PyExc_TypeError, "set_code_exec_strategy expected 2 arguments, got %zd", nargs);
    return nullptr;
  }
  PyCodeObject* code = code_arg(args[0], "set_code_exec_strategy");
  if (!code) return nullptr;
  if (!PyObject_TypeCheck(args[1], &g_exec_strategy_type)) {
    PyErr_Format(PyExc_TypeError,
                 "set_code_exec_strategy: expected a FrameExecStrategy, not %.100s",
                 Py_TYPE(args[1])->tp_name);
    return nullptr;
  }
  auto* s = reinterpret_cast<FrameExecStrategyObject*>(args[1]);
  if (!s->apply_to_code) {
    PyErr_SetString(PyExc_ValueError,
                    "set_code_exec_strategy: a strategy with apply_to_code=False concerns one "
                    "call only and cannot be stored for a code object");
    return nullptr;
  }
  EvalState* st = state_for(code);
  if (!st) return nullptr;
  st->strategy = s->strategy;
  Py_RETURN_NONE;
}

PyObject* get_code_exec_strategy_py(PyObject*, PyObject* arg) {
  PyCodeObject* code = code_arg(arg, "get_code_exec_strategy");
  if (!code) return nullptr;
  EvalState* st = existing_state(code);
  return new_exec_strategy(st ? st->strategy : ExecStrategy{}, true);
}

PyObject* reset_code_py(PyObject*, PyObject* arg) {
  PyCodeObject* code = code_arg(arg, "reset_code");
  if (!code) return nullptr;
  reset_state(code);
  Py_RETURN_NONE;
}

PyObject* reset_py(PyObject*, PyObject*) {
  reset_all_states();
  Py_RETURN_NONE;
}

PyObject* cache_entries_py(PyObject*, PyObject* arg) {
  PyCodeObject* code = code_arg(arg, "cache_entries");
  if (!code) return nullptr;
  PyObject* list = PyList_New(0);  // new
  if (!list) return nullptr;
  EvalState* st = existing_state(code);
  for (CacheEntryObject* e = st ? st->head : nullptr; e; e = e->next) {
    if (PyList_Append(list, reinterpret_cast<PyObject*>(e)) < 0) {
      Py_DECREF(list);
      return nullptr;
    }
  }
  return list;
}

PyObject* is_skipped_py(PyObject*, PyObject* arg) {
  PyCodeObject* code = code_arg(arg, "is_skipped");
  if (!code) return nullptr;
  EvalState* st = existing_state(code);
  return PyBool_FromLong(st && st->strategy.cur == kActionSkip);
}

// Replaces a process-wide hook; returns the previous one (new reference) or null with TypeError.
PyObject* swap_hook(PyObject** slot, PyObject* hook, const char* fn) {
  if (hook != Py_None && !PyCallable_Check(hook)) {
    PyErr_Format(PyExc_TypeError, "%s: expected None or a callable, not %.100s", fn,
                 Py_TYPE(hook)->tp_name);
    return nullptr;
  }
  PyObject* old = *slot;
  *slot = hook == Py_None ? nullptr : Py_NewRef(hook);
  return old ? old : Py_NewRef(Py_None);
}

PyObject* set_hook(PyObject** slot, PyObject* hook, const char* fn) {
  PyObject* old = swap_hook(slot, hook, fn);
  if (!old) return nullptr;
  Py_DECREF(old);
  Py_RETURN_NONE;
}

PyObject* set_guard_fail_hook_py(PyObject*, PyObject* hook) {
  return set_hook(&g_guard_fail_hook, hook, "set_guard_fail_hook");
}

PyObject* set_guard_error_hook_py(PyObject*, PyObject* hook) {
  return set_hook(&g_guard_error_hook, hook, "set_guard_error_hook");
}

void update_lookup_extras() { g_lookup_extras = g_skip_guard_eval_unsafe || g_guard_complete_hook; }

PyObject* set_guard_complete_hook_py(PyObject*, PyObject* hook) {
  PyObject* previous = swap_hook(&g_guard_complete_hook, hook, "set_guard_complete_hook");
  update_lookup_extras();
  return previous;
}

PyObject* set_skip_guard_eval_unsafe_py(PyObject*, PyObject* arg) {
  int value = PyObject_IsTrue(arg);
  if (value < 0) return nullptr;
  const bool previous = g_skip_guard_eval_unsafe;
  g_skip_guard_eval_unsafe = value != 0;
  update_lookup_extras();
  return PyBool_FromLong(previous);
}

// Registered with atexit (so it runs before modules are torn down): this thread stops
// intercepting, and every code object's entries, frame_state and strategy are dropped.
PyObject* drop_all_states_py(PyObject*, PyObject*) {
  if (ThreadGuardObject* guard = t_eval.guard) {
    PyObject* callback = hook_thread().eval_callback;
    hook_thread().eval_callback = nullptr;
    Py_CLEAR(t_eval.isolation);
    ++t_eval.generation;
    if (guard->counted) {
      guard->counted = false;
      leave_enabled();
    }
    Py_XDECREF(callback);
  }
  reset_all_states();
  Py_RETURN_NONE;
}

PyObject* debug_state_py(PyObject*, PyObject*) {
  return Py_BuildValue("{s:n,s:O,s:I,s:n,s:n,s:n}", "enabled_threads", g_enabled_threads,
                       "hook_installed", hook_is_current() ? Py_True : Py_False, "hook_users",
                       hook_users(), "live_states", g_live_states, "live_entries", g_live_entries,
                       "frames_unwound", g_frames_unwound);
}

PyMethodDef g_methods[] = {
    {"set_eval_frame",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(set_eval_frame_py)),
     METH_VARARGS | METH_KEYWORDS,
     "set_eval_frame(callback, /, *, isolate=False, guard_errors='raise')\n--\n\n"
     "Sets this thread's eval_frame callback (None, False or a callable) and returns the "
     "previous one. isolate=True (or an isolation id) makes lookups see only the entries made "
     "under the same key; guard_errors='fail' counts a guard that raises as failed."},
    {"get_eval_frame_callback", get_eval_frame_callback_py, METH_NOARGS,
     "get_eval_frame_callback()\n--\n\nThis thread's callback now (None while guards, hooks or "
     "a callback run, or under a SKIP recursive action; False under RUN_ONLY)."},
    {"_eval_frame_setting", eval_frame_setting_py, METH_NOARGS,
     "_eval_frame_setting()\n--\n\n(callback, isolation key or None, guard_errors) of this "
     "thread."},
    {"skip_code", skip_code_py, METH_O,
     "skip_code(code, /)\n--\n\nFrames of `code` run as usual from now on (its callees are "
     "still offered): set_code_exec_strategy(code, FrameExecStrategy(SKIP, DEFAULT))."},
    {"set_code_exec_strategy",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(set_code_exec_strategy_py)),
     METH_FASTCALL,
     "set_code_exec_strategy(code, strategy, /)\n--\n\nStores a FrameExecStrategy for every "
     "later call of `code` (until reset_code)."},
    {"get_code_exec_strategy", get_code_exec_strategy_py, METH_O,
     "get_code_exec_strategy(code, /)\n--\n\nThe FrameExecStrategy stored for `code` "
     "(DEFAULT, DEFAULT when none)."},
    {"reset_code", reset_code_py, METH_O,
     "reset_code(code, /)\n--\n\nDrops the cache entries, frame_state and exec strategy (skip "
     "mark) of `code`."},
    {"reset", reset_py, METH_NOARGS,
     "reset()\n--\n\nreset_code() for every code object: drops every cache entry, frame_state "
     "and exec strategy. Callbacks, hooks and flags are kept."},
    {"cache_entries", cache_entries_py, METH_O,
     "cache_entries(code, /)\n--\n\nThe cache entries of `code`, most recently hit first."},
    {"is_skipped", is_skipped_py, METH_O,
     "is_skipped(code, /)\n--\n\nTrue when frames of `code` are skipped (cur_action SKIP)."},
    {"set_guard_fail_hook", set_guard_fail_hook_py, METH_O,
     "set_guard_fail_hook(hook, /)\n--\n\n"
     "hook(check_fn, code, f_locals, index, is_last) is called after each guard that returns "
     "false. None removes it."},
    {"set_guard_error_hook", set_guard_error_hook_py, METH_O,
     "set_guard_error_hook(hook, /)\n--\n\n"
     "hook(check_fn, code, f_locals, index, is_last) is called when a guard raises; then the "
     "guard's exception propagates, or with guard_errors='fail' the guard counts as failed. An "
     "exception from the hook propagates. None removes it."},
    {"set_guard_complete_hook", set_guard_complete_hook_py, METH_O,
     "set_guard_complete_hook(hook, /)\n--\n\n"
     "hook(cache_hit) is called after each lookup of a code object that has entries; a false "
     "result turns a hit into a miss. Returns the previous hook. None removes it."},
    {"set_skip_guard_eval_unsafe", set_skip_guard_eval_unsafe_py, METH_O,
     "set_skip_guard_eval_unsafe(value, /)\n--\n\n"
     "True: lookups hit the most recently hit (visible) entry without running guards; a miss "
     "raises RuntimeError. Process-wide; returns the previous value."},
    {"_eval_frame_drop_all", drop_all_states_py, METH_NOARGS,
     "_eval_frame_drop_all()\n--\n\nStops this thread's interception and drops every code "
     "object's eval_frame state (run at interpreter exit)."},
    {"_eval_frame_debug", debug_state_py, METH_NOARGS,
     "_eval_frame_debug()\n--\n\nInternal counters (tests): enabled threads, hook, live states "
     "and entries."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

bool eval_frame_api_init(PyObject* module) {
  if (!init_code_extra()) return false;
  eval_frame_state_init();
  if (!eval_frame_types_init(module) || !eval_frame_strategy_init(module)) return false;
  PyTypeObject* t = &g_thread_guard_type;
  t->tp_name = "framescope._core._EvalFrameThread";
  t->tp_basicsize = sizeof(ThreadGuardObject);
  t->tp_flags = Py_TPFLAGS_DEFAULT;
  t->tp_dealloc = thread_guard_dealloc;
  if (PyType_Ready(t) < 0) return false;
  if (!g_thread_key && !(g_thread_key = PyUnicode_InternFromString("framescope.eval_frame"))) {
    return false;
  }
  if (PyModule_AddFunctions(module, g_methods) < 0) return false;
  // atexit handlers run before modules are torn down, and in reverse order of registration: this
  // one, registered at import, runs after the program's own.
  PyObject* atexit = PyImport_ImportModule("atexit");  // new
  if (!atexit) return false;
  PyObject* drop = PyObject_GetAttrString(module, "_eval_frame_drop_all");  // new
  PyObject* r = drop ? PyObject_CallMethod(atexit, "register", "O", drop) : nullptr;
  const bool ok = r != nullptr;
  Py_XDECREF(r);
  Py_XDECREF(drop);
  Py_DECREF(atexit);
  return ok;
}

}  // namespace framescope::py
