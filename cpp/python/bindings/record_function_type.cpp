// cpp/python/bindings/record_function_type.cpp: framescope.record_function, a C type.
//
// Written against the CPython C API directly (not nanobind): entering and leaving a range is the
// hot path of user annotations and must stay a few hundred nanoseconds.
#include "tracer/frame_hook.h"  // first: it includes Python.h with the internal headers

#include <structmember.h>

#include <new>
#include <unordered_set>
#include <vector>

#include "bindings/record_function_internal.h"
#include "framescope/internal/thread_buffer.h"
#include "framescope/record_function.h"
#include "py_text.h"
#include "tracer/memory_hooks.h"
#include "tracer/tracer_api.h"

namespace framescope::py {

PyObject* g_record_function_type = nullptr;  // borrowed from the module (lives as long)

namespace {

// Names handed to the core as "static" strings (no copy per range) are the UTF-8 buffers of the
// Python str objects; the str objects are pinned here until the session's trace is replayed.
std::vector<PyObject*> g_pinned_names;       // strong, GIL-protected
std::unordered_set<PyObject*> g_pinned_set;  // the same objects, pinned once each

// Pins `name` for the session, its bytes counted against the session's memory limit (a name per
// request, f"req-{k}", is memory the session holds). False when the limit leaves no room, or
// the thread does not record (at the limit with the stop policy): the caller then passes the
// name as a copy, which goes (dropped or recycled) with its event.
bool pin_name(PyObject* name, Py_ssize_t size) {
  if (g_pinned_set.count(name)) return true;
  internal::ThreadBuffer* b = internal::current_buffer();
  // The str object, the set's node and the vector's slot.
  if (!b || !b->try_charge(sizeof(PyASCIIObject) + size_t(size) + 64)) return false;
  try {
    g_pinned_set.insert(name);
    g_pinned_names.push_back(name);
  } catch (...) {
    g_pinned_set.erase(name);
    return false;
  }
  Py_INCREF(name);
  return true;
}

struct RecordFunctionObject {
  PyObject ob_base;  // PyObject_HEAD
  PyObject* name;    // str
  PyObject* args;    // str or None
  RangeNameCache name_cache;
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
  self->name_cache = RangeNameCache{};
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

PyObject* rf_enter(PyObject* self_obj) {
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
  if (range->is_active() && !begin_python_range(*range, self->name, self->args, self->name_cache)) {
    return nullptr;  // the dealloc or a later __exit__ ends the (unstarted) range
  }
  Py_INCREF(self_obj);
  return self_obj;
}

}  // namespace

bool begin_python_range(RecordFunction& range, PyObject* name, PyObject* args,
                        RangeNameCache& cache) {
  anchor_outermost_range();
  flush_thread_allocations();  // what was allocated before the range is not the range's
  Py_ssize_t size = 0;
  const char* utf8 = PyUnicode_AsUTF8AndSize(name, &size);  // cached by the str
  if (FRAMESCOPE_UNLIKELY(!utf8)) {
    // Lone surrogates ("w\udcff"): the name is kept with U+FFFD in their place (a copy).
    PyErr_Clear();
    cache.name_is_c_string = -1;
    const std::string repaired = utf8_of(name);
    if (range.needs_inputs() && args != Py_None) {
      range.before(repaired, {RangeInput::of_string(utf8_of(args))});
    } else {
      range.before(std::string_view(repaired));
    }
    return true;
  }
  if (FRAMESCOPE_UNLIKELY(cache.name_is_c_string == 0)) {
    cache.name_is_c_string = size_t(size) == strlen(utf8) ? 1 : -1;
  }
  if (range.needs_inputs() && args != Py_None) {
    // The whole text, NUL characters and lone surrogates included (utf8_of keeps NULs).
    range.before(std::string_view(utf8, size_t(size)), {RangeInput::of_string(utf8_of(args))});
  } else if (cache.name_is_c_string > 0) {
    uint64_t epoch = internal::g_session_epoch.load(std::memory_order_relaxed);
    if (epoch && cache.pinned_epoch != epoch) {
      if (!pin_name(name, size)) {
        range.before(std::string_view(utf8, size_t(size)));  // a copy, counted with its event
        return true;
      }
      cache.pinned_epoch = epoch;
    }
    range.before(utf8);
  } else {
    range.before(std::string_view(utf8, size_t(size)));  // embedded NUL: copy
  }
  return true;
}

namespace {

PyObject* rf_exit(PyObject* self_obj) {
  auto* self = reinterpret_cast<RecordFunctionObject*>(self_obj);
  if (self->entered) {
    flush_thread_allocations();  // charged to the range
    self->range()->end();
    self->range()->~RecordFunction();
    self->entered = false;
  }
  Py_RETURN_FALSE;
}

// ---- __enter__ / __exit__ without bound-method objects --------------------------------------
//
// Up to 3.13 a `with` statement looks __enter__ and __exit__ up through their descriptors, so a
// method defined in tp_methods costs two bound builtin-method objects per `with`, each a
// GC-tracked allocation: about a third of what `with record_function(...)` costs. Here the two
// names are descriptors of our own whose __get__ returns a small untracked object from a free
// list, called through vectorcall.

enum class RangeMethod : uint8_t { kEnter, kExit };

struct RangeMethodDescr {  // type(record_function).__dict__["__enter__"] / ["__exit__"]
  PyObject ob_base;        // PyObject_HEAD
  RangeMethod which;
  vectorcallfunc vectorcall;  // calls the method unbound: descr(self, *args)
};

struct BoundRangeMethod {       // record_function(...).__enter__ / .__exit__
  PyObject ob_base;             // PyObject_HEAD
  RecordFunctionObject* owner;  // strong
  RangeMethod which;
  vectorcallfunc vectorcall;
};

PyTypeObject* g_descr_type = nullptr;  // strong, for the process
PyTypeObject* g_bound_type = nullptr;  // strong, for the process

// Free list of BoundRangeMethod memory (GIL-protected). A `with` needs two at a time; nested
// ranges a few more.
constexpr int kBoundFreeListMax = 16;
BoundRangeMethod* g_bound_free[kBoundFreeListMax];
int g_bound_free_count = 0;

PyObject* call_range_method(RangeMethod which, PyObject* self, Py_ssize_t nargs) {
  if (which == RangeMethod::kEnter) {
    if (nargs != 0) {
      PyErr_Format(PyExc_TypeError, "__enter__() takes no arguments (%zd given)", nargs);
      return nullptr;
    }
    return rf_enter(self);
  }
  if (nargs > 3) {
    PyErr_Format(PyExc_TypeError, "__exit__() takes at most 3 arguments (%zd given)", nargs);
    return nullptr;
  }
  return rf_exit(self);
}

bool no_keywords(const char* what, PyObject* kwnames) {
  if (kwnames && PyTuple_GET_SIZE(kwnames)) {
    PyErr_Format(PyExc_TypeError, "%s() takes no keyword arguments", what);
    return false;
  }
  return true;
}

const char* method_name(RangeMethod which) {
  return which == RangeMethod::kEnter ? "__enter__" : "__exit__";
}

PyObject* bound_vectorcall(PyObject* callable, PyObject* const*, size_t nargsf, PyObject* kwnames) {
  auto* bound = reinterpret_cast<BoundRangeMethod*>(callable);
  if (!no_keywords(method_name(bound->which), kwnames)) return nullptr;
  return call_range_method(bound->which, reinterpret_cast<PyObject*>(bound->owner),
                           PyVectorcall_NARGS(nargsf));
}

void bound_dealloc(PyObject* obj) {
  auto* bound = reinterpret_cast<BoundRangeMethod*>(obj);
  Py_CLEAR(bound->owner);
  PyTypeObject* type = Py_TYPE(obj);
  if (g_bound_free_count < kBoundFreeListMax) {
    g_bound_free[g_bound_free_count++] = bound;
  } else {
    PyObject_Free(obj);
  }
  Py_DECREF(type);  // heap type: every instance holds a reference (PyObject_Init takes it)
}

PyObject* bound_repr(PyObject* obj) {
  auto* bound = reinterpret_cast<BoundRangeMethod*>(obj);
  return PyUnicode_FromFormat("<bound method record_function.%s of %R>", method_name(bound->which),
                              bound->owner);
}

PyObject* descr_get(PyObject* descr_obj, PyObject* obj, PyObject*) {
  auto* descr = reinterpret_cast<RangeMethodDescr*>(descr_obj);
  if (!obj || obj == Py_None) {  // looked up on the class: the descriptor itself
    Py_INCREF(descr_obj);
    return descr_obj;
  }
  if (Py_TYPE(obj) != reinterpret_cast<PyTypeObject*>(g_record_function_type)) {
    PyErr_Format(PyExc_TypeError, "descriptor '%s' needs a record_function, not %.100s",
                 method_name(descr->which), Py_TYPE(obj)->tp_name);
    return nullptr;
  }
  BoundRangeMethod* bound;
  if (g_bound_free_count > 0) {
    bound = g_bound_free[--g_bound_free_count];
    PyObject_Init(reinterpret_cast<PyObject*>(bound), g_bound_type);  // as PyObject_New does
  } else {
    bound = PyObject_New(BoundRangeMethod, g_bound_type);
    if (!bound) return nullptr;
  }
  Py_INCREF(obj);
  bound->owner = reinterpret_cast<RecordFunctionObject*>(obj);
  bound->which = descr->which;
  bound->vectorcall = bound_vectorcall;
  return reinterpret_cast<PyObject*>(bound);
}

PyObject* descr_vectorcall(PyObject* callable, PyObject* const* args, size_t nargsf,
                           PyObject* kwnames) {
  auto* descr = reinterpret_cast<RangeMethodDescr*>(callable);
  const char* name = method_name(descr->which);
  if (!no_keywords(name, kwnames)) return nullptr;
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (nargs < 1 || Py_TYPE(args[0]) != reinterpret_cast<PyTypeObject*>(g_record_function_type)) {
    PyErr_Format(PyExc_TypeError, "descriptor '%s' needs a record_function argument", name);
    return nullptr;
  }
  return call_range_method(descr->which, args[0], nargs - 1);
}

PyObject* descr_repr(PyObject* obj) {
  return PyUnicode_FromFormat("<method '%s' of 'record_function' objects>",
                              method_name(reinterpret_cast<RangeMethodDescr*>(obj)->which));
}

void descr_dealloc(PyObject* obj) {
  PyTypeObject* type = Py_TYPE(obj);
  PyObject_Free(obj);
  Py_DECREF(type);
}

PyMemberDef kBoundMembers[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(BoundRangeMethod, vectorcall), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr},
};
PyMemberDef kDescrMembers[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(RangeMethodDescr, vectorcall), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr},
};

PyType_Slot kBoundSlots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(bound_dealloc)},
    {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
    {Py_tp_repr, reinterpret_cast<void*>(bound_repr)},
    {Py_tp_members, kBoundMembers},
    {0, nullptr},
};
PyType_Spec kBoundSpec = {"framescope._core.record_function_method", sizeof(BoundRangeMethod), 0,
                          Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL, kBoundSlots};

