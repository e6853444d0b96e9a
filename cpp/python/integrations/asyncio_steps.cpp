// cpp/python/integrations/asyncio_steps.cpp: asyncio's Handle._run, replaced while a session
// records, runs each step of a Task inside a range named after the Task (_asyncio_tasks).
//
// Why it looks like this: the replacement runs for every callback an event loop runs, so its
// cost is the attribution's cost (bench/asyncio_tasks.py). Measured with callgrind on 3.12, a
// first C version (an instancemethod around a C function, getattr of `_callback` and
// `__self__`, isinstance against a tuple) executed ~2,800 more instructions per Task step than
// no attribution, ~10% of an asyncio-heavy program of empty steps: the bound method allocated
// per call (and LOAD_ATTR left unspecialized), generic attribute lookups (each a type lookup, a
// thread-state TLS read), isinstance falling back to `__class__`. Now:
//   - `_run` is a method descriptor of Handle: the interpreter specializes `handle._run()` to a
//     direct C call with `self`, as for a C method (no bound method);
//   - `_callback` is read from its slot (Handle declares __slots__: a member at a fixed offset);
//   - the Task behind a callback is the `self` of a builtin method (a C Task's __wakeup), of a
//     bound method (the Python Task's __step/__wakeup) or of a C Task's step wrapper (its
//     `__self__` getter, looked up once);
//   - the Task's type is compared by pointer (subclasses: PyType_IsSubtype, no `__class__`);
// so a Task step costs a hash lookup and a static-name range (two 16-byte events, the core's
// fastest), and any other callback a slot read and a type check.
#include <Python.h>

#if PY_VERSION_HEX < 0x030C0000
#include <structmember.h>  // T_OBJECT_EX (Py_T_OBJECT_EX from 3.12 on)
#endif

#include <cstring>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "framescope/record_function.h"

