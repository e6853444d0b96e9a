// cpp/python/bindings/event_object.cpp: the Event type (see event_object.h).
#include "bindings/event_object.h"

#include <structmember.h>

#include <algorithm>
#include <cstddef>

namespace framescope::py {

namespace {

struct EventObject {
  PyObject ob_base;  // PyObject_HEAD
  PyObject* names;   // strong: tuple of str
  long long index;
  long long start_ns;
  long long dur_ns;
  long long parent;
  unsigned int symbol;
  unsigned int thread;
  unsigned int depth;
  unsigned char category;
  char open_at_stop;
};

PyTypeObject* g_event_type = nullptr;  // strong, for the process

// Freed events kept for reuse (GIL-protected): an iteration frees one event as it makes the
// next, so a short list saves the allocator round trip almost every time.
constexpr int kFreeListMax = 64;
EventObject* g_free[kFreeListMax];
int g_free_count = 0;

void event_dealloc(PyObject* self) {
  auto* e = reinterpret_cast<EventObject*>(self);
  Py_CLEAR(e->names);
  PyTypeObject* type = Py_TYPE(self);
  if (g_free_count < kFreeListMax) {
    g_free[g_free_count++] = e;
  } else {
    PyObject_Free(self);
  }
  Py_DECREF(type);  // heap type: each instance holds a reference (PyObject_Init takes it again)
}

PyObject* get_name(PyObject* self, void*) {
  auto* e = reinterpret_cast<EventObject*>(self);
  if (e->symbol < size_t(PyTuple_GET_SIZE(e->names))) {
    PyObject* s = PyTuple_GET_ITEM(e->names, e->symbol);  // borrowed
    Py_INCREF(s);
    return s;
  }
  return PyUnicode_FromString("<unknown>");
}

PyObject* get_category(PyObject* self, void*) {
  auto* e = reinterpret_cast<EventObject*>(self);
  return PyUnicode_InternFromString(category_name(EventCategory(e->category)));
}

PyObject* get_parent(PyObject* self, void*) {
  auto* e = reinterpret_cast<EventObject*>(self);
  if (e->parent < 0) Py_RETURN_NONE;
  return PyLong_FromLongLong(e->parent);
}

PyObject* get_end(PyObject* self, void*) {
  auto* e = reinterpret_cast<EventObject*>(self);
  return PyLong_FromLongLong(e->start_ns + std::max<long long>(0, e->dur_ns));
}

PyObject* get_open_at_stop(PyObject* self, void*) {
  return PyBool_FromLong(reinterpret_cast<EventObject*>(self)->open_at_stop);
}

PyObject* event_richcompare(PyObject* a, PyObject* b, int op) {
  if ((op != Py_EQ && op != Py_NE) || !PyObject_TypeCheck(b, g_event_type)) {
    Py_RETURN_NOTIMPLEMENTED;
  }
  auto* x = reinterpret_cast<EventObject*>(a);
  auto* y = reinterpret_cast<EventObject*>(b);
  const bool equal = x->names == y->names && x->index == y->index;
  return PyBool_FromLong(op == Py_EQ ? equal : !equal);
}

Py_hash_t event_hash(PyObject* self) {
  const Py_hash_t h = Py_hash_t(reinterpret_cast<EventObject*>(self)->index);
  return h == -1 ? -2 : h;
}

PyObject* event_repr(PyObject* self) {
  auto* e = reinterpret_cast<EventObject*>(self);
  PyObject* name = get_name(self, nullptr);  // new
  if (!name) return nullptr;
  PyObject* parent = get_parent(self, nullptr);  // new
  if (!parent) {
    Py_DECREF(name);
    return nullptr;
  }
  PyObject* out = PyUnicode_FromFormat(
      "Event(index=%lld, name=%R, category='%s', thread=%u, start_ns=%lld, duration_ns=%lld, "
      "parent=%S, depth=%u)",
      e->index, name, category_name(EventCategory(e->category)), e->thread, e->start_ns, e->dur_ns,
      parent, e->depth);
  Py_DECREF(name);
  Py_DECREF(parent);
  return out;
}

PyMemberDef kMembers[] = {
    {"index", T_LONGLONG, offsetof(EventObject, index), READONLY, "number in the trace"},
    {"thread", T_UINT, offsetof(EventObject, thread), READONLY, "index into Trace.threads"},
    {"start_ns", T_LONGLONG, offsetof(EventObject, start_ns), READONLY, "CLOCK_MONOTONIC ns"},
    {"duration_ns", T_LONGLONG, offsetof(EventObject, dur_ns), READONLY, "-1 for a mark"},
    {"depth", T_UINT, offsetof(EventObject, depth), READONLY, "enclosing events"},
    {nullptr, 0, 0, 0, nullptr},
};

PyGetSetDef kGetSet[] = {
    {"name", get_name, nullptr, "function or range name", nullptr},
    {"category", get_category, nullptr, "Chrome/Kineto category", nullptr},
    {"parent", get_parent, nullptr, "index of the enclosing event, or None", nullptr},
    {"end_ns", get_end, nullptr, "start_ns + max(0, duration_ns)", nullptr},
    {"open_at_stop", get_open_at_stop, nullptr, "still running when the session stopped", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyType_Slot kSlots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(event_dealloc)},
    {Py_tp_richcompare, reinterpret_cast<void*>(event_richcompare)},
    {Py_tp_hash, reinterpret_cast<void*>(event_hash)},
    {Py_tp_repr, reinterpret_cast<void*>(event_repr)},
    {Py_tp_members, kMembers},
    {Py_tp_getset, kGetSet},
    {Py_tp_doc, const_cast<char*>("One event: a Python call, a range, a builtin call or a mark.")},
    {0, nullptr},
};

// Not subclassable and not constructible from Python (no tp_new): events come from traces.
PyType_Spec kSpec = {"framescope._core.Event", sizeof(EventObject), 0,
                     Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, kSlots};

}  // namespace

bool event_type_init(PyObject* module) {
  g_event_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kSpec));  // new
  if (!g_event_type) return false;
  Py_INCREF(g_event_type);
  if (PyModule_AddObject(module, "Event", reinterpret_cast<PyObject*>(g_event_type)) < 0) {
    Py_DECREF(g_event_type);
    return false;
  }
  return true;
}

PyObject* new_event(PyObject* names, const EventValues& v) noexcept {
  EventObject* e;
  if (g_free_count > 0) {
    e = g_free[--g_free_count];
    PyObject_Init(reinterpret_cast<PyObject*>(e), g_event_type);
  } else {
    e = PyObject_New(EventObject, g_event_type);  // holds a reference to the type
    if (!e) return nullptr;
  }
  Py_INCREF(names);
  e->names = names;
  e->index = static_cast<long long>(v.index);
  e->start_ns = v.start_ns;
  e->dur_ns = v.dur_ns;
  e->parent = v.parent;
  e->symbol = v.symbol;
  e->thread = v.thread;
  e->depth = v.depth;
  e->category = static_cast<unsigned char>(v.category);
  e->open_at_stop = v.open_at_stop ? 1 : 0;
  return reinterpret_cast<PyObject*>(e);
}

}  // namespace framescope::py
