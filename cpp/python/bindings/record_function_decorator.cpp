// cpp/python/bindings/record_function_decorator.cpp: @record_function("name"): a C wrapper that
// runs the decorated callable inside a range.
//
// In C rather than a Python closure: a call then costs one range and one vectorcall, and the
// trace shows the range directly around the callee's frame, with no wrapper frame between.
#include "py_compat.h"  // first: Python.h

#include <structmember.h>

#include "bindings/record_function_internal.h"
#include "tracer/memory_hooks.h"

namespace framescope::py {

namespace {

struct RangeWrapper {
  PyObject ob_base;  // PyObject_HEAD
  PyObject* fn;      // the decorated callable (strong)
  PyObject* name;    // str (strong)
  PyObject* args;    // str or None (strong)
  PyObject* dict;    // __dict__: what functools.update_wrapper copies (strong or null)
  PyObject* weakrefs;
  vectorcallfunc vectorcall;
  RangeNameCache name_cache;
};

PyTypeObject* g_wrapper_type = nullptr;  // strong, for the process

PyObject* wrapper_vectorcall(PyObject* self_obj, PyObject* const* args, size_t nargsf,
                             PyObject* kwnames) {
  auto* self = reinterpret_cast<RangeWrapper*>(self_obj);
  RecordFunction range(RecordScope::kUserScope);  // ends when this returns
  if (range.is_active() && !begin_python_range(range, self->name, self->args, self->name_cache)) {
    return nullptr;
  }
  PyObject* result = PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
  flush_thread_allocations();  // charged to the range, which ends here
  return result;
}

// Bound like a function: looked up on an instance, the wrapper becomes a method of it.
PyObject* wrapper_descr_get(PyObject* self, PyObject* obj, PyObject*) {
  if (!obj || obj == Py_None) {
    Py_INCREF(self);
    return self;
  }
  return PyMethod_New(self, obj);
}

int wrapper_traverse(PyObject* self_obj, visitproc visit, void* arg) {
  auto* self = reinterpret_cast<RangeWrapper*>(self_obj);
  Py_VISIT(Py_TYPE(self_obj));
  Py_VISIT(self->fn);
  Py_VISIT(self->name);
  Py_VISIT(self->args);
  Py_VISIT(self->dict);
  return 0;
}

int wrapper_clear(PyObject* self_obj) {
  auto* self = reinterpret_cast<RangeWrapper*>(self_obj);
  Py_CLEAR(self->fn);
  Py_CLEAR(self->name);
  Py_CLEAR(self->args);
  Py_CLEAR(self->dict);
  return 0;
}

void wrapper_dealloc(PyObject* self_obj) {
  PyTypeObject* type = Py_TYPE(self_obj);
  PyObject_GC_UnTrack(self_obj);
  if (reinterpret_cast<RangeWrapper*>(self_obj)->weakrefs) PyObject_ClearWeakRefs(self_obj);
  wrapper_clear(self_obj);
  PyObject_GC_Del(self_obj);
  Py_DECREF(type);
}

PyObject* wrapper_repr(PyObject* self_obj) {
  auto* self = reinterpret_cast<RangeWrapper*>(self_obj);
  return PyUnicode_FromFormat("<record_function(%R) wrapper of %R>", self->name, self->fn);
}

PyMemberDef kWrapperMembers[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(RangeWrapper, vectorcall), READONLY, nullptr},
    {"__dictoffset__", T_PYSSIZET, offsetof(RangeWrapper, dict), READONLY, nullptr},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(RangeWrapper, weakrefs), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr},
};

PyGetSetDef kWrapperGetSet[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyType_Slot kWrapperSlots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(wrapper_dealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(wrapper_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(wrapper_clear)},
    {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
    {Py_tp_descr_get, reinterpret_cast<void*>(wrapper_descr_get)},
    {Py_tp_repr, reinterpret_cast<void*>(wrapper_repr)},
    {Py_tp_members, kWrapperMembers},
    {Py_tp_getset, kWrapperGetSet},
    {Py_tp_doc, const_cast<char*>("A callable decorated with framescope.record_function.")},
    {0, nullptr},
};

PyType_Spec kWrapperSpec = {"framescope._core.record_function_wrapper", sizeof(RangeWrapper), 0,
                            Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
                            kWrapperSlots};

}  // namespace

PyObject* make_range_wrapper(PyObject* name, PyObject* args, PyObject* fn) {
  auto* self = PyObject_GC_New(RangeWrapper, g_wrapper_type);
  if (!self) return nullptr;
  Py_INCREF(fn);
  self->fn = fn;
  Py_INCREF(name);
  self->name = name;
  Py_INCREF(args);
  self->args = args;
  self->dict = nullptr;
  self->weakrefs = nullptr;
  self->vectorcall = wrapper_vectorcall;
  self->name_cache = RangeNameCache{};
  PyObject_GC_Track(reinterpret_cast<PyObject*>(self));
  auto* wrapper = reinterpret_cast<PyObject*>(self);
  // __name__, __qualname__, __doc__, __module__, __dict__ and __wrapped__ as functools.wraps
  // sets them, so that help(), inspect.signature() and pickling by name see the function.
  PyObject* functools = PyImport_ImportModule("functools");  // new
  PyObject* done =
      functools ? PyObject_CallMethod(functools, "update_wrapper", "OO", wrapper, fn) : nullptr;
  Py_XDECREF(functools);
  if (!done) {
    Py_DECREF(wrapper);
    return nullptr;
  }
  Py_DECREF(done);
  return wrapper;
}

bool range_wrapper_init() {
  g_wrapper_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kWrapperSpec));
  return g_wrapper_type != nullptr;
}

bool is_range_wrapper(PyObject* obj) { return g_wrapper_type && Py_TYPE(obj) == g_wrapper_type; }

}  // namespace framescope::py
