// cpp/python/eval_frame/eval_frame_guard.cpp: Guard and GuardValue, the eval_frame API's own C
// guard: building one, calling it on a mapping, explaining a failure, compiling it for a code.
//
// A Guard is a tree: its locals (f_locals[name]), each with checks and with values reached from it
// (an attribute, an item), which have checks and values of their own. It holds when every value
// can be read and every check holds, in this order: locals in the order they were first named;
// for each value, its own checks in the order they were added, then the values reached from it.
// A value that cannot be read (an unbound name, a missing attribute or item: AttributeError,
// LookupError) makes the guard fail; any other exception raised while checking propagates, as a
// guard's exception does (the lookup's guard_errors setting decides what then happens).
//
// Checking or describing a guard may run Python code (a predicate, an __eq__, a repr) that could
// try to change the same guard: its vectors would be reallocated under the loops reading them.
// A guard counts who is reading it (`readers`), and refuses changes meanwhile. Values chain at
// most kMaxDepth reads deep, so that the recursive functions here (and deallocation) stay far
// from the C stack's end.
#include "eval_frame/eval_frame_guard.h"  // first: Python.h with the internal frame headers

#include <new>
#include <utility>

namespace framescope::py {

namespace {

enum class GuardAccess : uint8_t { kLocal, kAttr, kItem };

struct GuardCheck {
  GuardCheckKind kind;
  PyObject* obj;  ///< strong, or null for kinds without one
  Py_ssize_t n;
};

struct GuardObject;

struct GuardValueObject {
  PyObject ob_base;    // PyObject_HEAD
  GuardObject* guard;  ///< strong: the Guard this value belongs to
  /// Borrowed, null for a local: the value this one is read from. It holds this one (among its
  /// children) and is held by the guard, which this value holds.
  GuardValueObject* parent;
  GuardAccess access;
  int depth;                                 ///< 0 for a local, parent's + 1 for a read from it
  PyObject* key;                             ///< strong: the name, attribute name or item key
  std::vector<GuardCheck>* checks;           ///< owned
  std::vector<GuardValueObject*>* children;  ///< owned, strong references
};

struct GuardObject {
  PyObject ob_base;  // PyObject_HEAD
  vectorcallfunc vectorcall;
  std::vector<GuardValueObject*>* locals;  ///< owned, strong references
  /// Evaluations and descriptions in progress: the guard cannot change while one runs.
  Py_ssize_t readers;
  /// Set when the guard is given to a GuardedCode: cached entries may hold a compiled copy of
  /// its checks (FrameGuardProgram), so it can no longer change.
  bool frozen;
  /// Set by tp_clear (the garbage collector breaking a cycle): the guard has lost its checks and
  /// must not be used any more.
  bool cleared;
};

/// How many reads a value may be from its local (attr/item chains).
constexpr int kMaxDepth = 64;

// Marks a guard as being read while it lives (RAII).
class Reading {
 public:
  explicit Reading(GuardObject* g) : g_(g) { ++g_->readers; }
  ~Reading() { --g_->readers; }
  Reading(const Reading&) = delete;
  Reading& operator=(const Reading&) = delete;