PyType_Slot kDescrSlots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(descr_dealloc)},
    {Py_tp_descr_get, reinterpret_cast<void*>(descr_get)},
    {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
    {Py_tp_repr, reinterpret_cast<void*>(descr_repr)},
    {Py_tp_members, kDescrMembers},
    {0, nullptr},
};
PyType_Spec kDescrSpec = {"framescope._core.record_function_method_descriptor",
                          sizeof(RangeMethodDescr), 0,
                          Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL, kDescrSlots};

// Puts the __enter__ and __exit__ descriptors into the record_function type's dict.
bool add_range_methods(PyTypeObject* type) {
  g_bound_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kBoundSpec));
  g_descr_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kDescrSpec));
  if (!g_bound_type || !g_descr_type) return false;
  for (RangeMethod which : {RangeMethod::kEnter, RangeMethod::kExit}) {
    RangeMethodDescr* descr = PyObject_New(RangeMethodDescr, g_descr_type);
    if (!descr) return false;
    descr->which = which;
    descr->vectorcall = descr_vectorcall;
    int rc =
        PyDict_SetItemString(type->tp_dict, method_name(which), reinterpret_cast<PyObject*>(descr));
    Py_DECREF(descr);
    if (rc < 0) return false;
  }
  PyType_Modified(type);
  return true;
}

