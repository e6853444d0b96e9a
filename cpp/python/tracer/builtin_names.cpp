// cpp/python/tracer/builtin_names.cpp: keys and names of the builtins the fallback backends record.
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tracer/fallback_internal.h"
#include "tracer/tracer_api.h"

namespace framescope::py::fallback {

namespace {

// C-function symbols of this session, resolved when first seen (the callable is at hand then).
// Types used as keys are kept alive until release.
std::unordered_map<uint64_t, Symbol> g_c_symbols;
// Keys of callables of framescope's own extension (named "framescope...."): calls the program
// makes into framescope (a profile's C-written stop, record_function) are not its C calls.
std::unordered_set<uint64_t> g_own_c_keys;
std::vector<PyObject*> g_c_held;  // strong refs
// framescope._core's nanobind functions (mark, record_memory, is_enabled...). Their calls are
// keyed by their type, nanobind.nb_func (`nanobind.nb_func.__call__`), which other nanobind
// extensions share: told apart by identity. Strong refs, for the process's life.
uint64_t g_nb_func_key = 0;
std::vector<PyObject*> g_own_nb_funcs;

// A type as builtin names show it: `module.qualname`, or `qualname` for builtins (list,
// functools.partial, _thread.lock, mymodule.MyList). For a static type that is its tp_name.
std::string type_name(PyTypeObject* t) {
  if (!(t->tp_flags & Py_TPFLAGS_HEAPTYPE)) return t->tp_name ? t->tp_name : "?";
  auto* ht = reinterpret_cast<PyHeapTypeObject*>(t);
  const char* qualname = ht->ht_qualname ? PyUnicode_AsUTF8(ht->ht_qualname) : nullptr;
  if (!qualname) {
    PyErr_Clear();
    return t->tp_name ? t->tp_name : "?";
  }
  PyObject* module = t->tp_dict ? PyDict_GetItemString(t->tp_dict, "__module__") : nullptr;
  const char* m = module && PyUnicode_Check(module) ? PyUnicode_AsUTF8(module) : nullptr;
  if (!m) PyErr_Clear();
  if (!m || !strcmp(m, "builtins")) return qualname;
  return std::string(m) + "." + qualname;
}

// The dict of type `t` (new reference; static builtin types keep it per interpreter on 3.12+).
PyObject* type_dict(PyTypeObject* t) {
#if FS_PY312
  return PyType_GetDict(t);
#else
  return Py_XNewRef(t->tp_dict);
#endif
}

// True when `entry` (a type's dict entry) is the builtin method `ml`.
bool is_method_entry(PyObject* entry, PyMethodDef* ml) {
  if (Py_IS_TYPE(entry, &PyMethodDescr_Type) || Py_IS_TYPE(entry, &PyClassMethodDescr_Type)) {
    return reinterpret_cast<PyMethodDescrObject*>(entry)->d_method == ml;
  }
  return PyCFunction_Check(entry) && reinterpret_cast<PyCFunctionObject*>(entry)->m_ml == ml;
}

// The class whose builtin method `ml` is bound to `self`: in the MRO of self's type (of self
// itself when it is a type: classmethods, __new__), the first that holds `ml` under its name, or
// else the first that has the name. Not the receiver's type: `MyList().append` is list.append.
PyTypeObject* defining_type(PyObject* self, PyMethodDef* ml) {
  PyTypeObject* start = PyType_Check(self) ? reinterpret_cast<PyTypeObject*>(self) : Py_TYPE(self);
  PyObject* mro = start->tp_mro;  // borrowed
  if (!mro || !PyTuple_Check(mro)) return start;
  PyTypeObject* by_name = nullptr;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); ++i) {
    auto* t = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i));
    PyObject* dict = type_dict(t);                                               // new
    PyObject* entry = dict ? PyDict_GetItemString(dict, ml->ml_name) : nullptr;  // borrowed
    const bool same = entry && is_method_entry(entry, ml);
    if (entry && !by_name) by_name = t;
    Py_XDECREF(dict);
    if (same) return t;
  }
  return by_name ? by_name : start;
}

// The PyMethodDef of every type's `__new__` (CPython's tp_new wrapper): one static definition
// bound to each type, so unlike other builtin methods it cannot key a name by itself.
PyMethodDef* tp_new_method_def() {
  static PyMethodDef* def = [] {
    PyObject* dict = type_dict(&PyTuple_Type);                                 // new
    PyObject* entry = dict ? PyDict_GetItemString(dict, "__new__") : nullptr;  // borrowed
    PyMethodDef* ml = entry && PyCFunction_Check(entry)
                          ? reinterpret_cast<PyCFunctionObject*>(entry)->m_ml
                          : nullptr;
    Py_XDECREF(dict);
    return ml;
  }();
  return def;
}

}  // namespace

bool is_python_callable(PyObject* callable) {
  if (PyMethod_Check(callable)) callable = PyMethod_GET_FUNCTION(callable);  // borrowed
  return PyFunction_Check(callable) || py::is_record_function_method(callable);
}

