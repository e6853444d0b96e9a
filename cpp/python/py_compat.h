// cpp/python/py_compat.h: the one place that knows how CPython 3.10-3.13 lay out frames.
//
// Must be the first include of a translation unit that touches frames: it defines Py_BUILD_CORE
// to reach `_PyInterpreterFrame` (internal/pycore_frame.h), which the PEP 523 hook receives on
// 3.11+. Only pycore_frame.h is included: it compiles as C++ on 3.11-3.13, unlike
// pycore_pystate.h on 3.12 (C11 atomics). Translation units that use nanobind must not include
// this header.
#pragma once

#ifdef Py_PYTHON_H
#error "py_compat.h must be included before Python.h"
#endif
#define PY_SSIZE_T_CLEAN
#define Py_BUILD_CORE 1
#include <Python.h>
#include <frameobject.h>

#include "framescope/macros.h"

#if PY_VERSION_HEX >= 0x030E0000
#error "framescope supports CPython 3.10-3.13; re-audit frame internals for this version"
#endif

#if PY_VERSION_HEX >= 0x030B0000
#include <internal/pycore_frame.h>
#define FS_PY311 1
using FsFrame = _PyInterpreterFrame;
#else
#define FS_PY311 0
using FsFrame = PyFrameObject;
#endif
#define FS_PY312 (PY_VERSION_HEX >= 0x030C0000)
#define FS_PY313 (PY_VERSION_HEX >= 0x030D0000)

#if FS_PY313
// Runs the work pending on the thread as an eval-breaker check does (internal/pycore_ceval.h,
// exported on 3.13). Needs the GIL; -1 with an exception set when a handler raised.
extern "C" int _Py_HandlePending(PyThreadState* tstate);
#endif
#if !FS_PY311
// recursion_limit.c: the address of `interp`'s recursion limit (3.10).
extern "C" const int* framescope_recursion_limit_address(PyInterpreterState* interp);
#endif