// Used as a decorator: record_function("name")(fn) wraps fn (record_function_decorator.cpp).
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
  if (!self->name) {
    PyErr_SetString(PyExc_RuntimeError, "record_function was not initialised");
    return nullptr;
  }
  return make_range_wrapper(self->name, self->args, fn);
}

PyObject* rf_repr(PyObject* self_obj) {
  auto* self = reinterpret_cast<RecordFunctionObject*>(self_obj);
  return PyUnicode_FromFormat("record_function(%R)", self->name ? self->name : Py_None);
}

PyMemberDef kMembers[] = {
    {"name", T_OBJECT, offsetof(RecordFunctionObject, name), READONLY, "Range name."},
    {"args", T_OBJECT, offsetof(RecordFunctionObject, args), READONLY, "Optional argument string."},
    {nullptr, 0, 0, 0, nullptr},
};

PyType_Slot kSlots[] = {
    {Py_tp_init, reinterpret_cast<void*>(rf_init)},
    {Py_tp_dealloc, reinterpret_cast<void*>(rf_dealloc)},
    {Py_tp_members, kMembers},
    {Py_tp_call, reinterpret_cast<void*>(rf_call)},
    {Py_tp_repr, reinterpret_cast<void*>(rf_repr)},
    {Py_tp_new, reinterpret_cast<void*>(PyType_GenericNew)},
    {Py_tp_doc, const_cast<char*>(
                    "record_function(name, args=None)\n--\n\nA user range recorded through the C++ "
                    "core: a context manager, or a decorator.")},
    {0, nullptr},
};

