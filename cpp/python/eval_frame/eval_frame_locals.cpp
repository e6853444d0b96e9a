// cpp/python/eval_frame/eval_frame_locals.cpp: FrameLocals, the f_locals mapping guards get.
//
// What it holds is torch's frame locals (FrameLocalsMapping): the frame's fast locals that are
// bound when it starts -- the arguments (*args and **kwargs included, a cell argument with its
// value) and, for function bodies, the values of the free variables. Module and class bodies have
// no fast locals: their f_locals is empty, as in torch.
//
// A guard runs on every call of a cached function, so f_locals must be cheap: building a dict of
// the arguments and freeing it costs more than the rest of a cache hit. FrameLocals reads the
// values straight from the unstarted frame instead, and one object per thread is recycled from
// lookup to lookup. One lookup shares one view between its guards, hooks and callback, which may
// write to it as to torch's dict: the first write turns the view into a dict of its own (the frame
// never sees writes), which the later readers of that lookup see. When the lookup ends, a view
// nobody else holds goes back to the thread; one that a guard, hook or callback kept turns into a
// snapshot (a dict of the values it saw), so it stays readable after the frame is gone.
#include "eval_frame/eval_frame_internal.h"  // first: Python.h with the internal frame headers

namespace framescope::py {

namespace {

PyTypeObject g_frame_locals_type = {PyVarObject_HEAD_INIT(nullptr, 0)};

// The value bound to `key` (borrowed) in the view. -1 with an exception, 0 absent, 1 found.
int view_get(FrameLocalsObject* self, PyObject* key, PyObject** value) {
  *value = nullptr;
  if (FsFrame* f = self->frame) {
    if (!PyUnicode_Check(key)) {
      return PyObject_Hash(key) == -1 ? -1 : 0;  // unhashable keys raise, as with a dict
    }
    PyCodeObject* co = frame_code(f);
    const int index = frame_local_index(co, key);
    if (index < 0) return 0;
    *value = frame_local_value(f, index, code_arg_slots(co));
    return *value != nullptr;
  }
  if (!self->snapshot) return 0;
  *value = PyDict_GetItemWithError(self->snapshot, key);  // borrowed
  return *value ? 1 : PyErr_Occurred() ? -1 : 0;
}

// The view's contents as a new dict.
PyObject* view_dict(FrameLocalsObject* self) {
  if (self->frame) return build_frame_locals(self->frame);
  return self->snapshot ? PyDict_Copy(self->snapshot) : PyDict_New();
}

PyObject* locals_subscript(PyObject* self, PyObject* key) {
  PyObject* value;
  int found = view_get(reinterpret_cast<FrameLocalsObject*>(self), key, &value);
  if (found < 0) return nullptr;
  if (!found) {
    PyErr_SetObject(PyExc_KeyError, key);
    return nullptr;
  }
  return Py_NewRef(value);
}

Py_ssize_t locals_length(PyObject* self_obj) {
  auto* self = reinterpret_cast<FrameLocalsObject*>(self_obj);
  if (FsFrame* f = self->frame) {
    PyCodeObject* co = frame_code(f);
    Py_ssize_t n = 0;
    for (int i = 0, nargs = code_arg_slots(co); i < nargs; i++)
      n += frame_argument(f, i) != nullptr;
    for (int j = 0, nfree = shown_free_count(co); j < nfree; j++) {
      PyObject* cell = frame_free_cell(f, j);
      n += cell && PyCell_Check(cell) && PyCell_GET(cell);
    }
    return n;
  }
  return self->snapshot ? PyDict_GET_SIZE(self->snapshot) : 0;
}

// Truth value: whether any value is bound, without counting them all (bool(f_locals) is a
// plausible guard, and PyObject_IsTrue asks nb_bool before the length).
int locals_bool(PyObject* self_obj) {
  auto* self = reinterpret_cast<FrameLocalsObject*>(self_obj);
  if (FsFrame* f = self->frame) return frame_binds_a_value(f);
  return self->snapshot && PyDict_GET_SIZE(self->snapshot) > 0;
}

int locals_contains(PyObject* self, PyObject* key) {
  PyObject* value;
  return view_get(reinterpret_cast<FrameLocalsObject*>(self), key, &value);
}

PyObject* locals_get(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1 || nargs > 2) {
    PyErr_Format(PyExc_TypeError, "get expected 1 or 2 arguments, got %zd", nargs);
    return nullptr;
  }
  PyObject* value;
  int found = view_get(reinterpret_cast<FrameLocalsObject*>(self), args[0], &value);
  if (found < 0) return nullptr;
  return Py_NewRef(found ? value : nargs == 2 ? args[1] : Py_None);
}

// The view's own dict, made on the first write: from then on the view reads it, not the frame.
// Borrowed; null with an exception set.
PyObject* materialize(FrameLocalsObject* self) {
  if (!self->snapshot) {
    self->snapshot = self->frame ? build_frame_locals(self->frame) : PyDict_New();
    if (!self->snapshot) return nullptr;
  }
  self->frame = nullptr;
  return self->snapshot;
}

int locals_ass_subscript(PyObject* self, PyObject* key, PyObject* value) {
  PyObject* d = materialize(reinterpret_cast<FrameLocalsObject*>(self));  // borrowed
  if (!d) return -1;
  return value ? PyDict_SetItem(d, key, value) : PyObject_DelItem(d, key);
}

// pop, setdefault, update, clear, popitem: dict's own, on the view's dict.
PyObject* on_own_dict(PyObject* self, const char* method, PyObject* const* args, Py_ssize_t nargs,
                      PyObject* kwnames) {
  PyObject* d = materialize(reinterpret_cast<FrameLocalsObject*>(self));  // borrowed
  if (!d) return nullptr;
  PyObject* bound = PyObject_GetAttrString(d, method);  // new
  if (!bound) return nullptr;
  PyObject* r = PyObject_Vectorcall(bound, args, size_t(nargs), kwnames);
  Py_DECREF(bound);
  return r;
}

#define FS_DICT_METHOD(name)                                                            \
  PyObject* locals_dict_##name(PyObject* self, PyObject* const* args, Py_ssize_t nargs, \
                               PyObject* kwnames) {                                     \
    return on_own_dict(self, #name, args, nargs, kwnames);                              \
  }
FS_DICT_METHOD(pop)
FS_DICT_METHOD(setdefault)
FS_DICT_METHOD(update)
FS_DICT_METHOD(clear)
FS_DICT_METHOD(popitem)
#undef FS_DICT_METHOD

// The rest of the Mapping API works on a dict of the current contents.
PyObject* on_dict(PyObject* self, const char* method) {
  PyObject* d = view_dict(reinterpret_cast<FrameLocalsObject*>(self));  // new
  if (!d) return nullptr;
  PyObject* r = PyObject_CallMethod(d, method, nullptr);
  Py_DECREF(d);
  return r;
}
PyObject* locals_keys(PyObject* self, PyObject*) { return on_dict(self, "keys"); }
PyObject* locals_values(PyObject* self, PyObject*) { return on_dict(self, "values"); }
PyObject* locals_items(PyObject* self, PyObject*) { return on_dict(self, "items"); }
PyObject* locals_copy(PyObject* self, PyObject*) {
  return view_dict(reinterpret_cast<FrameLocalsObject*>(self));
}

PyObject* locals_iter(PyObject* self) {
  PyObject* d = view_dict(reinterpret_cast<FrameLocalsObject*>(self));  // new
  if (!d) return nullptr;
  PyObject* it = PyObject_GetIter(d);
  Py_DECREF(d);
  return it;
}

PyObject* locals_richcompare(PyObject* self, PyObject* other, int op) {
  if (op != Py_EQ && op != Py_NE) Py_RETURN_NOTIMPLEMENTED;
  PyObject* d = view_dict(reinterpret_cast<FrameLocalsObject*>(self));  // new
  if (!d) return nullptr;
  PyObject* o = Py_TYPE(other) == &g_frame_locals_type
                    ? view_dict(reinterpret_cast<FrameLocalsObject*>(other))
                    : Py_NewRef(other);
  PyObject* r = o ? PyObject_RichCompare(d, o, op) : nullptr;
  Py_XDECREF(o);
  Py_DECREF(d);
  return r;
}

PyObject* locals_repr(PyObject* self) {
  PyObject* d = view_dict(reinterpret_cast<FrameLocalsObject*>(self));  // new
  if (!d) return nullptr;
  PyObject* r = PyUnicode_FromFormat("FrameLocals(%R)", d);
  Py_DECREF(d);
  return r;
}

int locals_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(reinterpret_cast<FrameLocalsObject*>(self)->snapshot);
  return 0;
}

