// cpp/python/tracer/inline_frames.cpp: 3.13 __init__ frames pushed by CALL_ALLOC_AND_ENTER_INIT,
// recorded through sys.monitoring since the PEP 523 hook never sees them.
#include "tracer/inline_frames.h"

#include <vector>

#include "framescope/clock.h"
#include "framescope/internal/thread_buffer.h"
#include "tracer/frame_hook.h"
#include "tracer/memory_hooks.h"
#include "tracer/tracer.h"

namespace framescope::py {

#if FS_PY313
namespace {

// Inline frames whose call this thread recorded and whose return it has not (innermost last),
// in session `epoch` (entries of an earlier session are dropped at the next call: a session's
// stop cannot reach other threads' stacks). The callbacks run on every call of a watched code, so
// they reach the stack through an initial-exec pointer (a plain %fs load) rather than the
// thread_local vector itself (a __tls_get_addr call and an init-guard check per access in a
// dlopen()ed module); the vector owns the storage and frees it at thread exit.
struct InlineFrames {
  std::vector<const FsFrame*>* frames;  // this thread's t_inline_storage, once used
  uint64_t epoch;
};
__thread InlineFrames t_inline FRAMESCOPE_TLS_IE = {nullptr, 0};
thread_local std::vector<const FsFrame*> t_inline_storage;
bool g_active = false;

// This thread's stack of inline frames for the current session.
std::vector<const FsFrame*>& inline_frames() {
  if (FRAMESCOPE_UNLIKELY(!t_inline.frames)) t_inline.frames = &t_inline_storage;
  if (FRAMESCOPE_UNLIKELY(t_inline.epoch != g_tracer.epoch)) {
    t_inline.frames->clear();
    t_inline.epoch = g_tracer.epoch;
  }
  return *t_inline.frames;
}

// Asks sys.monitoring for the starts and ends of `code`'s frames (clears any error: a code
// that cannot be watched keeps only its hooked calls).
void watch(PyCodeObject* code) {
  if (!monitoring_watch_code(code, kWatchStarts | kWatchEnds)) PyErr_Clear();
}

PyObject* init_name() {
  static PyObject* name = PyUnicode_InternFromString("__init__");  // kept for the process
  return name;
}

// True when a CALL_ALLOC_AND_ENTER_INIT site may enter `code` as an __init__: a plain function
// (no *args, **kwargs or keyword-only arguments).
bool can_be_inlined(PyCodeObject* code) {
  return !(code->co_flags & (CO_VARARGS | CO_VARKEYWORDS)) && code->co_kwonlyargcount == 0 &&
         (code->co_flags & CO_OPTIMIZED);
}

// The __init__ code a CALL_ALLOC_AND_ENTER_INIT site would enter for class `type`, as 3.13's
// specializer decides (specialize_class_call): a heap type that allocates with object.__new__
// and PyType_GenericAlloc and keeps inline values, whose __init__ is a plain Python function
// (no *args, **kwargs or keyword-only arguments). Borrowed; null when no site can.
PyCodeObject* inlinable_init_code(PyTypeObject* type) {
  if (!(type->tp_flags & Py_TPFLAGS_HEAPTYPE) || !(type->tp_flags & Py_TPFLAGS_INLINE_VALUES) ||
      type->tp_new != PyBaseObject_Type.tp_new || type->tp_alloc != PyType_GenericAlloc) {
    return nullptr;
  }
  PyObject* name = init_name();
  PyObject* init = name ? _PyType_Lookup(type, name) : nullptr;  // borrowed
  if (!init || !PyFunction_Check(init)) return nullptr;
  auto* code = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(init));
  return can_be_inlined(code) ? code : nullptr;
}

// True when no class deriving from `type` can have its instances' values inline (a
// CALL_ALLOC_AND_ENTER_INIT site needs that): `type` lays out more than the object header (a
// __slots__ entry, a C base with fields), which every subclass inherits (3.13 gives inline values
// only to a class of basic size sizeof(PyObject) and item size 0, type_ready_managed_dict).
bool subclasses_never_inline(PyTypeObject* type) {
  return type->tp_basicsize != static_cast<Py_ssize_t>(sizeof(PyObject)) || type->tp_itemsize != 0;
}

// The class of `type`'s MRO whose own dict holds the __init__ `type` runs, when that __init__ is
// a function of `code`; null otherwise. Borrowed.
PyTypeObject* init_definer(PyTypeObject* type, PyCodeObject* code) {
  PyObject* mro = type->tp_mro;
  PyObject* name = init_name();
  if (!mro || !PyTuple_Check(mro) || !name) return nullptr;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); ++i) {
    PyObject* base = PyTuple_GET_ITEM(mro, i);
    if (!PyType_Check(base)) continue;
    PyObject* dict = reinterpret_cast<PyTypeObject*>(base)->tp_dict;
    PyObject* init =
        dict && PyDict_CheckExact(dict) ? PyDict_GetItemWithError(dict, name) : nullptr;
    if (!init) {
      if (PyErr_Occurred()) return nullptr;
      continue;
    }
    return PyFunction_Check(init) && PyFunction_GET_CODE(init) == reinterpret_cast<PyObject*>(code)
               ? reinterpret_cast<PyTypeObject*>(base)
               : nullptr;
  }
  return nullptr;
}

