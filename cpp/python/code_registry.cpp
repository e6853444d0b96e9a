// cpp/python/code_registry.cpp: the co_extra slot shared by the tracer and the eval_frame API.
#include <new>

#include "code_extra.h"

namespace framescope::py {

Py_ssize_t g_code_extra_index = -1;
void (*g_free_eval_state)(void* state) = nullptr;

namespace {
// Called by CPython (GIL held) when the code object dies or its extra is replaced.
void free_code_extra(void* p) {
  auto* extra = static_cast<CodeExtra*>(p);
  if (!extra) return;
  if (extra->eval_state && g_free_eval_state) g_free_eval_state(extra->eval_state);
  delete extra;
}
}  // namespace

bool init_code_extra() {
  if (g_code_extra_index >= 0) return true;
  g_code_extra_index = _PyEval_RequestCodeExtraIndex(free_code_extra);
  if (g_code_extra_index < 0) {
    PyErr_SetString(PyExc_RuntimeError, "framescope: no free co_extra index left");
    return false;
  }
  return true;
}

CodeExtra* get_or_create_code_extra(PyCodeObject* code) {
  if (CodeExtra* e = find_code_extra(code)) return e;
  auto* extra = new (std::nothrow) CodeExtra();
  if (!extra) {
    PyErr_NoMemory();
    return nullptr;
  }
  if (_PyCode_SetExtra(reinterpret_cast<PyObject*>(code), g_code_extra_index, extra) < 0) {
    delete extra;
    return nullptr;
  }
  return extra;
}

}  // namespace framescope::py