namespace framescope::py {

using EvalFrameFunction = _PyFrameEvalFunction;

/// The code object a frame runs (borrowed). On 3.13 `f_executable` may be None for C-stack
/// entry frames; callers that may see those use frame_code_or_null().
inline PyCodeObject* frame_code(FsFrame* f) noexcept {
#if FS_PY313
  return reinterpret_cast<PyCodeObject*>(f->f_executable);
#else
  return f->f_code;
#endif
}

inline PyCodeObject* frame_code_or_null(FsFrame* f) noexcept {
  PyObject* c = reinterpret_cast<PyObject*>(frame_code(f));
  return c && PyCode_Check(c) ? reinterpret_cast<PyCodeObject*>(c) : nullptr;
}

/// The frame the thread is executing right now (borrowed, may be null). Called from the hook
/// before the new frame is linked in, this is the caller's frame.
inline const void* current_frame_address(PyThreadState* ts) noexcept {
#if FS_PY313
  return ts->current_frame;
#elif FS_PY311
  return ts->cframe ? ts->cframe->current_frame : nullptr;
#else
  return ts->frame;
#endif
}

#if FS_PY312
/// The calling thread's thread state, or null when it has none; never sets an exception. One
/// call into CPython (PyThreadState_Get() is the same call plus a check that aborts).
inline PyThreadState* current_thread_state() noexcept {
#if FS_PY313
  return PyThreadState_GetUnchecked();
#else
  return _PyThreadState_UncheckedGet();
#endif
}

/// The interpreter frame the thread is executing (borrowed, may be null).
inline FsFrame* current_interpreter_frame(PyThreadState* ts) noexcept {
#if FS_PY313
  return ts->current_frame;
#else
  return ts->cframe->current_frame;
#endif
}

/// True when the innermost frame of the thread is the C-stack entry frame of an evaluation
/// (owner FRAME_OWNED_BY_CSTACK): no Python frame of that evaluation is running. A call made
/// then comes from C while the evaluation's frame is being cleared after it returned or
/// unwound: 3.12+ unlink a dying frame *before* clearing it (GH-99729), so finalizers and weakref
/// callbacks run by freeing its locals are called from there.
FRAMESCOPE_ALWAYS_INLINE bool thread_runs_no_python_frame(PyThreadState* ts) noexcept {
  const FsFrame* f = current_interpreter_frame(ts);
  return f && f->owner == FRAME_OWNED_BY_CSTACK;
}

#if FS_PY313
/// True when work is pending on the thread that the next eval-breaker check runs (a collection,
/// signal handlers, pending calls, a GIL drop request...): the low bits of the thread's eval
/// breaker (_PY_EVAL_EVENTS_MASK of internal/pycore_ceval.h; the high bits are the
/// instrumentation version). One relaxed load.
FRAMESCOPE_ALWAYS_INLINE bool thread_has_pending_work(PyThreadState* ts) noexcept {
  constexpr uintptr_t kEvalEventsMask = (uintptr_t(1) << 8) - 1;
  return (__atomic_load_n(&ts->eval_breaker, __ATOMIC_RELAXED) & kEvalEventsMask) != 0;
}
#endif

/// True when `f` (running) was pushed by its caller's evaluation loop rather than evaluated
/// through the PEP 523 function: frames evaluated through it start under an entry frame.
inline bool frame_entered_inline(const FsFrame* f) noexcept {
  return f->previous && f->previous->owner != FRAME_OWNED_BY_CSTACK;
}
#endif

#if !FS_PY311
/// 3.10: where the interpreter keeps its recursion limit (interp->ceval.recursion_limit, which
/// sys.setrecursionlimit changes at any time): set when the frame hook is installed
/// (recursion_limit.c reads the address); a limit no depth reaches before that.
extern const int* g_recursion_limit;
#endif

/// True when the evaluation of a frame about to start on `ts` will fail CPython's recursion check
/// before its first instruction (RecursionError): such a frame never runs, and CPython's hooks
/// report nothing of it. Hot path: one compare of a field the evaluation loop uses anyway (3.10:
/// with the limit in force, as CPython's check compares, one load more).
FRAMESCOPE_ALWAYS_INLINE bool frame_start_fails_recursion_check(PyThreadState* ts) noexcept {
#if FS_PY312
  return FRAMESCOPE_UNLIKELY(ts->py_recursion_remaining <= 0) && !ts->recursion_headroom;
#elif FS_PY311
  return FRAMESCOPE_UNLIKELY(ts->recursion_remaining <= 0) && !ts->recursion_headroom;
#else
  return FRAMESCOPE_UNLIKELY(ts->recursion_depth >= *g_recursion_limit) && !ts->recursion_headroom;
#endif
}

#if !FS_PY312
/// Sets the thread's profile function without the audit event and reference juggling of
/// _PyEval_SetProfile, for a function with no object (the caller installed it once through
/// _PyEval_SetProfile). Keeps cframe->use_tracing consistent as CPython does. Needs the GIL.
inline void set_profile_function_raw(PyThreadState* ts, Py_tracefunc func) noexcept {
  ts->c_profilefunc = func;
  const bool on = ts->tracing == 0 && (ts->c_tracefunc != nullptr || func != nullptr);
#if FS_PY311
  ts->cframe->use_tracing = on ? 255 : 0;
#else
  ts->cframe->use_tracing = on ? 1 : 0;
#endif
}
#endif

/// The address that identifies a (running) frame object's interpreter frame, matching
/// current_frame_address() of calls made from it.
inline const void* frame_object_address(PyFrameObject* f) noexcept {
#if FS_PY311
  return f->f_frame;
#else
  return f;
#endif
}

/// True when a frame is a generator/coroutine being resumed rather than called.
inline bool frame_is_resumed(FsFrame* f) noexcept {
#if FS_PY311
  return f->owner == FRAME_OWNED_BY_GENERATOR;
#else
  return f->f_gen != nullptr;
#endif
}

/// The part of the C recursion counter a hooked Python->Python call uses up that the same call
/// without a hook does not (it is inlined then): _PyEval_EvalFrameDefault takes
/// PY_EVAL_C_STACK_UNITS (2) on 3.12 and 3.13. Measured by tests/test_deep_recursion.py. The hook
/// hands it back around the default evaluation and guards the real C stack itself (see
/// tracer/frame_hook.cpp). Measured by tests/tracer/test_robustness.py (deep recursion).
#if FS_PY312
constexpr int kCRecursionPerHookedCall = 2;
inline int& c_recursion_remaining(PyThreadState* ts) noexcept { return ts->c_recursion_remaining; }
#endif

/// Evaluates a frame that reached a PEP 523 hook with `eval` (the function the hook chains to).
/// On 3.12+ a hooked Python->Python call also goes through the C recursion counter
/// (Py_C_RECURSION_LIMIT, ~1500 on 3.12, which raises RecursionError ~800 Python frames deep
/// with any hook); this hands that share back so that Python code recurses as deep as it does
/// without a hook. Callers guard the real C stack themselves. Borrowed frame; new reference or
/// null.
template <typename EvalFn>
__attribute__((always_inline)) inline PyObject* eval_hooked_frame(EvalFn eval, PyThreadState* ts,
                                                                  FsFrame* frame, int throwflag) {
#if FS_PY312
  c_recursion_remaining(ts) += kCRecursionPerHookedCall;
  PyObject* result = eval(ts, frame, throwflag);
  c_recursion_remaining(ts) -= kCRecursionPerHookedCall;
  return result;
#else
  return eval(ts, frame, throwflag);
#endif
}

}  // namespace framescope::py