// True when `name` is a __slots__ entry that lays out a field (__dict__ and __weakref__ are
// managed outside the object's basic size on 3.13).
bool is_field_slot(PyObject* name) {
  return PyUnicode_CheckExact(name) && PyUnicode_CompareWithASCIIString(name, "__dict__") != 0 &&
         PyUnicode_CompareWithASCIIString(name, "__weakref__") != 0;
}

// True when `dict` (a class statement's namespace, or a class's dict) holds a __slots__ with a
// field: that class, and every class deriving from it, lays out more than the object header, so
// no site inlines an __init__ for them (subclasses_never_inline). Reads the dict's own storage
// only (no __getitem__ of a dict subclass runs).
bool has_field_slots(PyObject* dict) {
  PyObject* slots = PyDict_GetItemString(dict, "__slots__");  // borrowed, no error
  if (!slots) return false;
  if (PyUnicode_CheckExact(slots)) return is_field_slot(slots);
  if (!PyTuple_CheckExact(slots) && !PyList_CheckExact(slots)) return false;
  PyObject** items = PySequence_Fast_ITEMS(slots);
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(slots); ++i) {
    if (is_field_slot(items[i])) return true;
  }
  return false;
}

// The namespace of `frame` when it runs a class statement's body (or exec() with separate
// locals): a dict other than its globals. Borrowed; null otherwise.
PyObject* class_body_namespace(FsFrame* frame) {
  if (!frame || (frame_code(frame)->co_flags & CO_OPTIMIZED)) return nullptr;
  PyObject* ns = frame->f_locals;
  return ns && ns != frame->f_globals && PyDict_Check(ns) ? ns : nullptr;
}

// Dict watcher on the dict of every heap type seen at the session's start, and on the namespace
// of every class statement run during the session (inline_frames_class_body_started). Such a
// class may get another __init__ (`Cls.__init__ = f`, or `__init__ = f` in a class body, f made
// before the session or under another name, perhaps already called through another receiver, so
// registered unwatched), which the specializer then inlines for it. A type watcher would not do:
// CPython reports a type's modification before the new attribute is in its dict. Kept for the
// process: watcher ids are few (8), and the dicts keep our bit. -1 when none was free: then the
// __init__ of a class with __slots__ is watched too (see subclasses_never_inline).
int g_dict_watcher = -1;

bool is_init_name(PyObject* name);

