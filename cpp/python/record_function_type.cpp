// cpp/python/record_function_type.cpp: framescope.record_function, a C type over RecordFunction.
//
// Written against the CPython C API directly (not nanobind): entering and leaving a range is the
// hot path of user annotations and must stay a few hundred nanoseconds.
#include "frame_hook.h"  // first: it includes Python.h with the internal headers

#include <structmember.h>

#include <new>
#include <vector>

#include "framescope/internal/thread_buffer.h"
#include "framescope/record_function.h"
#include "tracer_api.h"

namespace framescope::py {

namespace {

// Names handed to the core as "static" strings (no copy per range) are the UTF-8 buffers of the
// Python str objects; the str objects are pinned here until the session's trace is replayed.
std::vector<PyObject*> g_pinned_names;  // strong, GIL-protected

struct RecordFunctionObject {
  PyObject_HEAD PyObject* name;  // str
  PyObject* args;                // str or None
  uint64_t pinned_epoch;
  bool entered;
  alignas(RecordFunction) unsigned char storage[sizeof(RecordFunction)];

  RecordFunction* range() { return std::launder(reinterpret_cast<RecordFunction*>(storage)); }
};

int rf_init(PyObject* self_obj, PyObject* args, PyObject* kwargs) {
  auto* self = reinterpret_cast<RecordFunctionObject*>(self_obj);
  static const char* kwlist[] = {"name", "args", nullptr};
  PyObject* name = nullptr;
  PyObject* extra = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "U|O:record_function", const_cast<char**>(kwlist),
                                   &name, &extra)) {
    return -1;
  }
  if (extra != Py_None && !PyUnicode_Check(extra)) {
    PyErr_SetString(PyExc_TypeError, "record_function: args must be a str or None");
    return -1;
  }
  if (self->entered) {
    PyErr_SetString(PyExc_RuntimeError, "record_function: cannot re-initialise an entered range");
    return -1;
  }
  Py_INCREF(name);
  Py_XSETREF(self->name, name);
  Py_INCREF(extra);
  Py_XSETREF(self->args, extra);
  self->pinned_epoch = 0;
  return 0;
}

// record_function(name, args=None) through vectorcall: no argument tuple, no tp_new + tp_init
// round trip, no format parsing. Creating the object is most of what `with record_function(..)`
// costs when nothing records. Same checks and errors as rf_init.
PyObject* rf_vectorcall(PyObject* type, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (nargs > 2) {
    PyErr_Format(PyExc_TypeError, "record_function() takes at most 2 arguments (%zd given)", nargs);
    return nullptr;
  }
  PyObject* name = nargs > 0 ? args[0] : nullptr;   // borrowed
  PyObject* extra = nargs > 1 ? args[1] : nullptr;  // borrowed
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; i < nkw; ++i) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, i);  // borrowed
    PyObject** slot = nullptr;
    if (PyUnicode_CompareWithASCIIString(key, "name") == 0) {
      slot = &name;
    } else if (PyUnicode_CompareWithASCIIString(key, "args") == 0) {
      slot = &extra;
    } else {
      PyErr_Format(PyExc_TypeError, "record_function() got an unexpected keyword argument '%U'",
                   key);
      return nullptr;
    }
    if (*slot) {
      PyErr_Format(PyExc_TypeError, "record_function() got multiple values for argument '%U'", key);
      return nullptr;
    }
    *slot = args[nargs + i];
  }
  if (!name || !PyUnicode_Check(name)) {
    PyErr_SetString(PyExc_TypeError, "record_function() argument 'name' must be str");
    return nullptr;
  }
  if (!extra) extra = Py_None;
  if (extra != Py_None && !PyUnicode_Check(extra)) {
    PyErr_SetString(PyExc_TypeError, "record_function: args must be a str or None");
    return nullptr;
  }
  auto* t = reinterpret_cast<PyTypeObject*>(type);
  PyObject* obj = t->tp_alloc(t, 0);  // new, zero-filled
  if (!obj) return nullptr;
  auto* self = reinterpret_cast<RecordFunctionObject*>(obj);
  Py_INCREF(name);
  self->name = name;
  Py_INCREF(extra);
  self->args = extra;
  return obj;
}

void rf_dealloc(PyObject* self_obj) {
  auto* self = reinterpret_cast<RecordFunctionObject*>(self_obj);
  if (self->entered) {
    self->range()->end();
    self->range()->~RecordFunction();
    self->entered = false;
  }
  Py_XDECREF(self->name);
  Py_XDECREF(self->args);
  Py_TYPE(self_obj)->tp_free(self_obj);
}

