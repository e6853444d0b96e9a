/* cpp/python/tracer/recursion_limit.c: where CPython 3.10 keeps the recursion limit, for the hook.
 *
 * On 3.10 the limit lives only in the interpreter state (interp->ceval.recursion_limit), whose
 * layout is in internal/pycore_interp.h, a header that compiles as C but not as C++ (C11
 * atomics): this file reads its address, so that the frame hook can compare a thread's depth
 * with the limit in force, as CPython's own check does, at the cost of one load. 3.11+ keep the
 * remaining depth in the thread state and need nothing from here. */
#include <patchlevel.h>

#if PY_VERSION_HEX < 0x030B0000
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_interp.h>

const int* framescope_recursion_limit_address(PyInterpreterState* interp) {
  return &interp->ceval.recursion_limit;
}
#else
#include <Python.h>

const int* framescope_recursion_limit_address(PyInterpreterState* interp) {
  (void)interp;
  return NULL; /* (not used) */
}
#endif