int on_type_dict_event(PyDict_WatchEvent event, PyObject* dict, PyObject* key,
                       PyObject* new_value) {
  if (!g_active || (event != PyDict_EVENT_ADDED && event != PyDict_EVENT_MODIFIED) || !key ||
      !new_value || !is_init_name(key) || !PyFunction_Check(new_value)) {
    return 0;
  }
  auto* code = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(new_value));
  if (!can_be_inlined(code)) return 0;
  PyObject *t, *value, *tb;
  PyErr_Fetch(&t, &value, &tb);
  if (!has_field_slots(dict)) watch(code);
  PyErr_Restore(t, value, tb);
  return 0;
}

// Watches the inlinable __init__ of `type` and of its subclasses, recursively. A site that
// warmed up before the session may specialize at its first call in it, never passing through
// the hook, so every class it could specialize for is watched from the start.
bool watch_type_tree(PyTypeObject* type, int depth) {
  if (depth > 1000) return true;  // (a cycle cannot happen; a pathological depth is ignored)
  if (PyCodeObject* code = inlinable_init_code(type)) watch(code);
  if (g_dict_watcher >= 0 && (type->tp_flags & Py_TPFLAGS_HEAPTYPE) && type->tp_dict &&
      PyDict_Watch(g_dict_watcher, type->tp_dict) < 0) {
    PyErr_Clear();
  }
  // type.__subclasses__(t), not t.__subclasses__(): for t = type itself that is unbound.
  PyObject* subclasses = PyObject_CallMethod(reinterpret_cast<PyObject*>(&PyType_Type),
                                             "__subclasses__", "O", type);  // new
  if (!subclasses) return false;
  bool ok = true;
  for (Py_ssize_t i = 0; ok && i < PyList_GET_SIZE(subclasses); ++i) {
    PyObject* sub = PyList_GET_ITEM(subclasses, i);  // borrowed
    if (PyType_Check(sub)) ok = watch_type_tree(reinterpret_cast<PyTypeObject*>(sub), depth + 1);
  }
  Py_DECREF(subclasses);
  return ok;
}

bool is_init_name(PyObject* name) {
  // Code names are interned, so a pointer compare with the interned "__init__" decides for
  // them; the string compare is for the rare one that is not. (The function watcher asks this
  // for every function made during the session, __init__ or not.)
  if (name == init_name()) return true;
  if (!PyUnicode_Check(name) || PyUnicode_CHECK_INTERNED(name)) return false;
  return PyUnicode_CompareWithASCIIString(name, "__init__") == 0;
}

// Function watcher: every function made during the session (a class statement's methods, a
// dataclass's generated __init__) passes here. A class made in the session can be instantiated
// at a site that warmed up before it, which specializes at the call's first run, so its __init__
// is watched as soon as it exists.
int g_function_watcher = -1;

int on_function_event(PyFunction_WatchEvent event, PyFunctionObject* func, PyObject* new_value) {
  PyObject* code = event == PyFunction_EVENT_MODIFY_CODE ? new_value
                   : event == PyFunction_EVENT_CREATE    ? func->func_code
                                                         : nullptr;
  if (!g_active || !code || !PyCode_Check(code)) return 0;
  auto* c = reinterpret_cast<PyCodeObject*>(code);
  if (!is_init_name(c->co_name)) return 0;
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  // A class body's __init__ is decided when the body stores it (on_type_dict_event): not at
  // all when the class has __slots__ fields.
  PyThreadState* ts = current_thread_state();
  PyObject* ns = event == PyFunction_EVENT_CREATE && ts && g_dict_watcher >= 0
                     ? class_body_namespace(current_interpreter_frame(ts))
                     : nullptr;
  if (!ns || !has_field_slots(ns)) watch(c);
  PyErr_Restore(type, value, tb);
  return 0;
}

}  // namespace