// Key of a builtin callable, named on first sight by what is called (docs/tracing.md). Keys: the
// PyMethodDef of builtin functions and methods, bound or as descriptors (static for the
// defining module's life); a type | 2 for calls of the type, | 4 for calls of its instances, | 6
// for calls of its `__new__` (`tuple.__new__(cls)`, `ref.__new__(cls, obj)`).
uint64_t c_function_key(PyObject* callable) {
  uint64_t key;
  std::string name;
  PyObject* hold = nullptr;
  if (PyCFunction_Check(callable) &&
      reinterpret_cast<PyCFunctionObject*>(callable)->m_ml == tp_new_method_def() &&
      reinterpret_cast<PyCFunctionObject*>(callable)->m_self &&
      PyType_Check(reinterpret_cast<PyCFunctionObject*>(callable)->m_self)) {
    auto* t =
        reinterpret_cast<PyTypeObject*>(reinterpret_cast<PyCFunctionObject*>(callable)->m_self);
    key = reinterpret_cast<uint64_t>(t) | 6;
    if (g_c_symbols.count(key)) return key;
    name = type_name(t) + ".__new__";
    hold = reinterpret_cast<PyObject*>(t);
  } else if (PyCFunction_Check(callable)) {
    auto* f = reinterpret_cast<PyCFunctionObject*>(callable);
    key = reinterpret_cast<uint64_t>(f->m_ml);
    if (g_c_symbols.count(key)) return key;
    PyObject* self = f->m_self;  // borrowed
    if (!self || PyModule_Check(self)) {
      const char* module = self ? PyModule_GetName(self) : nullptr;
      if (self && !module) PyErr_Clear();
      name = module ? std::string(module) + "." + f->m_ml->ml_name : f->m_ml->ml_name;
    } else {
      name = type_name(defining_type(self, f->m_ml)) + "." + f->m_ml->ml_name;
    }
  } else if (Py_IS_TYPE(callable, &PyMethodDescr_Type) ||
             Py_IS_TYPE(callable, &PyClassMethodDescr_Type)) {
    auto* d = reinterpret_cast<PyMethodDescrObject*>(callable);
    key = reinterpret_cast<uint64_t>(d->d_method);
    if (g_c_symbols.count(key)) return key;
    name = type_name(PyDescr_TYPE(d)) + "." + d->d_method->ml_name;
  } else {
    const bool is_type = PyType_Check(callable);
    PyTypeObject* t = is_type ? reinterpret_cast<PyTypeObject*>(callable) : Py_TYPE(callable);
    key = reinterpret_cast<uint64_t>(t) | (is_type ? 2 : 4);
    if (g_c_symbols.count(key)) return key;
    name = is_type ? type_name(t) : type_name(t) + ".__call__";
    hold = reinterpret_cast<PyObject*>(t);
  }
  if (name.compare(0, 11, "framescope.") == 0) g_own_c_keys.insert(key);
  Symbol s;
  s.name = "<built-in method " + name + ">";
  s.function = s.name;
  s.file = "~";
  g_c_symbols.emplace(key, std::move(s));
  if (hold) {
    Py_INCREF(hold);
    g_c_held.push_back(hold);
  }
  return key;
}

bool is_own_c_function(PyObject* callable, uint64_t key) {
  if (PyMethod_Check(callable)) {
    // A bound method wrapping a builtin: its key names `method.__call__`; ask of the function.
    callable = PyMethod_GET_FUNCTION(callable);  // borrowed
    key = c_function_key(callable);
  }
  if (key == g_nb_func_key && key != 0) {  // (sorted: other nanobind modules' calls ask too)
    return std::binary_search(g_own_nb_funcs.begin(), g_own_nb_funcs.end(), callable);
  }
  return !g_own_c_keys.empty() && g_own_c_keys.count(key) != 0;
}

void register_own_functions(PyObject* module) {
  PyObject* dict = PyModule_GetDict(module);                             // borrowed
  PyObject* mark = dict ? PyDict_GetItemString(dict, "mark") : nullptr;  // borrowed
  if (!mark) return;
  PyTypeObject* nb_func = Py_TYPE(mark);
  g_nb_func_key = reinterpret_cast<uint64_t>(nb_func) | 4;  // as c_function_key() keys it
  PyObject* key;
  PyObject* value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(dict, &pos, &key, &value)) {
    if (Py_TYPE(value) == nb_func) {
      Py_INCREF(value);
      g_own_nb_funcs.push_back(value);
    }
  }
  std::sort(g_own_nb_funcs.begin(), g_own_nb_funcs.end());  // binary_search in is_own_c_function
}

bool resolve_c_function_key(uint64_t key, Symbol& out) {
  auto it = g_c_symbols.find(key);
  if (it == g_c_symbols.end()) return false;
  out = it->second;
  return true;
}

void release_c_function_names() {
  g_c_symbols.clear();
  g_own_c_keys.clear();
  for (PyObject* o : g_c_held) Py_DECREF(o);
  g_c_held.clear();
}

}  // namespace framescope::py::fallback
