// cpp/python/bench/bench_hooks.cpp: the limit hooks bench/ compares framescope with (not API).
//
// _core._noop_eval_hook(enable): a PEP 523 hook that only calls the default evaluation. Its cost
// is that of having any frame hook installed at all (Python->Python calls are no longer inlined),
// which no hook-based tracer can beat.
//
// _core._clock_floor_eval_hook(enable): the same plus what any tracer that times every call must
// do: read the clock at entry and at exit and store two 16-byte events. It writes into a small
// thread-local ring that stays in cache and checks nothing, so it is the floor for a tracer that
// records every call with timestamps (the clock reads dominate it).
//
// framescope never installs either. Both call the default evaluation directly (not through a
// pointer) through eval_hooked_frame(), as the tracer's chain() does, so they measure the same
// work.
#include "py_compat.h"  // first: Python.h with the internal frame headers

#include <new>

#include "framescope/clock.h"
#include "framescope/internal/raw_event.h"
#include "framescope/macros.h"

namespace framescope::py {

namespace {

FRAMESCOPE_ALWAYS_INLINE PyObject* eval_default(PyThreadState* ts, FsFrame* frame, int throwflag) {
  return eval_hooked_frame(_PyEval_EvalFrameDefault, ts, frame, throwflag);
}

PyObject* clock_floor_eval_frame(PyThreadState* ts, FsFrame* frame, int throwflag);

PyObject* noop_eval_frame(PyThreadState* ts, FsFrame* frame, int throwflag) {
  return eval_default(ts, frame, throwflag);
}

// 4096 events (64 KiB) per thread: stays in L2, so the stores cost what stores into a warm
// buffer cost, never a page fault or a cache miss. Reached through a pointer in static
// (initial-exec) TLS like the tracer's state: a dlopen()ed module's thread_local array would
// cost a __tls_get_addr call per access. The rings are never freed (benchmarks only).
constexpr uint32_t kFloorRingEvents = 4096;
__thread internal::RawEvent* t_floor_ring __attribute__((tls_model("initial-exec"))) = nullptr;
__thread uint32_t t_floor_pos __attribute__((tls_model("initial-exec"))) = 0;

FRAMESCOPE_NOINLINE PyObject* clock_floor_first_frame(PyThreadState* ts, FsFrame* frame,
                                                      int throwflag) {
  t_floor_ring = new (std::nothrow) internal::RawEvent[kFloorRingEvents];
  if (!t_floor_ring) return eval_default(ts, frame, throwflag);  // no memory: do not record
  return clock_floor_eval_frame(ts, frame, throwflag);
}

PyObject* clock_floor_eval_frame(PyThreadState* ts, FsFrame* frame, int throwflag) {
  internal::RawEvent* ring = t_floor_ring;
  if (FRAMESCOPE_UNLIKELY(!ring)) return clock_floor_first_frame(ts, frame, throwflag);
  uint32_t pos = t_floor_pos;
  ring[pos] = {now_ticks(), reinterpret_cast<uint64_t>(frame_code(frame))};
  t_floor_pos = (pos + 1) % kFloorRingEvents;
  PyObject* result = eval_default(ts, frame, throwflag);
  pos = t_floor_pos;
  ring[pos] = {now_ticks(), 0};
  t_floor_pos = (pos + 1) % kFloorRingEvents;
  return result;
}

// The hook installed by this file, if any (GIL-protected), and the function it replaced.
EvalFrameFunction g_installed = nullptr;
EvalFrameFunction g_previous = nullptr;

PyObject* set_limit_hook(PyObject* arg, EvalFrameFunction hook, const char* name) {
  int enable = PyObject_IsTrue(arg);
  if (enable < 0) return nullptr;
  PyInterpreterState* interp = PyInterpreterState_Get();
  EvalFrameFunction current = _PyInterpreterState_GetEvalFrameFunc(interp);
  if (enable) {
    if (current == hook) Py_RETURN_NONE;
    // Chaining to another hook would measure that hook too: a limit is only meaningful on top
    // of the default evaluation.
    if (current != _PyEval_EvalFrameDefault) {
      PyErr_Format(PyExc_RuntimeError, "%s: another PEP 523 frame hook is installed", name);
      return nullptr;
    }
    g_previous = current;
    g_installed = hook;
    _PyInterpreterState_SetEvalFrameFunc(interp, hook);
  } else if (g_installed == hook) {
    // Someone else may have replaced us meanwhile: then leave their function in place.
    if (current == hook) _PyInterpreterState_SetEvalFrameFunc(interp, g_previous);
    g_installed = nullptr;
  }
  Py_RETURN_NONE;
}

PyObject* noop_eval_hook(PyObject*, PyObject* arg) {
  return set_limit_hook(arg, noop_eval_frame, "_noop_eval_hook");
}

PyObject* clock_floor_eval_hook(PyObject*, PyObject* arg) {
  return set_limit_hook(arg, clock_floor_eval_frame, "_clock_floor_eval_hook");
}

PyMethodDef g_limit_hook_methods[] = {
    {"_noop_eval_hook", noop_eval_hook, METH_O,
     "_noop_eval_hook(enable: bool) -> None\n--\n\n"
     "Installs (True) or removes (False) a PEP 523 frame hook that only calls the default "
     "evaluation. For benchmarks: the lowest overhead any frame-hook tracer can have."},
    {"_clock_floor_eval_hook", clock_floor_eval_hook, METH_O,
     "_clock_floor_eval_hook(enable: bool) -> None\n--\n\n"
     "Installs (True) or removes (False) a PEP 523 frame hook that reads the clock at each "
     "call's entry and exit and stores two 16-byte events in a small thread-local ring. For "
     "benchmarks: the lowest overhead of any frame-hook tracer that times every call."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

/// Adds the limit hooks to the extension module. False with a Python exception set on error.
bool bench_hooks_init(PyObject* module) {
  return PyModule_AddFunctions(module, g_limit_hook_methods) == 0;
}

}  // namespace framescope::py