bool inline_frames_start() {
  g_active = true;
  if (g_function_watcher < 0) {
    g_function_watcher = PyFunction_AddWatcher(on_function_event);
    if (g_function_watcher < 0) return false;
  }
  if (g_dict_watcher < 0) {
    g_dict_watcher = PyDict_AddWatcher(on_type_dict_event);
    if (g_dict_watcher < 0) PyErr_Clear();  // (all taken: reassigned __init__ go unwatched)
  }
  return watch_type_tree(&PyBaseObject_Type, 0);
}

void inline_frames_stop() {
  g_active = false;
  if (t_inline.frames) t_inline.frames->clear();
  if (g_function_watcher >= 0) {
    if (PyFunction_ClearWatcher(g_function_watcher) < 0) PyErr_Clear();
    g_function_watcher = -1;
  }
}

void inline_frames_code_registered(PyCodeObject* code, FsFrame* frame) {
  if (!g_active || !frame || code->co_argcount < 1) return;
  // The __init__ its first argument's class runs, when a site can inline it for that class:
  // a class made during the session whose __init__ is a function made before (by any name).
  // And a function named __init__ whatever its first receiver (a direct Base.__init__(self)
  // call, a subclass that cannot be inlined): registration happens once per session, and a
  // class made during the session may inherit it and be inlined. Not when the class defining
  // it lays out fields (__slots__): no class deriving from that one is inlined. Only these:
  // every watched code pays two callbacks per call.
  PyObject* self = frame->localsplus[0];
  const bool has_self = self && !PyCell_Check(self);
  const bool inlined_for_self = has_self && inlinable_init_code(Py_TYPE(self)) == code;
  if (!inlined_for_self && (!is_init_name(code->co_name) || !can_be_inlined(code))) return;
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);  // the hook may run a frame with an exception set
  PyTypeObject* definer =
      inlined_for_self || !has_self ? nullptr : init_definer(Py_TYPE(self), code);
  PyErr_Clear();  // (a failed dict lookup: no definer, so watched, to be safe)
  if (!definer || !subclasses_never_inline(definer) || g_dict_watcher < 0) watch(code);
  PyErr_Restore(type, value, tb);
}

void inline_frames_class_body_started(FsFrame* frame) {
  if (!g_active || g_dict_watcher < 0) return;
  if (PyObject* ns = class_body_namespace(frame)) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (PyDict_Watch(g_dict_watcher, ns) < 0) PyErr_Clear();
    PyErr_Restore(type, value, tb);
  }
}

void inline_frame_started(PyCodeObject* code, FsFrame* frame) {
  if (!g_active || !frame_entered_inline(frame)) return;
  internal::ThreadBuffer* buffer = internal::current_buffer();
  if (!buffer || !hook_records_frames()) return;
  const uint64_t ticks = now_ticks();
  const uint64_t key = frame_key(code, frame);
  if (!key) return;
  if (g_memory_tracking) flush_allocations(buffer, ticks);
  buffer->append(ticks, internal::pack_word(internal::EventKind::kPyCall, key));
  inline_frames().push_back(frame);
}

void inline_frame_ended(FsFrame* frame) {
  // (Only frames this session recorded: the epoch tag tells an older session's entries.)
  if (!t_inline.frames || t_inline.epoch != g_tracer.epoch) return;
  std::vector<const FsFrame*>& frames = *t_inline.frames;
  if (frames.empty() || frames.back() != frame) return;
  frames.pop_back();
  if (internal::ThreadBuffer* buffer = internal::current_buffer()) {
    const uint64_t ticks = now_ticks();
    if (g_memory_tracking) flush_allocations(buffer, ticks);
    buffer->append(ticks, internal::pack_word(internal::EventKind::kPyReturn, 0));
  }
}

#else
bool inline_frames_start() { return true; }
void inline_frames_stop() {}
void inline_frames_code_registered(PyCodeObject*, FsFrame*) {}
void inline_frames_class_body_started(FsFrame*) {}
void inline_frame_started(PyCodeObject*, FsFrame*) {}
void inline_frame_ended(FsFrame*) {}
#endif

}  // namespace framescope::py