int locals_clear(PyObject* self) {
  Py_CLEAR(reinterpret_cast<FrameLocalsObject*>(self)->snapshot);
  return 0;
}

void locals_dealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  locals_clear(self);
  Py_TYPE(self)->tp_free(self);
}

PyMappingMethods g_locals_mapping = {locals_length, locals_subscript, locals_ass_subscript};
PySequenceMethods g_locals_sequence = {};
PyNumberMethods g_locals_number = {};

PyMethodDef g_locals_methods[] = {
    {"get", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(locals_get)), METH_FASTCALL,
     "get(key, default=None, /)\n--\n\nThe value of `key`, or default."},
    {"keys", locals_keys, METH_NOARGS, "The names, as a dict view."},
    {"values", locals_values, METH_NOARGS, "The values, as a dict view."},
    {"items", locals_items, METH_NOARGS, "(name, value) pairs, as a dict view."},
    {"copy", locals_copy, METH_NOARGS, "A dict of the contents."},
    {"pop", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(locals_dict_pop)),
     METH_FASTCALL | METH_KEYWORDS, "As dict.pop (the frame never sees writes)."},
    {"setdefault",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(locals_dict_setdefault)),
     METH_FASTCALL | METH_KEYWORDS, "As dict.setdefault (the frame never sees writes)."},
    {"update", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(locals_dict_update)),
     METH_FASTCALL | METH_KEYWORDS, "As dict.update (the frame never sees writes)."},
    {"clear", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(locals_dict_clear)),
     METH_FASTCALL | METH_KEYWORDS, "As dict.clear (the frame never sees writes)."},
    {"popitem", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(locals_dict_popitem)),
     METH_FASTCALL | METH_KEYWORDS, "As dict.popitem (the frame never sees writes)."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

