// cpp/python/noop_hook.cpp: _core._noop_eval_hook, a PEP 523 hook that does nothing (benchmarks).
//
// bench/tracer_overhead.py measures it as the "limit" column: the cost of having any frame hook
// installed at all (Python->Python calls are no longer inlined), which no hook-based tracer can
// beat. It is not part of the public API and is never installed by framescope itself.
#include "py_compat.h"  // first: Python.h with the internal frame headers

namespace framescope::py {

namespace {

EvalFrameFunction g_noop_previous = nullptr;  // the function to restore on disable
bool g_noop_installed = false;                // GIL-protected

// Calls the default evaluation directly (not through a pointer) so that the hook costs what
// a minimal hook costs. On 3.12+ a hooked Python->Python call also goes through the C recursion
// counter; handing those units back keeps deep recursion working exactly as the tracer's
// chain() does, so the limit column measures the same work.
PyObject* noop_eval_frame(PyThreadState* ts, FsFrame* frame, int throwflag) {
#if FS_PY312
  c_recursion_remaining(ts) += kCRecursionPerHookedCall;
  PyObject* result = _PyEval_EvalFrameDefault(ts, frame, throwflag);
  c_recursion_remaining(ts) -= kCRecursionPerHookedCall;
  return result;
#else
  return _PyEval_EvalFrameDefault(ts, frame, throwflag);
#endif
}

PyObject* noop_eval_hook(PyObject*, PyObject* arg) {
  int enable = PyObject_IsTrue(arg);
  if (enable < 0) return nullptr;
  PyInterpreterState* interp = PyInterpreterState_Get();
  EvalFrameFunction current = _PyInterpreterState_GetEvalFrameFunc(interp);
  if (enable && !g_noop_installed) {
    // Chaining to another hook would measure that hook too: the limit is only meaningful on
    // top of the default evaluation.
    if (current != _PyEval_EvalFrameDefault) {
      PyErr_SetString(PyExc_RuntimeError,
                      "_noop_eval_hook: another PEP 523 frame hook is installed");
      return nullptr;
    }
    g_noop_previous = current;
    _PyInterpreterState_SetEvalFrameFunc(interp, noop_eval_frame);
    g_noop_installed = true;
  } else if (!enable && g_noop_installed) {
    // Someone else may have replaced us meanwhile: then leave their function in place.
    if (current == noop_eval_frame) _PyInterpreterState_SetEvalFrameFunc(interp, g_noop_previous);
    g_noop_installed = false;
  }
  Py_RETURN_NONE;
}

PyMethodDef g_noop_methods[] = {
    {"_noop_eval_hook", noop_eval_hook, METH_O,
     "_noop_eval_hook(enable: bool) -> None\n--\n\n"
     "Installs (True) or removes (False) a PEP 523 frame hook that only calls the default "
     "evaluation. For benchmarks: the lowest overhead any frame-hook tracer can have."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

/// Adds _noop_eval_hook to the extension module. False with a Python exception set on error.
bool noop_hook_init(PyObject* module) { return PyModule_AddFunctions(module, g_noop_methods) == 0; }

}  // namespace framescope::py
