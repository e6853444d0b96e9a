// cpp/python/eval_frame_api.cpp: the eval_frame API: per-thread callbacks, guarded code caches
// per code object, and the "Cache Lookup" range around each lookup.
//
// Flow of an intercepted call (a frame that has not started, on a thread whose callback is set):
//   1. the code is skipped, or run-only mode has nothing cached for it -> run the frame;
//   2. the thread's callback is taken out (it reads as None) so that guards, hooks and the
//      callback are never intercepted themselves;
//   3. inside a "Cache Lookup" range: check_fn(f_locals) of each entry, most recent first; the
//      first true one moves to the head;
//   4. no hit: callback(frame, first_entry_or_None, frame_state) -> None (skip the code from now
//      on) or GuardedCode (a new head entry);
//   5. the callback is put back (unless set_eval_frame() was called meanwhile), then the hit or
//      new entry runs: the frame itself when it caches the frame's own code, else a shadow call
//      (eval_frame_run.cpp).
#include "eval_frame_internal.h"  // first: Python.h with the internal frame headers

#include <new>

#include "framescope/record_function.h"
#include "tracer_api.h"

namespace framescope::py {

thread_local EvalThread t_eval FRAMESCOPE_TLS_IE = {nullptr, 0, nullptr, nullptr};
Py_ssize_t g_live_states = 0;

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

Py_ssize_t g_enabled_threads = 0;        // threads whose callback is not None (GIL-protected)
PyObject* g_guard_fail_hook = nullptr;   // strong or null
PyObject* g_guard_error_hook = nullptr;  // strong or null
PyObject* g_thread_key = nullptr;        // key of the ThreadGuard in each thread's dict

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
    callback = t_hook.eval_callback;
    t_hook.eval_callback = nullptr;
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

// ---- per-code state ----------------------------------------------------------------------------

// Every attached state. A state's entries and frame_state are reachable only through co_extra,
// which the garbage collector does not see: a guard whose globals hold the function of its code
// (any module-level guard of a module-level function) makes a cycle that is never collected. At
// interpreter exit they are all dropped (drop_all_states), so that finalization frees what they
// hold, as it would without framescope.
EvalState* g_attached = nullptr;

// This code's state, created if missing. Borrowed; null with an exception set.
EvalState* state_for(PyCodeObject* code) {
  CodeExtra* extra = get_or_create_code_extra(code);
  if (!extra) return nullptr;
  if (!extra->eval_state) {
    auto* st = new (std::nothrow) EvalState();
    if (!st) {
      PyErr_NoMemory();
      return nullptr;
    }
    ++g_live_states;
    st->owner = extra;
    st->next_attached = g_attached;
    if (g_attached) g_attached->prev_attached = st;
    g_attached = st;
    extra->eval_state = st;
  }
  return static_cast<EvalState*>(extra->eval_state);
}

void release_state(EvalState* st) {
  if (--st->refs == 0) {
    --g_live_states;
    delete st;
  }
}

// Empties a state that is no longer reachable from its code (the caller unlinked it): dropping
// entries and frame_state may run arbitrary code (finalizers), which must find it gone.
void detach_state(EvalState* st) {
  st->detached = true;
  st->owner = nullptr;
  if (st->prev_attached) st->prev_attached->next_attached = st->next_attached;
  if (st->next_attached) st->next_attached->prev_attached = st->prev_attached;
  if (g_attached == st) g_attached = st->next_attached;
  st->prev_attached = st->next_attached = nullptr;
  CacheEntryObject* e = st->head;
  PyObject* frame_state = st->frame_state;
  st->head = nullptr;
  st->frame_state = nullptr;
  while (e) {
    CacheEntryObject* next = e->next;  // the reference e held is now ours
    e->next = nullptr;
    drop_cache_entry(e);
    Py_DECREF(e);
    e = next;
  }
  Py_XDECREF(frame_state);
  release_state(st);
}

// Installed as g_free_eval_state: the code object died.
void free_eval_state(void* p) { detach_state(static_cast<EvalState*>(p)); }

void reset_state(PyCodeObject* code) {
  CodeExtra* extra = find_code_extra(code);
  if (!extra || !extra->eval_state) return;
  auto* st = static_cast<EvalState*>(extra->eval_state);
  extra->eval_state = nullptr;
  detach_state(st);
}

// Registered with atexit (so it runs before modules are torn down): this thread stops
// intercepting, and every code object's entries, frame_state and skip mark are dropped.
PyObject* drop_all_states_py(PyObject*, PyObject*) {
  if (ThreadGuardObject* guard = t_eval.guard) {
    PyObject* callback = t_hook.eval_callback;
    t_hook.eval_callback = nullptr;
    ++t_eval.generation;
    if (guard->counted) {
      guard->counted = false;
      leave_enabled();
    }
    Py_XDECREF(callback);
  }
  while (EvalState* st = g_attached) {
    st->owner->eval_state = nullptr;
    detach_state(st);
  }
  Py_RETURN_NONE;
}

// ---- lookup ------------------------------------------------------------------------------------

// Moves `e` to the head of the list if it is still in it. The list may have changed while guards
// ran (another thread can run while a guard does), so the predecessor is looked up again.
void move_to_head(EvalState* st, CacheEntryObject* e) {
  CacheEntryObject* prev = st->head;
  if (prev == e || !prev) return;
  while (prev && prev->next != e) prev = prev->next;
  if (!prev) return;
  // References move along with the links: prev takes e's, e takes the old head's, st takes e.
  prev->next = e->next;
  e->next = st->head;
  st->head = e;
}

// check_fn(f_locals) through its vectorcall slot when it has one (Python functions, most
// builtins): PyObject_CallOneArg would look the thread state up again.
int call_guard(PyObject* check_fn, PyObject* locals) {
  PyObject* r;  // new
  PyTypeObject* type = Py_TYPE(check_fn);
  if (PyType_HasFeature(type, Py_TPFLAGS_HAVE_VECTORCALL) && type->tp_vectorcall_offset > 0) {
    vectorcallfunc vc = *reinterpret_cast<vectorcallfunc*>(reinterpret_cast<char*>(check_fn) +
                                                           type->tp_vectorcall_offset);
    PyObject* args[2] = {nullptr, locals};
    r = vc ? vc(check_fn, args + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr)
           : PyObject_CallOneArg(check_fn, locals);
    if (!r && !PyErr_Occurred()) {
      PyErr_Format(PyExc_SystemError, "guard %R returned NULL without setting an exception",
                   check_fn);
    }
  } else {
    r = PyObject_CallOneArg(check_fn, locals);
  }
  if (!r) return -1;
  int ok = r == Py_True ? 1 : r == Py_False ? 0 : PyObject_IsTrue(r);
  Py_DECREF(r);
  return ok;
}

// hook(check_fn, code, f_locals, index, is_last), as Dynamo calls its guard hooks.
int call_guard_hook(PyObject* hook, PyObject* check_fn, CacheEntryObject* e, PyObject* locals,
                    Py_ssize_t index) {
  PyObject* hook_ref = Py_NewRef(hook);  // the hook may replace itself
  PyObject* code = Py_NewRef(e->code ? e->code : Py_None);
  PyObject* idx = PyLong_FromSsize_t(index);
  PyObject* r = nullptr;
  if (idx) {
    PyObject* args[5] = {check_fn, code, locals, idx, e->next ? Py_False : Py_True};
    r = PyObject_Vectorcall(hook_ref, args, 5, nullptr);
  }
  Py_XDECREF(idx);
  Py_DECREF(code);
  Py_DECREF(hook_ref);
  if (!r) return -1;
  Py_DECREF(r);
  return 0;
}

// A guard raised: the error hook is told, then the guard's exception stands, unless the hook
// raised, whose exception then wins (with the guard's as its __context__).
void report_guard_error(PyObject* check_fn, CacheEntryObject* e, PyObject* locals,
                        Py_ssize_t index) {
  if (!g_guard_error_hook) return;
  PendingError guard_error;
  guard_error.take();
  if (call_guard_hook(g_guard_error_hook, check_fn, e, locals, index) < 0) {
    PendingError hook_error;
    hook_error.take();
    if (hook_error.value() && guard_error.value() && hook_error.value() != guard_error.value()) {
      PyException_SetContext(hook_error.value(), Py_NewRef(guard_error.value()));
    }
    guard_error.drop();
    hook_error.restore();
  } else {
    guard_error.restore();
  }
}

// Runs the guards in order. 1: hit (*hit is a new reference, moved to the head), 0: miss (also
// when the state was reset meanwhile), -1: error.
int walk_entries(EvalState* st, FsFrame* frame, PyObject** locals_out, CacheEntryObject** hit) {
  PyObject* locals = acquire_frame_locals(frame);  // new
  if (!locals) return -1;
  *locals_out = locals;
  Py_ssize_t index = 0;
  CacheEntryObject* e = st->head;
  Py_XINCREF(e);
  while (e) {
    // Held across the call: the guard may reset the code, dropping the entry's references.
    PyObject* check_fn = Py_XNewRef(e->check_fn);
    if (!check_fn) break;
    int ok = call_guard(check_fn, locals);
    if (ok < 0) {
      report_guard_error(check_fn, e, locals, index);
      Py_DECREF(check_fn);
      Py_DECREF(e);
      return -1;
    }
    if (st->detached) {
      Py_DECREF(check_fn);
      break;
    }
    if (ok) {
      Py_DECREF(check_fn);
      move_to_head(st, e);
      *hit = e;
      return 1;
    }
    if (g_guard_fail_hook && call_guard_hook(g_guard_fail_hook, check_fn, e, locals, index) < 0) {
      Py_DECREF(check_fn);
      Py_DECREF(e);
      return -1;
    }
    Py_DECREF(check_fn);
    CacheEntryObject* next = e->next;
    Py_XINCREF(next);
    Py_DECREF(e);
    e = next;
    ++index;
  }
  Py_XDECREF(e);
  return 0;
}

enum class Plan : uint8_t { kError, kRunFrame, kRunEntry };

// A miss with a callable callback. `*st` (held) may be swapped for the code's fresh state when
// the code was reset meanwhile. On kRunEntry, *hit is a new reference to the new entry.
Plan call_callback(PyThreadState* ts, FsFrame* frame, PyCodeObject* code, EvalState** st,
                   PyObject* callback, PyObject** locals, CacheEntryObject** hit) {
  if ((*st)->detached) {
    EvalState* fresh = state_for(code);
    if (!fresh) return Plan::kError;
    ++fresh->refs;
    release_state(*st);
    *st = fresh;
  }
  EvalState* s = *st;
  if (!s->frame_state && !(s->frame_state = PyDict_New())) return Plan::kError;
  if (!*locals && !(*locals = acquire_frame_locals(frame))) return Plan::kError;
  PyObject* head = Py_NewRef(s->head ? reinterpret_cast<PyObject*>(s->head) : Py_None);
  PyObject* frame_state = Py_NewRef(s->frame_state);
  PyObject* wrapper = new_eval_frame(ts, frame, *locals);  // new
  PyObject* r = nullptr;
  if (wrapper) {
    PyObject* args[3] = {wrapper, head, frame_state};
    r = PyObject_Vectorcall(callback, args, 3, nullptr);
    expire_eval_frame(wrapper);
    Py_DECREF(wrapper);
  }
  Py_DECREF(head);
  Py_DECREF(frame_state);
  if (!r) return Plan::kError;

  // The callback may have reset this code: what it returns goes to the code's current state.
  Plan plan = Plan::kError;
  if (r == Py_None) {
    if (EvalState* cur = state_for(code)) {
      cur->skip = true;
      plan = Plan::kRunFrame;
    }
  } else if (PyObject_TypeCheck(r, &g_guarded_code_type)) {
    auto* gc = reinterpret_cast<GuardedCodeObject*>(r);
    if (CacheEntryObject* e = new_cache_entry(code, gc->code, gc->check_fn)) {  // new
      if (EvalState* cur = state_for(code)) {
        e->next = cur->head;  // the list's reference moves to e
        cur->head = e;
        *hit = reinterpret_cast<CacheEntryObject*>(Py_NewRef(e));
        plan = Plan::kRunEntry;
      } else {
        Py_DECREF(e);
      }
    }
  } else {
    PyErr_Format(PyExc_TypeError,
                 "eval_frame callback must return None or a GuardedCode, not %.100s",
                 Py_TYPE(r)->tp_name);
  }
  Py_DECREF(r);
  return plan;
}

// The lookup (and callback) of an intercepted frame. Out of line so that the C stack the frame
// keeps while it runs (deep recursion) holds none of this.
FRAMESCOPE_NOINLINE Plan intercept(PyThreadState* ts, FsFrame* frame, PyCodeObject* code,
                                   EvalState* st, CacheEntryObject** out) {
  if (FRAMESCOPE_UNLIKELY(c_stack_nearly_exhausted())) {
    PyErr_SetString(PyExc_RecursionError,
                    "maximum recursion depth exceeded (framescope: the C stack is nearly exhausted "
                    "by frames intercepted by the eval_frame API)");
    return Plan::kError;
  }
  if (!st && !(st = state_for(code))) return Plan::kError;
  ++st->refs;
  // No re-entry: the callback is taken out of the thread (it reads as None) while guards, hooks
  // and the callback run; this holds its reference meanwhile.
  PyObject* callback = t_hook.eval_callback;
  t_hook.eval_callback = nullptr;
  const uint64_t generation = t_eval.generation;

  PyObject* locals = nullptr;
  CacheEntryObject* hit = nullptr;
  int found = 0;
  {
    RecordFunction range("Cache Lookup");
    if (st->head) found = walk_entries(st, frame, &locals, &hit);
  }
  Plan plan = found < 0 ? Plan::kError : Plan::kRunFrame;
  if (found > 0) {
    plan = Plan::kRunEntry;
  } else if (found == 0 && callback != Py_False) {
    plan = call_callback(ts, frame, code, &st, callback, &locals, &hit);
  }

  if (t_eval.generation == generation) {
    t_hook.eval_callback = callback;  // nested frames of the cached code are intercepted again
  } else {
    Py_DECREF(callback);  // set_eval_frame() ran meanwhile: its choice stands
  }
  if (locals) release_frame_locals(locals);
  release_state(st);
  if (plan == Plan::kRunEntry) {
    if (hit->same_code) {
      Py_DECREF(hit);
      return Plan::kRunFrame;
    }
    *out = hit;
  }
  return plan;
}

// ---- Python functions --------------------------------------------------------------------------

PyObject* set_eval_frame_py(PyObject*, PyObject* callback) {
  if (callback != Py_None && callback != Py_False && !PyCallable_Check(callback)) {
    PyErr_Format(PyExc_TypeError, "set_eval_frame: expected None, False or a callable, not %.100s",
                 Py_TYPE(callback)->tp_name);
    return nullptr;
  }
  const bool enable = callback != Py_None;
  ThreadGuardObject* guard = t_eval.guard;
  if (enable && !guard && !(guard = thread_guard())) return nullptr;
  PyObject* previous = t_hook.eval_callback ? t_hook.eval_callback : Py_NewRef(Py_None);
  t_hook.eval_callback = enable ? Py_NewRef(callback) : nullptr;
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
  st->skip = true;
  Py_RETURN_NONE;
}

PyObject* reset_code_py(PyObject*, PyObject* arg) {
  PyCodeObject* code = code_arg(arg, "reset_code");
  if (!code) return nullptr;
  reset_state(code);
  Py_RETURN_NONE;
}

EvalState* existing_state(PyCodeObject* code) {
  CodeExtra* extra = find_code_extra(code);
  return extra ? static_cast<EvalState*>(extra->eval_state) : nullptr;
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
  return PyBool_FromLong(st && st->skip);
}

PyObject* set_hook(PyObject** slot, PyObject* hook, const char* fn) {
  if (hook != Py_None && !PyCallable_Check(hook)) {
    PyErr_Format(PyExc_TypeError, "%s: expected None or a callable, not %.100s", fn,
                 Py_TYPE(hook)->tp_name);
    return nullptr;
  }
  PyObject* old = *slot;
  *slot = hook == Py_None ? nullptr : Py_NewRef(hook);
  Py_XDECREF(old);
  Py_RETURN_NONE;
}

PyObject* set_guard_fail_hook_py(PyObject*, PyObject* hook) {
  return set_hook(&g_guard_fail_hook, hook, "set_guard_fail_hook");
}

PyObject* set_guard_error_hook_py(PyObject*, PyObject* hook) {
  return set_hook(&g_guard_error_hook, hook, "set_guard_error_hook");
}

PyObject* debug_state_py(PyObject*, PyObject*) {
  return Py_BuildValue("{s:n,s:O,s:I,s:n,s:n,s:n}", "enabled_threads", g_enabled_threads,
                       "hook_installed", hook_is_current() ? Py_True : Py_False, "hook_users",
                       hook_users(), "live_states", g_live_states, "live_entries", g_live_entries,
                       "frames_unwound", g_frames_unwound);
}

PyMethodDef g_methods[] = {
    {"set_eval_frame", set_eval_frame_py, METH_O,
     "set_eval_frame(callback, /)\n--\n\n"
     "Sets this thread's eval_frame callback (None, False or a callable) and returns the "
     "previous one."},
    {"skip_code", skip_code_py, METH_O,
     "skip_code(code, /)\n--\n\nFrames of `code` run as usual from now on (its callees are "
     "still offered)."},
    {"reset_code", reset_code_py, METH_O,
     "reset_code(code, /)\n--\n\nDrops the cache entries, frame_state and skip mark of `code`."},
    {"cache_entries", cache_entries_py, METH_O,
     "cache_entries(code, /)\n--\n\nThe cache entries of `code`, most recently hit first."},
    {"is_skipped", is_skipped_py, METH_O,
     "is_skipped(code, /)\n--\n\nTrue when frames of `code` are skipped."},
    {"set_guard_fail_hook", set_guard_fail_hook_py, METH_O,
     "set_guard_fail_hook(hook, /)\n--\n\n"
     "hook(check_fn, code, f_locals, index, is_last) is called after each guard that returns "
     "false. None removes it."},
    {"set_guard_error_hook", set_guard_error_hook_py, METH_O,
     "set_guard_error_hook(hook, /)\n--\n\n"
     "hook(check_fn, code, f_locals, index, is_last) is called when a guard raises; the guard's "
     "exception then propagates (or the hook's, if it raises). None removes it."},
    {"_eval_frame_drop_all", drop_all_states_py, METH_NOARGS,
     "_eval_frame_drop_all()\n--\n\nStops this thread's interception and drops every code "
     "object's eval_frame state (run at interpreter exit)."},
    {"_eval_frame_debug", debug_state_py, METH_NOARGS,
     "_eval_frame_debug()\n--\n\nInternal counters (tests): enabled threads, hook, live states "
     "and entries."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

PyObject* eval_api_frame(PyThreadState* ts, FsFrame* frame, int throwflag) {
  EvalThread& t = t_eval;
  if (FRAMESCOPE_UNLIKELY(t.bypass_code != nullptr) &&
      reinterpret_cast<PyObject*>(frame_code(frame)) == t.bypass_code && !throwflag &&
      !frame_started(frame)) {
    t.bypass_code = nullptr;  // the shadow call of a cached entry: already looked up
    return run_frame(ts, frame, throwflag);
  }
  // Generators are offered once per call: never on a resume, throw() or close().
  if (throwflag || frame_started(frame) || thread_is_tracing(ts)) {
    return run_frame(ts, frame, throwflag);
  }
  PyCodeObject* code = frame_code(frame);
  CodeExtra* extra = find_code_extra(code);
  auto* st = extra ? static_cast<EvalState*>(extra->eval_state) : nullptr;
  if (st ? st->skip || (!st->head && t_hook.eval_callback == Py_False)
         : t_hook.eval_callback == Py_False) {
    return run_frame(ts, frame, 0);
  }
  CacheEntryObject* entry = nullptr;
  switch (intercept(ts, frame, code, st, &entry)) {
    case Plan::kRunFrame:
      return run_frame(ts, frame, 0);
    case Plan::kRunEntry: {
      PyObject* result = run_entry_code(ts, frame, entry);
      Py_DECREF(entry);
      return result;
    }
    default:
      return fail_unstarted_frame(ts, frame);
  }
}

bool eval_frame_api_init(PyObject* module) {
  if (!init_code_extra()) return false;
  g_free_eval_state = free_eval_state;
  if (!eval_frame_types_init(module)) return false;
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