namespace framescope::py {

namespace {

PyObject* g_original_run = nullptr;  // asyncio.events.Handle._run
PyObject* g_get_name = nullptr;      // interned "get_name"
uint64_t g_task_number = 0;          // numbers the Tasks' names, unique in the process
PyObject* g_self = nullptr;          // interned "__self__"
PyObject* g_callback = nullptr;      // interned "_callback"
// The Task classes (asyncio.Task, the Python Task): compared by pointer first.
constexpr int kMaxTaskTypes = 4;
PyTypeObject* g_task_types[kMaxTaskTypes] = {};
int g_task_type_count = 0;
// Where Handle keeps `_callback` (its __slots__ member), or -1: read it with getattr.
Py_ssize_t g_callback_offset = -1;
// The C Task's step wrapper (TaskStepMethWrapper: what a C Task schedules for its first step and
// after a bare `yield`, as in sleep(0)) and its `__self__` getter, learned at first sight.
PyTypeObject* g_wrapper_type = nullptr;
getter g_wrapper_get = nullptr;
void* g_wrapper_closure = nullptr;

struct TaskName {
  PyObject* ref;     // weak reference to the Task: an address reused by a later Task differs
  const char* name;  // static storage: the core records the pointer (see names())
};
std::unordered_map<PyObject*, TaskName> g_tasks;

// The object a weak reference points to is `target` (a borrowed comparison).
bool refers_to(PyObject* ref, PyObject* target) {
#if PY_VERSION_HEX >= 0x030D0000
  PyObject* o = nullptr;
  if (PyWeakref_GetRef(ref, &o) < 0) {
    PyErr_Clear();
    return false;
  }
  Py_XDECREF(o);
  return o == target;
#else
  return PyWeakref_GetObject(ref) == target;
#endif
}

// getattr(o, name) or nullptr without an error when o has no such attribute; -1 on errors.
int optional_attr(PyObject* o, PyObject* name, PyObject** out) {
#if PY_VERSION_HEX >= 0x030D0000
  return PyObject_GetOptionalAttr(o, name, out);
#else
  return _PyObject_LookupAttr(o, name, out);
#endif
}

// Range names live as long as the process (the core keeps their pointers in recorded events
// until the trace is resolved): one per Task named while recording, never freed.
std::unordered_set<std::string>& names() {
  static auto* set = new std::unordered_set<std::string>();
  return *set;
}

const char* name_of(PyObject* task) {
  auto it = g_tasks.find(task);
  if (it != g_tasks.end()) {
    if (refers_to(it->second.ref, task)) return it->second.name;
    Py_DECREF(it->second.ref);
    g_tasks.erase(it);
  }
  // "asyncio.Task <name> #<n>", made at the Task's first step (a TaskGroup names its Task after
  // creating it) in C: a Task's steps may be few (bench/asyncio_tasks.py: ~50), so its naming
  // counts too (a Python namer took a few us per Task).
  std::string text = "asyncio.Task ";
  PyObject* given = PyObject_CallMethodNoArgs(task, g_get_name);
  Py_ssize_t size = 0;
  const char* utf8 =
      given && PyUnicode_Check(given) ? PyUnicode_AsUTF8AndSize(given, &size) : nullptr;
  if (utf8) {
    text.append(utf8, size_t(size));
  } else {  // a Task subclass's odd get_name, a name with lone surrogates
    PyErr_Clear();
    text += "Task";
  }
  Py_XDECREF(given);
  text += " #";
  text += std::to_string(++g_task_number);
  const char* name = names().insert(std::move(text)).first->c_str();
  PyObject* ref = PyWeakref_NewRef(task, nullptr);
  if (!ref) return nullptr;
  g_tasks.emplace(task, TaskName{ref, name});
  return name;
}

bool is_task(PyObject* o) {
  PyTypeObject* t = Py_TYPE(o);
  for (int i = 0; i < g_task_type_count; ++i) {
    if (t == g_task_types[i]) return true;
  }
  for (int i = 0; i < g_task_type_count; ++i) {
    if (PyType_IsSubtype(t, g_task_types[i])) return true;  // a Task subclass
  }
  return false;
}

// Learns `type`'s `__self__` getter when it is the C Task's step wrapper.
void learn_wrapper(PyTypeObject* type) {
  const char* name = type->tp_name;
  const char* dot = strrchr(name, '.');
  if (strcmp(dot ? dot + 1 : name, "TaskStepMethWrapper") != 0) return;
  PyObject* descr = PyObject_GetAttr(reinterpret_cast<PyObject*>(type), g_self);
  if (!descr) {
    PyErr_Clear();
    return;
  }
  if (Py_TYPE(descr) == &PyGetSetDescr_Type) {
    PyGetSetDef* def = reinterpret_cast<PyGetSetDescrObject*>(descr)->d_getset;
    if (def && def->get) {
      g_wrapper_get = def->get;
      g_wrapper_closure = def->closure;
      g_wrapper_type = type;
      Py_INCREF(type);  // held for the process (the pointer is compared)
    }
  }
  Py_DECREF(descr);
}

// The Task whose step `callback` is (a new reference), nullptr when it is no Task's; -1 on error.
int task_of(PyObject* callback, PyObject** task) {
  *task = nullptr;
  PyObject* self = nullptr;
  PyTypeObject* type = Py_TYPE(callback);
  if (type == g_wrapper_type) {
    self = g_wrapper_get(callback, g_wrapper_closure);
    if (!self) return -1;
  } else if (PyCFunction_Check(callback)) {  // a C Task's __wakeup
    self =
        (PyCFunction_GET_FLAGS(callback) & METH_STATIC) ? nullptr : PyCFunction_GET_SELF(callback);
    Py_XINCREF(self);
  } else if (PyMethod_Check(callback)) {  // the Python Task's __step / __wakeup
    self = PyMethod_GET_SELF(callback);
    Py_INCREF(self);
  } else if (PyFunction_Check(callback)) {
    return 0;
  } else {
    if (!g_wrapper_type) {
      learn_wrapper(type);
      if (type == g_wrapper_type) return task_of(callback, task);
    }
    if (optional_attr(callback, g_self, &self) < 0) return -1;  // other callables
  }
  if (self && is_task(self)) {
    *task = self;
    return 0;
  }
  Py_XDECREF(self);
  return 0;
}

// Handle._run(self): the original, inside the Task's range when the callback is a Task's step.
PyObject* task_step_run(PyObject* handle, PyObject*) {
  PyObject* callback;
  if (g_callback_offset >= 0) {
    callback = *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(handle) + g_callback_offset);
    Py_XINCREF(callback);
  } else {
    callback = PyObject_GetAttr(handle, g_callback);
    if (!callback) return nullptr;
  }
  PyObject* task = nullptr;
  const int found = callback ? task_of(callback, &task) : 0;
  Py_XDECREF(callback);
  if (found < 0) return nullptr;
  if (!task) return PyObject_CallOneArg(g_original_run, handle);
  const char* name = name_of(task);
  Py_DECREF(task);
  if (!name) return nullptr;
  RecordFunction range(name, RecordScope::kUserScope);
  return PyObject_CallOneArg(g_original_run, handle);
}

// METH_NOARGS, installed as a method descriptor of Handle (see the file's comment).
PyMethodDef g_step_def = {"_run", task_step_run, METH_NOARGS,
                          "asyncio's Handle._run, inside the Task's range when the callback is a "
                          "Task's step (framescope._asyncio_tasks)."};

// The offset of `cls`'s `_callback` slot, or -1 when it is not a plain object slot.
Py_ssize_t callback_offset(PyObject* cls) {
  PyObject* descr = PyObject_GetAttr(cls, g_callback);
  if (!descr) {
    PyErr_Clear();
    return -1;
  }
  Py_ssize_t offset = -1;
  if (Py_TYPE(descr) == &PyMemberDescr_Type) {
    PyMemberDef* m = reinterpret_cast<PyMemberDescrObject*>(descr)->d_member;
#if PY_VERSION_HEX >= 0x030C0000
    constexpr int kObjectSlot = Py_T_OBJECT_EX;
#else
    constexpr int kObjectSlot = T_OBJECT_EX;
#endif
    if (m && m->type == kObjectSlot) offset = m->offset;
  }
  Py_DECREF(descr);
  return offset;
}

// _asyncio_steps_install(handle_class, task_types) -> None: replaces handle_class._run
// (idempotent).
PyObject* install(PyObject*, PyObject* args) {
  PyObject *cls, *types;
  if (!PyArg_ParseTuple(args, "O!O!:_asyncio_steps_install", &PyType_Type, &cls, &PyTuple_Type,
                        &types)) {
    return nullptr;
  }
  if (g_original_run) Py_RETURN_NONE;
  const Py_ssize_t n = PyTuple_GET_SIZE(types);
  if (n < 1 || n > kMaxTaskTypes) {
    PyErr_SetString(PyExc_ValueError, "task_types must hold 1 to 4 classes");
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!PyType_Check(PyTuple_GET_ITEM(types, i))) {
      PyErr_SetString(PyExc_TypeError, "task_types must hold classes");
      return nullptr;
    }
  }
  PyObject* original = PyObject_GetAttrString(cls, "_run");
  if (!original) return nullptr;
  PyObject* method = PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(cls), &g_step_def);
  if (!method || PyObject_SetAttrString(cls, "_run", method) < 0) {
    Py_XDECREF(method);
    Py_DECREF(original);
    return nullptr;
  }
  Py_DECREF(method);
  g_original_run = original;
  g_callback_offset = callback_offset(cls);
  for (int i = 0; i < g_task_type_count; ++i) Py_CLEAR(g_task_types[i]);
  g_task_type_count = int(n);
  for (Py_ssize_t i = 0; i < n; ++i) {
    g_task_types[i] = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(types, i));
    Py_INCREF(g_task_types[i]);
  }
  Py_RETURN_NONE;
}