PyObject* rf_enter(PyObject* self_obj, PyObject*) {
  auto* self = reinterpret_cast<RecordFunctionObject*>(self_obj);
  if (!self->name) {
    PyErr_SetString(PyExc_RuntimeError, "record_function was not initialised");
    return nullptr;
  }
  if (self->entered) {
    PyErr_SetString(PyExc_RuntimeError, "record_function is already entered");
    return nullptr;
  }
  RecordFunction* range = new (self->storage) RecordFunction(RecordScope::kUserScope);
  self->entered = true;
  if (range->is_active()) {
    anchor_outermost_range(PyThreadState_Get());
    Py_ssize_t size = 0;
    const char* utf8 = PyUnicode_AsUTF8AndSize(self->name, &size);
    if (!utf8) return nullptr;
    if (range->needs_inputs() && self->args != Py_None) {
      const char* a = PyUnicode_AsUTF8(self->args);
      if (!a) return nullptr;
      range->before(std::string_view(utf8, size_t(size)), {RangeInput::of_string(a)});
    } else if (size_t(size) == strlen(utf8)) {
      uint64_t epoch = internal::g_session_epoch.load(std::memory_order_relaxed);
      if (epoch && self->pinned_epoch != epoch) {
        Py_INCREF(self->name);
        g_pinned_names.push_back(self->name);
        self->pinned_epoch = epoch;
      }
      range->before(utf8);
    } else {
      range->before(std::string_view(utf8, size_t(size)));  // embedded NUL: copy
    }
  }
  Py_INCREF(self_obj);
  return self_obj;
}

PyObject* rf_exit(PyObject* self_obj, PyObject* const*, Py_ssize_t) {
  auto* self = reinterpret_cast<RecordFunctionObject*>(self_obj);
  if (self->entered) {
    self->range()->end();
    self->range()->~RecordFunction();
    self->entered = false;
  }
  Py_RETURN_FALSE;
}

// Used as a decorator: record_function("name")(fn) wraps fn (see framescope/_decorate.py).
PyObject* rf_call(PyObject* self_obj, PyObject* args, PyObject* kwargs) {
  auto* self = reinterpret_cast<RecordFunctionObject*>(self_obj);
  PyObject* fn = nullptr;
  if (kwargs && PyDict_GET_SIZE(kwargs)) {
    PyErr_SetString(PyExc_TypeError, "record_function(...) as a decorator takes one function");
    return nullptr;
  }
  if (!PyArg_ParseTuple(args, "O:record_function", &fn)) return nullptr;
  if (!PyCallable_Check(fn)) {
    PyErr_SetString(PyExc_TypeError, "record_function(...) decorates callables only");
    return nullptr;
  }
  PyObject* mod = PyImport_ImportModule("framescope._decorate");  // new
  if (!mod) return nullptr;
  PyObject* result = PyObject_CallMethod(mod, "decorate", "OOO", self->name, self->args, fn);
  Py_DECREF(mod);
  return result;
}

PyObject* rf_repr(PyObject* self_obj) {
  auto* self = reinterpret_cast<RecordFunctionObject*>(self_obj);
  return PyUnicode_FromFormat("record_function(%R)", self->name ? self->name : Py_None);
}

PyMethodDef kMethods[] = {
    {"__enter__", rf_enter, METH_NOARGS, "Start the range."},
    {"__exit__", (PyCFunction)(void (*)(void))rf_exit, METH_FASTCALL, "End the range."},
    {nullptr, nullptr, 0, nullptr},
};

PyMemberDef kMembers[] = {
    {"name", T_OBJECT, offsetof(RecordFunctionObject, name), READONLY, "Range name."},
    {"args", T_OBJECT, offsetof(RecordFunctionObject, args), READONLY, "Optional argument string."},
    {nullptr, 0, 0, 0, nullptr},
};

PyType_Slot kSlots[] = {
    {Py_tp_init, reinterpret_cast<void*>(rf_init)},
    {Py_tp_dealloc, reinterpret_cast<void*>(rf_dealloc)},
    {Py_tp_methods, kMethods},
    {Py_tp_members, kMembers},
    {Py_tp_call, reinterpret_cast<void*>(rf_call)},
    {Py_tp_repr, reinterpret_cast<void*>(rf_repr)},
    {Py_tp_new, reinterpret_cast<void*>(PyType_GenericNew)},
    {Py_tp_doc,
     const_cast<char*>("record_function(name, args=None)\n\nA user range recorded through the C++ "
                       "core: a context manager, or a decorator.")},
    {0, nullptr},
};

PyType_Spec kSpec = {"framescope._core.record_function", sizeof(RecordFunctionObject), 0,
                     Py_TPFLAGS_DEFAULT, kSlots};

}  // namespace

PyObject* g_record_function_type = nullptr;  // borrowed from the module (lives as long)

bool is_record_function_method(PyObject* callable) {
  if (!PyCFunction_Check(callable)) return false;
  PyObject* self = PyCFunction_GET_SELF(callable);  // borrowed
  return self && reinterpret_cast<PyObject*>(Py_TYPE(self)) == g_record_function_type;
}

bool record_function_init(PyObject* module) {
  PyObject* type = PyType_FromSpec(&kSpec);
  if (!type) return false;
  // Calls of a type go through PyType_Type's vectorcall slot, which reads the called type's
  // tp_vectorcall (3.9+); PyType_Slot has no entry for it before 3.14, so it is set here.
  reinterpret_cast<PyTypeObject*>(type)->tp_vectorcall = rf_vectorcall;
  g_record_function_type = type;
  if (PyModule_AddObject(module, "record_function", type) < 0) {
    Py_DECREF(type);
    return false;
  }
  return true;
}

void release_record_function_names() {
  std::vector<PyObject*> names;
  names.swap(g_pinned_names);
  for (PyObject* n : names) Py_DECREF(n);
}

}  // namespace framescope::py
