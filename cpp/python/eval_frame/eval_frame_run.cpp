// cpp/python/eval_frame/eval_frame_run.cpp: running cached code in place of an intercepted frame.
//
// How (the same on 3.10-3.13): the cached code runs in a new frame made by CPython itself, by
// calling a "shadow" function over that code with the intercepted frame's globals and closure,
// passing the frame's bound arguments back as arguments (keyword-only ones and **kwargs items by
// name). CPython then builds cells and copies free variables as for any call, so no frame
// internals are copied by hand. The shadow frame passes the hook without a lookup (bypass_code),
// so the tracer records it like any frame, and its callees are intercepted as usual.
//
// The intercepted frame itself never runs. On 3.10 and 3.11 its caller frees it when the hook
// returns; on 3.12+ the evaluation function must (_PyEval_Vector no longer clears the frame after
// evaluating it), which discard_unstarted_frame() does.
#include "eval_frame/eval_frame_internal.h"  // first: Python.h with the internal frame headers

#include <memory>

#include "eval_frame/eval_frame_guard.h"

namespace framescope::py {

Py_ssize_t g_frames_unwound = 0;

namespace {

constexpr int kGeneratorFlags = CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR;

bool layout_error(PyCodeObject* frame_code, PyObject* code, const char* why) {
  PyErr_Format(PyExc_ValueError,
               "GuardedCode: %R cannot run on a frame of %R: %s (a cached code object must take "
               "the same arguments, with the same names, and the same free variables)",
               code, reinterpret_cast<PyObject*>(frame_code), why);
  return false;
}

// Checks that `code` can run with the arguments and closure of frames of `frame_code`: the
// arguments are passed back by position and by name, the closure as it is.
bool check_layout(PyCodeObject* fc, PyCodeObject* nc) {
  PyObject* code = reinterpret_cast<PyObject*>(nc);
  if (code_is_function_body(fc) != code_is_function_body(nc)) {
    return layout_error(fc, code, "one is a function body, the other a module or class body");
  }
  if (fc->co_argcount != nc->co_argcount || fc->co_posonlyargcount != nc->co_posonlyargcount ||
      fc->co_kwonlyargcount != nc->co_kwonlyargcount) {
    return layout_error(fc, code, "different numbers of positional / keyword-only arguments");
  }
  if ((fc->co_flags & (CO_VARARGS | CO_VARKEYWORDS)) !=
      (nc->co_flags & (CO_VARARGS | CO_VARKEYWORDS))) {
    return layout_error(fc, code, "different *args / **kwargs");
  }
  for (int i = 0, n = code_arg_slots(fc); i < n; i++) {
    int cmp = PyObject_RichCompareBool(code_argument_name(fc, i), code_argument_name(nc, i), Py_EQ);
    if (cmp < 0) return false;
    if (!cmp) return layout_error(fc, code, "different argument names");
  }
  if (code_free_count(fc) != code_free_count(nc)) {
    return layout_error(fc, code, "different numbers of free variables");
  }
  for (int j = 0, n = code_free_count(fc); j < n; j++) {
    int cmp = PyObject_RichCompareBool(code_free_name(fc, j), code_free_name(nc, j), Py_EQ);
    if (cmp < 0) return false;
    if (!cmp) return layout_error(fc, code, "different free variables (names or order)");
  }
#if !FS_PY311
  if (fc->co_flags & kGeneratorFlags) {
    // On 3.10 a generator's frame is created with the generator, before any hook sees it; the
    // hook only gets its first resume, and the generator object keeps that frame.
    PyErr_Format(PyExc_NotImplementedError,
                 "GuardedCode: on Python 3.10 a generator or coroutine frame (%R) can only run its "
                 "own code object (Python 3.11+ can run another one)",
                 reinterpret_cast<PyObject*>(fc));
    return false;
  }
#endif
  return true;
}

// The intercepted frame's closure as a new tuple (null with an exception if it has none).
PyObject* frame_closure(FsFrame* frame, int nfree) {
  PyObject* closure = PyTuple_New(nfree);  // new
  if (!closure) return nullptr;
  for (int j = 0; j < nfree; j++) {
    PyObject* cell = frame_free_cell(frame, j);  // borrowed
    if (!cell) {
      Py_DECREF(closure);
      PyErr_SetString(PyExc_SystemError, "framescope.eval_frame: the frame has no closure");
      return nullptr;
    }
    PyTuple_SET_ITEM(closure, j, Py_NewRef(cell));
  }
  return closure;
}

// The globals an idle shadow function points to (an empty dict, shared).
PyObject* g_idle_globals = nullptr;

// Shadow functions are reused: making a function costs more than the whole rest of a cache hit.
// But an entry is reachable from its code object's co_extra, which the garbage collector cannot
// see, so whatever the entry holds stays alive: a shadow function kept with the frame's globals
// or closure would keep those alive (and, through them, usually the function and its code, which
// then never dies). So the entry keeps an idle shadow (empty globals, no closure), points it at
// the frame's globals, builtins and closure for one call, and makes it idle again afterwards. It
// does so only when nothing else holds the function: a frame running it (recursion), or a
// generator it created, hold a reference; then a new function is made for that call.
void point_function(PyFunctionObject* fn, PyObject* globals, PyObject* builtins,
                    PyObject* closure) {
  // Py_SETREF assigns before it releases: finalizers see a consistent function.
  Py_SETREF(fn->func_globals, Py_NewRef(globals));
  Py_SETREF(fn->func_builtins, Py_NewRef(builtins));
  Py_XSETREF(fn->func_closure, Py_XNewRef(closure));
}

// A function over the entry's code, pointed at this frame's globals, builtins and closure. New
// reference or null.
PyObject* acquire_shadow(CacheEntryObject* e, FsFrame* frame) {
  int nfree = code_free_count(frame_code(frame));
  PyObject* closure = nullptr;  // new
  if (nfree) {
#if FS_PY311
    // The intercepted function's own closure tuple (the frame has no cells of its own yet).
    PyObject* func = frame_function(frame);  // borrowed
    closure = PyFunction_Check(func) ? Py_XNewRef(PyFunction_GET_CLOSURE(func)) : nullptr;
    if (!closure) {
      PyErr_SetString(PyExc_SystemError, "framescope.eval_frame: the frame has no closure");
      return nullptr;
    }
#else
    closure = frame_closure(frame, nfree);
    if (!closure) return nullptr;
#endif
  }
  if (!g_idle_globals && !(g_idle_globals = PyDict_New())) {
    Py_XDECREF(closure);
    return nullptr;
  }
  PyObject* fn = e->shadow_func;
  if (fn && Py_REFCNT(fn) == 1) {
    Py_INCREF(fn);
  } else {
    fn = PyFunction_New(e->code, g_idle_globals);  // new
    if (!fn) {
      Py_XDECREF(closure);
      return nullptr;
    }
    if (!e->shadow_func) e->shadow_func = Py_NewRef(fn);
  }
  point_function(reinterpret_cast<PyFunctionObject*>(fn), frame->f_globals, frame->f_builtins,
                 closure);
  Py_XDECREF(closure);
  return fn;
}

void release_shadow(CacheEntryObject* e, PyObject* fn) {
  if (fn == e->shadow_func) {
    if (Py_REFCNT(fn) == 2) {
      point_function(reinterpret_cast<PyFunctionObject*>(fn), g_idle_globals, g_idle_globals,
                     nullptr);
    } else {
      Py_CLEAR(e->shadow_func);  // still in use (a generator): not idle, so not kept
    }
  }
  Py_DECREF(fn);
}

PyObject* missing_argument() {
  PyErr_SetString(PyExc_SystemError, "framescope.eval_frame: an argument of the frame is unbound");
  return nullptr;
}

// Calls `func` with the bound arguments of the unstarted `frame`. New reference or null.
PyObject* call_with_frame_arguments(PyObject* func, FsFrame* frame, CacheEntryObject* e) {
  PyCodeObject* co = frame_code(frame);
  const int argc = co->co_argcount;
  const int kwonly = co->co_kwonlyargcount;
  const bool has_varargs = co->co_flags & CO_VARARGS;
  PyObject* varargs = has_varargs ? frame_argument(frame, argc + kwonly) : nullptr;  // borrowed
  PyObject* varkw = (co->co_flags & CO_VARKEYWORDS)
                        ? frame_argument(frame, argc + kwonly + has_varargs)
                        : nullptr;
  if ((has_varargs && (!varargs || !PyTuple_Check(varargs))) ||
      ((co->co_flags & CO_VARKEYWORDS) && (!varkw || !PyDict_Check(varkw)))) {
    return missing_argument();
  }
  const Py_ssize_t nvar = varargs ? PyTuple_GET_SIZE(varargs) : 0;
  const Py_ssize_t nkwextra = varkw ? PyDict_GET_SIZE(varkw) : 0;
  const Py_ssize_t npos = argc + nvar;
  const Py_ssize_t nkw = kwonly + nkwextra;

  // Borrowed references: the frame holds them until it is discarded, after the call.
  PyObject* small[16];
  std::unique_ptr<PyObject*[]> large;
  PyObject** args = small;
  if (npos + nkw > Py_ssize_t(sizeof(small) / sizeof(small[0]))) {
    large.reset(new PyObject*[size_t(npos + nkw)]);
    args = large.get();
  }
  for (int i = 0; i < argc; i++) {
    if (!(args[i] = frame_argument(frame, i))) return missing_argument();
  }
  for (Py_ssize_t i = 0; i < nvar; i++) args[argc + i] = PyTuple_GET_ITEM(varargs, i);
  for (int i = 0; i < kwonly; i++) {
    if (!(args[npos + i] = frame_argument(frame, argc + i))) return missing_argument();
  }
  PyObject* kwnames = nullptr;  // new
  if (nkwextra) {
    kwnames = PyTuple_New(nkw);
    if (!kwnames) return nullptr;
    for (int i = 0; i < kwonly; i++) {
      PyTuple_SET_ITEM(kwnames, i, Py_NewRef(code_argument_name(co, argc + i)));
    }
    Py_ssize_t pos = 0, i = kwonly;
    PyObject *key, *value;
    while (PyDict_Next(varkw, &pos, &key, &value) && i < nkw) {
      PyTuple_SET_ITEM(kwnames, i, Py_NewRef(key));
      args[npos + i] = value;
      ++i;
    }
  } else if (kwonly) {
    kwnames = Py_NewRef(e->kwonly_names);
  }
  PyObject* result = PyObject_Vectorcall(func, args, size_t(npos), kwnames);
  Py_XDECREF(kwnames);
  return result;
}

#if FS_PY312
// Frees an unstarted thread-owned frame on top of the data stack, as CPython's own exit path
// does (clear_thread_frame in ceval.c: drop the locals and specials, then pop). Returns false,
// touching nothing, where that needs CPython functions that are not exported: a frame object
// exists (it would take the frame over), or on 3.12 the frame opens a data-stack chunk (popping
// it frees the chunk).
bool pop_unstarted_frame(PyThreadState* ts, _PyInterpreterFrame* frame) {
  if (frame->owner != FRAME_OWNED_BY_THREAD || frame->frame_obj) return false;
  PyCodeObject* code = frame_code(frame);
  PyObject** base = reinterpret_cast<PyObject**>(frame);
  if (base + code->co_framesize != ts->datastack_top) return false;
#if !FS_PY313
  if (base == &ts->datastack_chunk->data[0]) return false;
#endif
  for (int i = 0; i < frame->stacktop; i++) Py_CLEAR(frame->localsplus[i]);
  frame->stacktop = 0;
  Py_CLEAR(frame->f_locals);
  Py_DECREF(frame->f_funcobj);
  Py_DECREF(code);
#if FS_PY313
  _PyThreadState_PopFrame(ts, frame);
#else
  ts->datastack_top = base;
#endif
  return true;
}
#endif

// Disposes of an intercepted frame that never ran, keeping any pending exception.
void discard_unstarted_frame(PyThreadState* ts, FsFrame* frame) {
#if FS_PY312
  if (pop_unstarted_frame(ts, frame)) return;
  // Otherwise let the default evaluation unwind it, as refuse_frame() does: evaluating with an
  // exception set and throwflag=1 frees the frame like any raising frame.
  ++g_frames_unwound;
  PendingError pending;
  pending.take();
  PyErr_SetString(PyExc_SystemError, "framescope: discarding an intercepted frame");
  PyObject* r = g_previous_eval(ts, frame, 1);
  Py_XDECREF(r);
  PyErr_Clear();
  pending.restore();
#else
  (void)ts;
  (void)frame;
#endif
}

}  // namespace

CacheEntryObject* new_cache_entry(PyCodeObject* frame_code, PyObject* code, PyObject* check_fn,
                                  PyObject* isolation) {
  if (!code || !PyCode_Check(code) || !check_fn || !PyCallable_Check(check_fn)) {
    PyErr_SetString(PyExc_TypeError, "GuardedCode: needs a code object and a callable check_fn");
    return nullptr;
  }
  auto* nc = reinterpret_cast<PyCodeObject*>(code);
  bool same = nc == frame_code;
  if (!same && !check_layout(frame_code, nc)) return nullptr;
  PyObject* kwonly_names = nullptr;
  if (!same && nc->co_kwonlyargcount > 0) {
    kwonly_names = PyTuple_New(nc->co_kwonlyargcount);
    if (!kwonly_names) return nullptr;
    for (int i = 0; i < nc->co_kwonlyargcount; i++) {
      PyTuple_SET_ITEM(kwonly_names, i, Py_NewRef(code_argument_name(nc, nc->co_argcount + i)));
    }
  }
  // A Guard is checked against the frame's code now (every name it reads must be in f_locals),
  // and compiled for it when a hit can be decided from the frame.
  FrameGuardProgram* program = nullptr;
  if (is_guard(check_fn) && !prepare_guard_for_code(check_fn, frame_code, same, &program)) {
    Py_XDECREF(kwonly_names);
    return nullptr;
  }
  auto* e = PyObject_GC_New(CacheEntryObject, &g_cache_entry_type);
  if (!e) {
    Py_XDECREF(kwonly_names);
    free_frame_guard_program(program);
    return nullptr;
  }
  // An entry caching the frame's own code refers to it without a reference: the code owns the
  // entry (through co_extra, which the garbage collector does not see), so a reference back would
  // keep the code alive forever. drop_cache_entry() forgets it before the code can die.
  e->code = same ? code : Py_NewRef(code);
  e->check_fn = Py_NewRef(check_fn);
  e->next = nullptr;
  e->shadow_func = nullptr;
  e->kwonly_names = kwonly_names;
  e->isolation = Py_XNewRef(isolation);
  e->same_code = same;
  e->guard_program = program;
  e->frame_guard = program                                                         ? kProgramGuard
                   : same && check_fn == reinterpret_cast<PyObject*>(&PyBool_Type) ? kTruthGuard
                                                                                   : kNoFrameGuard;
  ++g_live_entries;
  PyObject_GC_Track(e);
  return e;
}

PyObject* run_entry_code(PyThreadState* ts, FsFrame* frame, CacheEntryObject* e,
                         bool intercepting) {
  // The entry may be dropped (reset_code) while its code runs: hold what the call needs.
  PyObject* code = Py_XNewRef(e->code);  // new
  PyObject* result = nullptr;
  PyCodeObject* fc = frame_code(frame);
  if (!code) {
    PyErr_SetString(PyExc_RuntimeError, "framescope.eval_frame: the cache entry was dropped");
  } else if (code_is_function_body(fc)) {
    PyObject* func = acquire_shadow(e, frame);  // new
    if (func) {
      // The shadow frame reaches the API only while this thread has a callback (a SKIP
      // recursive action runs the code with none): only then is it told to let it through.
      PyObject* saved_bypass = t_eval.bypass_code;
      if (intercepting) t_eval.bypass_code = code;
      result = call_with_frame_arguments(func, frame, e);
      t_eval.bypass_code = saved_bypass;
      release_shadow(e, func);
    }
  } else {
    // Module or class body: run the code in the frame's namespace with its closure.
    int nfree = code_free_count(fc);
    PyObject* closure = nfree ? frame_closure(frame, nfree) : nullptr;  // new
    if (!nfree || closure) {
      PyObject* locals = frame->f_locals ? frame->f_locals : frame->f_globals;  // borrowed
      PyObject* saved_bypass = t_eval.bypass_code;
      if (intercepting) t_eval.bypass_code = code;
      result = PyEval_EvalCodeEx(code, frame->f_globals, locals, nullptr, 0, nullptr, 0, nullptr, 0,
                                 nullptr, closure);
      t_eval.bypass_code = saved_bypass;
      Py_XDECREF(closure);
    }
  }
  Py_XDECREF(code);
  discard_unstarted_frame(ts, frame);
  return result;
}

PyObject* fail_unstarted_frame(PyThreadState* ts, FsFrame* frame) {
  discard_unstarted_frame(ts, frame);
  return nullptr;
}

}  // namespace framescope::py