PyType_Spec kSpec = {"framescope._core.record_function", sizeof(RecordFunctionObject), 0,
                     Py_TPFLAGS_DEFAULT, kSlots};

}  // namespace

bool is_record_function_method(PyObject* callable) {
  PyTypeObject* type = Py_TYPE(callable);
  return type == g_bound_type || type == g_descr_type || is_range_wrapper(callable);
}

bool record_function_init(PyObject* module) {
  PyObject* type = PyType_FromSpec(&kSpec);
  if (!type) return false;
  // Calls of a type go through PyType_Type's vectorcall slot, which reads the called type's
  // tp_vectorcall (3.9+); PyType_Slot has no entry for it before 3.14, so it is set here.
  reinterpret_cast<PyTypeObject*>(type)->tp_vectorcall = rf_vectorcall;
  g_record_function_type = type;
  if (!add_range_methods(reinterpret_cast<PyTypeObject*>(type)) || !range_wrapper_init()) {
    Py_DECREF(type);
    return false;
  }
  if (PyModule_AddObject(module, "record_function", type) < 0) {
    Py_DECREF(type);
    return false;
  }
  return true;
}

void release_record_function_names() {
  std::vector<PyObject*> names;
  names.swap(g_pinned_names);
  g_pinned_set.clear();
  for (PyObject* n : names) Py_DECREF(n);
}

}  // namespace framescope::py