 private:
  GuardObject* g_;
};

// A guard or value whose references the garbage collector cleared: unusable. True with
// RuntimeError set.
bool refuse_cleared_guard(GuardObject* g) {
  if (g && !g->cleared) return false;
  PyErr_SetString(PyExc_RuntimeError, "this Guard was cleared by the garbage collector");
  return true;
}

PyTypeObject g_guard_type = {PyVarObject_HEAD_INIT(nullptr, 0)};
PyTypeObject g_guard_value_type = {PyVarObject_HEAD_INIT(nullptr, 0)};

GuardObject* as_guard(PyObject* o) { return reinterpret_cast<GuardObject*>(o); }
GuardValueObject* as_value(PyObject* o) { return reinterpret_cast<GuardValueObject*>(o); }

// ---- text ---------------------------------------------------------------------------------------

// repr(o), cut to 80 characters. New reference or null.
PyObject* short_repr(PyObject* o) {
  PyObject* r = PyObject_Repr(o);
  if (!r || PyUnicode_GET_LENGTH(r) <= 80) return r;
  PyObject* cut = PyUnicode_Substring(r, 0, 77);
  Py_DECREF(r);
  if (!cut) return nullptr;
  PyObject* out = PyUnicode_FromFormat("%U...", cut);
  Py_DECREF(cut);
  return out;
}

// Where a value is read from, as Python: L['x'], L['cfg'].mode, L['xs'][0]. New reference.
PyObject* value_source(GuardValueObject* v) {
  if (!v->key || (v->access != GuardAccess::kLocal && !v->parent)) {
    refuse_cleared_guard(nullptr);
    return nullptr;
  }
  if (v->access == GuardAccess::kLocal) return PyUnicode_FromFormat("L[%R]", v->key);
  PyObject* parent = value_source(v->parent);
  if (!parent) return nullptr;
  PyObject* out = v->access == GuardAccess::kAttr ? PyUnicode_FromFormat("%U.%U", parent, v->key)
                                                  : PyUnicode_FromFormat("%U[%R]", parent, v->key);
  Py_DECREF(parent);
  return out;
}

// The name of a type or predicate in a check's text. New reference.
PyObject* object_name(PyObject* o) {
  if (PyType_Check(o)) return PyUnicode_FromString(reinterpret_cast<PyTypeObject*>(o)->tp_name);
  PyObject* name = PyObject_GetAttrString(o, "__qualname__");
  if (name && PyUnicode_Check(name)) return name;
  Py_XDECREF(name);
  if (!name) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return nullptr;
    PyErr_Clear();
  }
  return short_repr(o);
}

// A check as Python: "type(L['x']) is int". New reference.
PyObject* check_text(PyObject* source, const GuardCheck& c) {
  PyObject* shown = nullptr;
  PyObject* out = nullptr;
  switch (c.kind) {
    case GuardCheckKind::kBound:
      return PyUnicode_FromFormat("%U exists", source);
    case GuardCheckKind::kTypeIs:
      if ((shown = object_name(c.obj))) out = PyUnicode_FromFormat("type(%U) is %U", source, shown);
      break;
    case GuardCheckKind::kIs:
      if ((shown = short_repr(c.obj))) out = PyUnicode_FromFormat("%U is %U", source, shown);
      break;
    case GuardCheckKind::kIsNone:
      return PyUnicode_FromFormat("%U is None", source);
    case GuardCheckKind::kIsNotNone:
      return PyUnicode_FromFormat("%U is not None", source);
    case GuardCheckKind::kEquals:
      if ((shown = short_repr(c.obj))) out = PyUnicode_FromFormat("%U == %U", source, shown);
      break;
    case GuardCheckKind::kLenIs:
      return PyUnicode_FromFormat("len(%U) == %zd", source, c.n);
    case GuardCheckKind::kSatisfies:
      if ((shown = object_name(c.obj))) out = PyUnicode_FromFormat("%U(%U)", shown, source);
      break;
  }
  Py_XDECREF(shown);
  return out;
}

// What a failed check found, after its text: "type(L['x']) is int: it is a float". Sets *why
// (new reference) and returns 0; -1 when the text could not be made.
int explain(PyObject** why, GuardValueObject* node, const GuardCheck& c, PyObject* v,
            const char* missing) {
  PyObject* source = value_source(node);
  if (!source) return -1;
  PyObject* text = check_text(source, c);
  Py_DECREF(source);
  if (!text) return -1;
  PyObject* found = nullptr;
  if (missing) {
    found = PyUnicode_FromString(missing);
  } else if (c.kind == GuardCheckKind::kTypeIs) {
    found = PyUnicode_FromFormat("it is a %s", Py_TYPE(v)->tp_name);
  } else if (c.kind == GuardCheckKind::kLenIs) {
    const Py_ssize_t n = PyObject_Length(v);
    found = n >= 0 ? PyUnicode_FromFormat("its length is %zd", n) : nullptr;
  } else if (PyObject* r = short_repr(v)) {
    found = c.kind == GuardCheckKind::kEquals && Py_TYPE(v) != Py_TYPE(c.obj)
                ? PyUnicode_FromFormat("it is %U, a %s", r, Py_TYPE(v)->tp_name)
                : PyUnicode_FromFormat("it is %U", r);
    Py_DECREF(r);
  }
  if (!found) {
    Py_DECREF(text);
    return -1;
  }
  *why = PyUnicode_FromFormat("%U: %U", text, found);
  Py_DECREF(text);
  Py_DECREF(found);
  return *why ? 0 : -1;
}

// ---- evaluation on a mapping --------------------------------------------------------------------

// The value `node` reads from `from` (the f_locals mapping for a local). 1 with *out a new
// reference, 0 when there is none (unbound, no such attribute or item), -1 on another error.
int read_value(GuardValueObject* node, PyObject* from, PyObject** out) {
  switch (node->access) {
    case GuardAccess::kLocal:
      if (PyDict_CheckExact(from)) {
        *out = Py_XNewRef(PyDict_GetItemWithError(from, node->key));
        return *out ? 1 : PyErr_Occurred() ? -1 : 0;
      }
      *out = PyObject_GetItem(from, node->key);
      break;
    case GuardAccess::kAttr:
      *out = PyObject_GetAttr(from, node->key);
      if (!*out && PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
        return 0;
      }
      return *out ? 1 : -1;
    case GuardAccess::kItem:
      *out = PyObject_GetItem(from, node->key);
      break;
  }
  if (!*out && PyErr_ExceptionMatches(PyExc_LookupError)) {
    PyErr_Clear();
    return 0;
  }
  return *out ? 1 : -1;
}

// 1: the check holds on v; 0: it does not; -1: it raised.
int run_check(const GuardCheck& c, PyObject* v) {
  switch (c.kind) {
    case GuardCheckKind::kBound:
      return 1;
    case GuardCheckKind::kTypeIs:
      return reinterpret_cast<PyObject*>(Py_TYPE(v)) == c.obj;
    case GuardCheckKind::kIs:
      return v == c.obj;
    case GuardCheckKind::kIsNone:
      return v == Py_None;
    case GuardCheckKind::kIsNotNone:
      return v != Py_None;
    case GuardCheckKind::kEquals:
      if (v == c.obj) return 1;
      if (Py_TYPE(v) != Py_TYPE(c.obj)) return 0;
      return PyObject_RichCompareBool(v, c.obj, Py_EQ);
    case GuardCheckKind::kLenIs: {
      const Py_ssize_t n = PyObject_Length(v);
      return n < 0 ? -1 : n == c.n;
    }
    case GuardCheckKind::kSatisfies: {
      PyObject* r = PyObject_CallOneArg(c.obj, v);
      if (!r) return -1;
      const int ok = PyObject_IsTrue(r);
      Py_DECREF(r);
      return ok;
    }
  }
  return 0;
}

// Whether `node` holds, read from `from`. 1 holds, 0 fails (*why, when asked, says why), -1 error.
int eval_value(GuardValueObject* node, PyObject* from, PyObject** why) {
  if (!node->key) {
    refuse_cleared_guard(nullptr);
    return -1;
  }
  PyObject* v = nullptr;
  const int got = read_value(node, from, &v);
  if (got <= 0) {
    if (got == 0 && why) {
      const char* missing = node->access == GuardAccess::kLocal  ? "not bound"
                            : node->access == GuardAccess::kAttr ? "no such attribute"
                                                                 : "no such item";
      return explain(why, node, GuardCheck{GuardCheckKind::kBound, nullptr, 0}, nullptr, missing);
    }
    return got;
  }
  int ok = 1;
  for (const GuardCheck& c : *node->checks) {
    ok = run_check(c, v);
    if (ok == 0 && why) ok = explain(why, node, c, v, nullptr);
    if (ok <= 0) break;
  }
  if (ok > 0) {
    for (size_t i = 0; ok > 0 && i < node->children->size(); i++) {
      GuardValueObject* child = (*node->children)[i];
      Py_INCREF(child);
      ok = eval_value(child, v, why);
      Py_DECREF(child);
    }
  }
  Py_DECREF(v);
  return ok;
}

// Whether the guard holds on `f_locals`. 1, 0 (*why set when asked), -1 error.
int eval_guard(GuardObject* g, PyObject* f_locals, PyObject** why) {
  if (refuse_cleared_guard(g)) return -1;
  if (!PyMapping_Check(f_locals)) {
    PyErr_Format(PyExc_TypeError, "Guard: f_locals must be a mapping, not %.100s",
                 Py_TYPE(f_locals)->tp_name);
    return -1;
  }
  // A predicate may call a guard, this one included: each call counts as a Python call, so a
  // guard that checks itself ends in RecursionError, not in a C stack overflow.
  if (Py_EnterRecursiveCall(" while checking a Guard")) return -1;
  Reading reading(g);
  int ok = 1;
  for (size_t i = 0; ok > 0 && i < g->locals->size(); i++) {
    GuardValueObject* local = (*g->locals)[i];
    Py_INCREF(local);
    ok = eval_value(local, f_locals, why);
    Py_DECREF(local);
  }
  Py_LeaveRecursiveCall();
  return ok;
}

// ---- what runs no code --------------------------------------------------------------------------

// Constants equals() compares without running code: exact builtin scalars, whose == is C.
bool is_plain_constant(PyObject* c) {
  return c == Py_None || PyBool_Check(c) || PyLong_CheckExact(c) || PyFloat_CheckExact(c) ||
         PyComplex_CheckExact(c) || PyUnicode_CheckExact(c) || PyBytes_CheckExact(c);
}

// Builtin containers whose len() is C.
bool has_plain_length(PyObject* type) {
  for (PyTypeObject* t : {&PyTuple_Type, &PyList_Type, &PyDict_Type, &PyUnicode_Type, &PyBytes_Type,
                          &PyByteArray_Type, &PySet_Type, &PyFrozenSet_Type}) {
    if (type == reinterpret_cast<PyObject*>(t)) return true;
  }
  return false;
}

// Whether checking the guard can run no Python code: only locals (an attribute or item read may
// run code), and checks that compare pointers, constants of builtin scalar types, or lengths of
// values whose exact builtin type an earlier check of the same value established.
bool guard_runs_no_code(GuardObject* g) {
  for (GuardValueObject* local : *g->locals) {
    if (!local->children->empty()) return false;
    PyObject* known_type = nullptr;
    for (const GuardCheck& c : *local->checks) {
      switch (c.kind) {
        case GuardCheckKind::kTypeIs:
          known_type = c.obj;
          break;
        case GuardCheckKind::kEquals:
          if (!is_plain_constant(c.obj)) return false;
          break;
        case GuardCheckKind::kLenIs:
          if (!known_type || !has_plain_length(known_type)) return false;
          break;
        case GuardCheckKind::kSatisfies:
          return false;
        default:
          break;
      }
    }
  }
  return true;
}

// ---- building -----------------------------------------------------------------------------------

// A guard that may not change now: frozen, being read, or cleared. True with RuntimeError set.
bool refuse_if_frozen(GuardObject* g) {
  if (refuse_cleared_guard(g)) return true;
  if (g->readers > 0) {
    PyErr_SetString(PyExc_RuntimeError,
                    "a Guard cannot change while it is being checked or described");
    return true;
  }
  if (!g->frozen) return false;
  PyErr_SetString(PyExc_RuntimeError,
                  "this Guard guards cached code (it was given to a GuardedCode), so its checks "
                  "can no longer change; build a new Guard");
  return true;
}

GuardValueObject* new_value(GuardObject* g, GuardValueObject* parent, GuardAccess access,
                            PyObject* key) {
  auto* v = PyObject_GC_New(GuardValueObject, &g_guard_value_type);
  if (!v) return nullptr;
  v->guard = reinterpret_cast<GuardObject*>(Py_NewRef(g));
  v->parent = parent;
  v->access = access;
  v->depth = parent ? parent->depth + 1 : 0;
  v->key = Py_NewRef(key);
  v->checks = new (std::nothrow) std::vector<GuardCheck>();
  v->children = new (std::nothrow) std::vector<GuardValueObject*>();
  PyObject_GC_Track(v);
  if (!v->checks || !v->children) {
    Py_DECREF(v);
    PyErr_NoMemory();
    return nullptr;
  }
  return v;
}

// Whether two keys name the same value: equal str or int keys, else the same object.
bool same_key(PyObject* a, PyObject* b) {
  if (a == b) return true;
  if (Py_TYPE(a) != Py_TYPE(b) || !(PyUnicode_CheckExact(a) || PyLong_CheckExact(a))) return false;
  const int eq = PyObject_RichCompareBool(a, b, Py_EQ);  // C comparisons: cannot fail
  if (eq < 0) PyErr_Clear();
  return eq > 0;
}

// The value of `list` read with `access` and `key`, made if new. New reference or null.
PyObject* value_for(GuardObject* g, GuardValueObject* parent, std::vector<GuardValueObject*>* list,
                    GuardAccess access, PyObject* key) {
  for (GuardValueObject* v : *list) {
    if (v->access == access && same_key(v->key, key)) {
      return Py_NewRef(reinterpret_cast<PyObject*>(v));
    }
  }
  if (refuse_if_frozen(g)) return nullptr;
  if (parent && parent->depth + 1 > kMaxDepth) {
    PyErr_Format(PyExc_ValueError, "a Guard reads values at most %d attributes or items deep",
                 kMaxDepth);
    return nullptr;
  }
  GuardValueObject* v = new_value(g, parent, access, key);
  if (!v) return nullptr;
  try {
    list->push_back(v);
  } catch (const std::bad_alloc&) {
    Py_DECREF(v);
    return PyErr_NoMemory();
  }
  return Py_NewRef(reinterpret_cast<PyObject*>(v));  // the list holds the first reference
}

// A str argument, interned (names compare by pointer). New reference or null.
PyObject* name_argument(PyObject* arg, const char* what) {
  if (!PyUnicode_Check(arg)) {
    PyErr_Format(PyExc_TypeError, "%s must be a str, not %.100s", what, Py_TYPE(arg)->tp_name);
    return nullptr;
  }
  PyObject* name = PyUnicode_CheckExact(arg) ? Py_NewRef(arg) : PyUnicode_FromObject(arg);
  if (name) PyUnicode_InternInPlace(&name);
  return name;
}

// A value the garbage collector cleared (its guard is gone) can no longer be changed.
bool refuse_if_cleared(GuardValueObject* v) {
  if (v->guard) return false;
  PyErr_SetString(PyExc_RuntimeError, "this GuardValue's Guard was cleared");
  return true;
}

PyObject* add_check(PyObject* self_obj, GuardCheckKind kind, PyObject* obj, Py_ssize_t n) {
  GuardValueObject* self = as_value(self_obj);
  if (refuse_if_cleared(self) || refuse_if_frozen(self->guard)) return nullptr;
  try {
    self->checks->push_back(GuardCheck{kind, Py_XNewRef(obj), n});
  } catch (const std::bad_alloc&) {
    Py_XDECREF(obj);
    return PyErr_NoMemory();
  }
  return Py_NewRef(self_obj);
}

// ---- GuardValue ---------------------------------------------------------------------------------

PyObject* value_type_is(PyObject* self, PyObject* cls) {
  if (!PyType_Check(cls)) {
    PyErr_Format(PyExc_TypeError, "type_is() needs a type, not %.100s", Py_TYPE(cls)->tp_name);
    return nullptr;
  }
  return add_check(self, GuardCheckKind::kTypeIs, cls, 0);
}
PyObject* value_is(PyObject* self, PyObject* obj) {
  return add_check(self, GuardCheckKind::kIs, obj, 0);
}
PyObject* value_is_none(PyObject* self, PyObject*) {
  return add_check(self, GuardCheckKind::kIsNone, nullptr, 0);
}
PyObject* value_is_not_none(PyObject* self, PyObject*) {
  return add_check(self, GuardCheckKind::kIsNotNone, nullptr, 0);
}
PyObject* value_equals(PyObject* self, PyObject* obj) {
  return add_check(self, GuardCheckKind::kEquals, obj, 0);
}
PyObject* value_len_is(PyObject* self, PyObject* arg) {
  if (!PyLong_Check(arg) || PyBool_Check(arg)) {
    PyErr_Format(PyExc_TypeError, "len_is() needs an int, not %.100s", Py_TYPE(arg)->tp_name);
    return nullptr;
  }
  const Py_ssize_t n = PyLong_AsSsize_t(arg);
  if (n == -1 && PyErr_Occurred()) {
    if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return nullptr;
    PyErr_Clear();
    PyErr_SetString(PyExc_ValueError, "len_is() length is too large");
    return nullptr;
  }
  if (n < 0) {
    PyErr_Format(PyExc_ValueError, "len_is() needs a length >= 0, not %zd", n);
    return nullptr;
  }
  return add_check(self, GuardCheckKind::kLenIs, nullptr, n);
}
PyObject* value_satisfies(PyObject* self, PyObject* predicate) {
  if (!PyCallable_Check(predicate)) {
    PyErr_Format(PyExc_TypeError, "satisfies() needs a callable, not %.100s",
                 Py_TYPE(predicate)->tp_name);
    return nullptr;
  }
  return add_check(self, GuardCheckKind::kSatisfies, predicate, 0);
}
PyObject* value_attr(PyObject* self_obj, PyObject* arg) {
  GuardValueObject* self = as_value(self_obj);
  if (refuse_if_cleared(self)) return nullptr;
  PyObject* name = name_argument(arg, "attr() name");
  if (!name) return nullptr;
  PyObject* v = value_for(self->guard, self, self->children, GuardAccess::kAttr, name);
  Py_DECREF(name);
  return v;
}
PyObject* value_item(PyObject* self_obj, PyObject* key) {
  GuardValueObject* self = as_value(self_obj);
  if (refuse_if_cleared(self)) return nullptr;
  return value_for(self->guard, self, self->children, GuardAccess::kItem, key);
}

// value_source() while its guard is being read (a key's repr may run code).
PyObject* value_source_reading(GuardValueObject* v) {
  if (refuse_cleared_guard(v->guard)) return nullptr;
  Reading reading(v->guard);
  return value_source(v);
}

PyObject* value_get_source(PyObject* self, void*) { return value_source_reading(as_value(self)); }

PyObject* value_repr(PyObject* self) {
  PyObject* source = value_source_reading(as_value(self));
  if (!source) return nullptr;
  PyObject* r = PyUnicode_FromFormat("<GuardValue %U>", source);
  Py_DECREF(source);
  return r;
}

int value_traverse(PyObject* self_obj, visitproc visit, void* arg) {
  GuardValueObject* self = as_value(self_obj);
  Py_VISIT(reinterpret_cast<PyObject*>(self->guard));
  Py_VISIT(self->key);
  if (self->checks) {
    for (const GuardCheck& c : *self->checks) Py_VISIT(c.obj);
  }
  if (self->children) {
    for (GuardValueObject* child : *self->children) Py_VISIT(reinterpret_cast<PyObject*>(child));
  }
  return 0;
}

int value_clear(PyObject* self_obj) {
  GuardValueObject* self = as_value(self_obj);
  // Taken out before the references go: a dealloc they trigger may look at this value.
  std::vector<GuardCheck> checks;
  std::vector<GuardValueObject*> children;
  if (self->checks) checks.swap(*self->checks);
  if (self->children) children.swap(*self->children);
  for (GuardCheck& c : checks) Py_CLEAR(c.obj);
  for (GuardValueObject* child : children) {
    child->parent = nullptr;  // this value may go before it
    Py_DECREF(child);
  }
  self->parent = nullptr;
  Py_CLEAR(self->key);
  Py_CLEAR(self->guard);
  return 0;
}

void value_dealloc(PyObject* self_obj) {
  PyObject_GC_UnTrack(self_obj);
  value_clear(self_obj);
  GuardValueObject* self = as_value(self_obj);
  delete self->checks;
  delete self->children;
  Py_TYPE(self_obj)->tp_free(self_obj);
}

PyMethodDef g_value_methods[] = {
    {"type_is", value_type_is, METH_O,
     "type_is(cls, /)\n--\n\nCheck that type(value) is cls (exactly: not a subclass). Returns "
     "this value."},
    {"is_", value_is, METH_O,
     "is_(obj, /)\n--\n\nCheck that the value is obj (identity; the guard keeps obj alive). "
     "Returns this value."},
    {"is_none", value_is_none, METH_NOARGS,
     "is_none()\n--\n\nCheck that the value is None. Returns this value."},
    {"is_not_none", value_is_not_none, METH_NOARGS,
     "is_not_none()\n--\n\nCheck that the value is not None. Returns this value."},
    {"equals", value_equals, METH_O,
     "equals(constant, /)\n--\n\nCheck that type(value) is type(constant) and value == "
     "constant. Returns this value."},
    {"len_is", value_len_is, METH_O,
     "len_is(n, /)\n--\n\nCheck that len(value) == n. Returns this value."},
    {"satisfies", value_satisfies, METH_O,
     "satisfies(predicate, /)\n--\n\nCheck that predicate(value) is true (a Python call: the "
     "guard then runs code). Returns this value."},
    {"attr", value_attr, METH_O,
     "attr(name, /)\n--\n\nThe value's attribute `name`, to check in turn (a missing attribute "
     "fails the guard)."},
    {"item", value_item, METH_O,
     "item(key, /)\n--\n\nThe value's item value[key], to check in turn (a missing key or index "
     "fails the guard)."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef g_value_getset[] = {
    {"source", value_get_source, nullptr,
     "Where the value is read from, as Python: L['x'], L['cfg'].mode, L['xs'][0].", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

// ---- Guard --------------------------------------------------------------------------------------

PyObject* guard_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf,
                           PyObject* kwnames) {
  const Py_ssize_t n = PyVectorcall_NARGS(nargsf);
  if (n != 1 || (kwnames && PyTuple_GET_SIZE(kwnames) > 0)) {
    PyErr_Format(PyExc_TypeError,
                 "a Guard takes one positional argument, f_locals (a mapping), not %zd "
                 "positional and %zd keyword arguments",
                 n, kwnames ? PyTuple_GET_SIZE(kwnames) : Py_ssize_t{0});
    return nullptr;
  }
  const int ok = eval_guard(as_guard(self), args[0], nullptr);
  return ok < 0 ? nullptr : PyBool_FromLong(ok);
}

PyObject* guard_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  if (PyTuple_GET_SIZE(args) > 0 || (kwargs && PyDict_GET_SIZE(kwargs) > 0)) {
    PyErr_SetString(PyExc_TypeError,
                    "Guard() takes no arguments: add checks with guard.local(name)");
    return nullptr;
  }
  auto* g = PyObject_GC_New(GuardObject, type);
  if (!g) return nullptr;
  g->vectorcall = guard_vectorcall;
  g->readers = 0;
  g->frozen = false;
  g->cleared = false;
  g->locals = new (std::nothrow) std::vector<GuardValueObject*>();
  PyObject_GC_Track(g);
  if (!g->locals) {
    Py_DECREF(g);
    return PyErr_NoMemory();
  }
  return reinterpret_cast<PyObject*>(g);
}

// Guard.__init__ (tp_new took the arguments): rejects arguments as tp_new does.
int guard_init(PyObject*, PyObject* args, PyObject* kwargs) {
  if (PyTuple_GET_SIZE(args) > 0 || (kwargs && PyDict_GET_SIZE(kwargs) > 0)) {
    PyErr_SetString(PyExc_TypeError,
                    "Guard() takes no arguments: add checks with guard.local(name)");
    return -1;
  }
  return 0;
}

PyObject* guard_local(PyObject* self_obj, PyObject* arg) {
  GuardObject* self = as_guard(self_obj);
  PyObject* name = name_argument(arg, "local() name");
  if (!name) return nullptr;
  PyObject* v = value_for(self, nullptr, self->locals, GuardAccess::kLocal, name);
  Py_DECREF(name);
  return v;
}

PyObject* guard_failure(PyObject* self, PyObject* f_locals) {
  PyObject* why = nullptr;
  const int ok = eval_guard(as_guard(self), f_locals, &why);
  if (ok < 0) {
    Py_XDECREF(why);
    return nullptr;
  }
  return why ? why : Py_NewRef(Py_None);
}

// Appends the text of `v`'s checks, and of its children's, to `out`. False with an exception.
bool append_check_texts(GuardValueObject* v, PyObject* out) {
  PyObject* source = value_source(v);
  if (!source) return false;
  bool ok = true;
  if (v->checks->empty() && v->children->empty()) {
    PyObject* t = check_text(source, GuardCheck{GuardCheckKind::kBound, nullptr, 0});
    ok = t && PyList_Append(out, t) == 0;
    Py_XDECREF(t);
  }
  for (size_t i = 0; ok && i < v->checks->size(); i++) {
    PyObject* t = check_text(source, (*v->checks)[i]);
    ok = t && PyList_Append(out, t) == 0;
    Py_XDECREF(t);
  }
  Py_DECREF(source);
  for (size_t i = 0; ok && i < v->children->size(); i++) {
    ok = append_check_texts((*v->children)[i], out);
  }
  return ok;
}

PyObject* guard_get_checks(PyObject* self, void*) {
  GuardObject* g = as_guard(self);
  if (refuse_cleared_guard(g)) return nullptr;
  PyObject* list = PyList_New(0);
  if (!list) return nullptr;
  Reading reading(g);  // a repr of a check's object may run code
  for (GuardValueObject* local : *g->locals) {
    if (!append_check_texts(local, list)) {
      Py_DECREF(list);
      return nullptr;
    }
  }
  PyObject* t = PyList_AsTuple(list);
  Py_DECREF(list);
  return t;
}

PyObject* guard_get_runs_no_code(PyObject* self, void*) {
  return PyBool_FromLong(guard_runs_no_code(as_guard(self)));
}
PyObject* guard_get_frozen(PyObject* self, void*) {
  return PyBool_FromLong(as_guard(self)->frozen);
}

PyObject* guard_repr(PyObject* self) {
  PyObject* checks = guard_get_checks(self, nullptr);
  if (!checks) return nullptr;
  PyObject* sep = PyUnicode_FromString(", ");
  PyObject* joined = sep ? PyUnicode_Join(sep, checks) : nullptr;
  Py_XDECREF(sep);
  Py_DECREF(checks);
  if (!joined) return nullptr;
  PyObject* r = PyUnicode_FromFormat("<Guard %U>", joined);
  Py_DECREF(joined);
  return r;
}

int guard_traverse(PyObject* self_obj, visitproc visit, void* arg) {
  GuardObject* self = as_guard(self_obj);
  if (self->locals) {
    for (GuardValueObject* v : *self->locals) Py_VISIT(reinterpret_cast<PyObject*>(v));
  }
  return 0;
}

int guard_clear(PyObject* self_obj) {
  GuardObject* self = as_guard(self_obj);
  self->cleared = true;
  std::vector<GuardValueObject*> locals;
  if (self->locals) locals.swap(*self->locals);
  for (GuardValueObject* v : locals) Py_DECREF(v);
  return 0;
}

void guard_dealloc(PyObject* self_obj) {
  PyObject_GC_UnTrack(self_obj);
  guard_clear(self_obj);
  delete as_guard(self_obj)->locals;
  Py_TYPE(self_obj)->tp_free(self_obj);
}

PyMethodDef g_guard_methods[] = {
    {"local", guard_local, METH_O,
     "local(name, /)\n--\n\nThe value f_locals[name] (an argument or free variable of the "
     "frame), to add checks to. The same name gives the same GuardValue."},
    {"failure", guard_failure, METH_O,
     "failure(f_locals, /)\n--\n\nNone when the guard holds on f_locals; else the first check "
     "that fails and what it found, e.g. \"type(L['x']) is int: it is a float\"."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef g_guard_getset[] = {
    {"checks", guard_get_checks, nullptr,
     "The checks, as Python, in the order they run (torch's verbose_code_parts).", nullptr},
    {"runs_no_code", guard_get_runs_no_code, nullptr,
     "True when checking the guard runs no Python code: then a cached entry decides its hits "
     "straight from the frame, without a call.",
     nullptr},
    {"frozen", guard_get_frozen, nullptr,
     "True once given to a GuardedCode: its checks can no longer change.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

}  // namespace

bool is_guard(PyObject* obj) noexcept { return Py_TYPE(obj) == &g_guard_type; }

void freeze_guard(PyObject* guard) noexcept { as_guard(guard)->frozen = true; }

bool prepare_guard_for_code(PyObject* guard, PyCodeObject* frame_code, bool same_code,
                            FrameGuardProgram** program) {
  *program = nullptr;
  GuardObject* g = as_guard(guard);
  if (refuse_cleared_guard(g)) return false;
  for (GuardValueObject* local : *g->locals) {
    if (frame_local_index(frame_code, local->key) < 0) {
      PyErr_Format(PyExc_ValueError,
                   "Guard checks L[%R], but f_locals of %U (%U, line %d) never has it: it is not "
                   "an argument or free variable of that code",
                   local->key, frame_code->co_name, frame_code->co_filename,
                   frame_code->co_firstlineno);
      return false;
    }
  }
  g->frozen = true;
  if (!same_code || !guard_runs_no_code(g)) return true;
  auto* p = new (std::nothrow) FrameGuardProgram();
  if (!p) {
    PyErr_NoMemory();
    return false;
  }
  const int nargs = code_arg_slots(frame_code);
  try {
    for (GuardValueObject* local : *g->locals) {
      const int32_t index = frame_local_index(frame_code, local->key);
      FrameGuardOp read{nullptr,
                        nullptr,
                        0,
                        index < nargs ? index : index - nargs,
                        index < nargs ? GuardLoad::kArgument : GuardLoad::kFree,
                        GuardCheckKind::kBound};
      auto c = local->checks->begin();
      if (c != local->checks->end() && c->kind == GuardCheckKind::kTypeIs) {
        read.type = c->obj;  // folded into the read
        if (read.load == GuardLoad::kArgument) read.load = GuardLoad::kTypedArgument;
        ++c;
      }
      if (c != local->checks->end()) {
        read.kind = c->kind;
        read.obj = c->obj;
        read.n = c->n;
        ++c;
      }
      p->ops.push_back(read);
      for (; c != local->checks->end(); ++c) {
        p->ops.push_back({nullptr, c->obj, c->n, 0, GuardLoad::kPrevious, c->kind});
      }
    }
  } catch (const std::bad_alloc&) {
    delete p;  // no references taken yet
    PyErr_NoMemory();
    return false;
  }
  for (FrameGuardOp& op : p->ops) {
    Py_XINCREF(op.type);
    Py_XINCREF(op.obj);
  }
  *program = p;
  return true;
}

void free_frame_guard_program(FrameGuardProgram* program) noexcept {
  if (!program) return;
  for (FrameGuardOp& op : program->ops) {
    Py_CLEAR(op.type);
    Py_CLEAR(op.obj);
  }
  delete program;
}

int traverse_frame_guard_program(const FrameGuardProgram* program, visitproc visit, void* arg) {
  if (!program) return 0;
  for (const FrameGuardOp& op : program->ops) {
    Py_VISIT(op.type);
    Py_VISIT(op.obj);
  }
  return 0;
}

bool guard_constant_equals(PyObject* v, PyObject* c) noexcept {
  const int eq = PyObject_RichCompareBool(v, c, Py_EQ);
  if (eq < 0) PyErr_Clear();
  return eq > 0;
}

bool eval_frame_guard_init(PyObject* module) {
  PyTypeObject* t = &g_guard_type;
  t->tp_name = "framescope.eval_frame.Guard";
  t->tp_basicsize = sizeof(GuardObject);
  t->tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL;
  t->tp_doc = PyDoc_STR(
      "Guard()\n--\n\n"
      "A guard made of declared checks on f_locals, for GuardedCode(code, check_fn=guard): "
      "guard.local('x').type_is(int), guard.local('n').equals(3), "
      "guard.local('cfg').attr('mode').equals('fast'). Called as guard(f_locals), it is true "
      "when every check holds. When no check runs Python code (see runs_no_code), a cache hit "
      "is decided from the frame without calling it.");
  t->tp_new = guard_new;
  t->tp_init = guard_init;
  t->tp_dealloc = guard_dealloc;
  t->tp_traverse = guard_traverse;
  t->tp_clear = guard_clear;
  t->tp_repr = guard_repr;
  t->tp_call = PyVectorcall_Call;
  t->tp_vectorcall_offset = offsetof(GuardObject, vectorcall);
  t->tp_methods = g_guard_methods;
  t->tp_getset = g_guard_getset;

  t = &g_guard_value_type;
  t->tp_name = "framescope.eval_frame.GuardValue";
  t->tp_basicsize = sizeof(GuardValueObject);
  t->tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC;
  t->tp_doc = PyDoc_STR(
      "A value a Guard checks (made by Guard.local, GuardValue.attr and GuardValue.item): its "
      "check methods return it, so checks chain.");
  t->tp_dealloc = value_dealloc;
  t->tp_traverse = value_traverse;
  t->tp_clear = value_clear;
  t->tp_repr = value_repr;
  t->tp_methods = g_value_methods;
  t->tp_getset = g_value_getset;

  for (PyTypeObject* type : {&g_guard_type, &g_guard_value_type}) {
    if (PyType_Ready(type) < 0) return false;
  }
  return PyModule_AddObjectRef(module, "Guard", reinterpret_cast<PyObject*>(&g_guard_type)) == 0 &&
         PyModule_AddObjectRef(module, "GuardValue",
                               reinterpret_cast<PyObject*>(&g_guard_value_type)) == 0;
}

}  // namespace framescope::py