// _asyncio_task_name(task) -> str: the name of the Task's range (made now if it has none).
PyObject* task_name(PyObject*, PyObject* task) {
  const char* name = name_of(task);
  return name ? PyUnicode_FromString(name) : nullptr;
}

// _asyncio_steps_uninstall(handle_class) -> None: puts the original back; forgets the Tasks.
PyObject* uninstall(PyObject*, PyObject* cls) {
  if (g_original_run) {
    if (PyObject_SetAttrString(cls, "_run", g_original_run) < 0) return nullptr;
    Py_CLEAR(g_original_run);
  }
  for (auto& [task, entry] : g_tasks) Py_DECREF(entry.ref);
  g_tasks.clear();
  Py_RETURN_NONE;
}

PyMethodDef g_methods[] = {
    {"_asyncio_steps_install", install, METH_VARARGS,
     "Replaces handle_class._run: a callback bound to an instance of task_types runs inside the "
     "Task's range."},
    {"_asyncio_task_name", task_name, METH_O,
     "The name of a Task's range: 'asyncio.Task <name> #<n>', made once per Task."},
    {"_asyncio_steps_uninstall", uninstall, METH_O, "Puts handle_class._run back."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

bool asyncio_steps_init(PyObject* module) {
  g_callback = PyUnicode_InternFromString("_callback");
  g_self = PyUnicode_InternFromString("__self__");
  g_get_name = PyUnicode_InternFromString("get_name");
  return g_callback && g_self && g_get_name && PyModule_AddFunctions(module, g_methods) == 0;
}

}  // namespace framescope::py