PyObject* build_frame_locals(FsFrame* frame) {
  PyCodeObject* co = frame_code(frame);
  PyObject* dict = PyDict_New();  // new
  if (!dict) return nullptr;
  const int nargs = code_arg_slots(co);
#if FS_PY311
  // In the order of the frame's slots (co_localsplusnames), as torch's dict: arguments, then
  // free variables.
  for (int i = 0; i < nargs; i++) {
    PyObject* value = frame_argument(frame, i);  // borrowed
    if (value && PyDict_SetItem(dict, code_argument_name(co, i), value) < 0) goto error;
  }
#else
  // In the order of 3.10's f_localsplus, as torch's dict (and PyFrame_FastToLocals): arguments
  // in their slots, then the cells -- where an argument that is also a cell lives -- then free
  // variables.
  for (int i = 0; i < nargs; i++) {
    PyObject* value = frame->f_localsplus[i];  // borrowed
    if (value && PyDict_SetItem(dict, code_argument_name(co, i), value) < 0) goto error;
  }
  for (Py_ssize_t k = 0, ncells = PyTuple_GET_SIZE(co->co_cellvars); k < ncells; k++) {
    PyObject* cell = frame->f_localsplus[co->co_nlocals + k];
    PyObject* value = cell && PyCell_Check(cell) ? PyCell_GET(cell) : nullptr;  // borrowed
    if (value && PyDict_SetItem(dict, PyTuple_GET_ITEM(co->co_cellvars, k), value) < 0) {
      goto error;
    }
  }
#endif
  for (int j = 0, n = shown_free_count(co); j < n; j++) {
    PyObject* cell = frame_free_cell(frame, j);
    PyObject* value = cell && PyCell_Check(cell) ? PyCell_GET(cell) : nullptr;  // borrowed
    if (value && PyDict_SetItem(dict, code_free_name(co, j), value) < 0) goto error;
  }
  return dict;
error:
  Py_DECREF(dict);
  return nullptr;
}

FrameLocalsObject* new_frame_locals() {
  auto* self = PyObject_GC_New(FrameLocalsObject, &g_frame_locals_type);
  if (!self) return nullptr;
  self->frame = nullptr;
  self->snapshot = nullptr;
  PyObject_GC_Track(self);
  return self;
}

void release_frame_locals_slow(PyObject* obj) {
  auto* self = reinterpret_cast<FrameLocalsObject*>(obj);
  if (Py_REFCNT(obj) == 1) {
    self->frame = nullptr;
    if (!t_eval.locals_cache) {
      Py_CLEAR(self->snapshot);   // written to during its lookup: back to a blank view
      t_eval.locals_cache = obj;  // recycled for the next lookup on this thread
      return;
    }
  } else if (self->frame) {
    // Kept by a guard, hook or callback: keep the values it showed. Any pending exception (a
    // guard's) is set aside meanwhile.
    PendingError pending;
    pending.take();
    self->snapshot = build_frame_locals(self->frame);
    if (!self->snapshot) PyErr_Clear();
    self->frame = nullptr;
    pending.restore();
  }
  Py_DECREF(obj);
}

void release_thread_locals_cache() { Py_CLEAR(t_eval.locals_cache); }

bool eval_frame_locals_init(PyObject* module) {
  PyTypeObject* t = &g_frame_locals_type;
  t->tp_name = "framescope.eval_frame.FrameLocals";
  t->tp_basicsize = sizeof(FrameLocalsObject);
  t->tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC;
  t->tp_doc = PyDoc_STR(
      "The f_locals guards, guard hooks and callbacks receive (torch's frame locals): a mapping of "
      "the frame's bound arguments and, for function bodies, of its free variables that hold a "
      "value. Read from the frame while the lookup runs; writes go to a dict of its own, seen by "
      "the rest of the lookup, never by the frame; a copy of the values if kept afterwards.");
  t->tp_dealloc = locals_dealloc;
  t->tp_traverse = locals_traverse;
  t->tp_clear = locals_clear;
  t->tp_repr = locals_repr;
  t->tp_as_mapping = &g_locals_mapping;
  g_locals_sequence.sq_contains = locals_contains;
  t->tp_as_sequence = &g_locals_sequence;
  g_locals_number.nb_bool = locals_bool;
  t->tp_as_number = &g_locals_number;
  t->tp_iter = locals_iter;
  t->tp_richcompare = locals_richcompare;
  t->tp_hash = PyObject_HashNotImplemented;
  t->tp_methods = g_locals_methods;
  if (PyType_Ready(t) < 0) return false;
  return PyModule_AddObjectRef(module, "FrameLocals", reinterpret_cast<PyObject*>(t)) == 0;
}

int frame_local_index(PyCodeObject* co, PyObject* name) noexcept {
  const int nargs = code_arg_slots(co);
  const int nfree = shown_free_count(co);
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < nargs + nfree; i++) {
      PyObject* n = i < nargs ? code_argument_name(co, i) : code_free_name(co, i - nargs);
      if (pass == 0 ? n == name : PyUnicode_Compare(n, name) == 0) return i;
    }
  }
  return -1;
}

bool frame_binds_a_later_value(FsFrame* f) noexcept {
  PyCodeObject* co = frame_code(f);
  for (int i = 0, nargs = code_arg_slots(co); i < nargs; i++) {
    if (frame_argument(f, i)) return true;
  }
  for (int j = 0, nfree = shown_free_count(co); j < nfree; j++) {
    PyObject* cell = frame_free_cell(f, j);
    if (cell && PyCell_Check(cell) && PyCell_GET(cell)) return true;
  }
  return false;
}

}  // namespace framescope::py
