// cpp/python/integrations/asyncio_steps.cpp: asyncio's Handle._run, replaced while a session
// records, runs each step of a Task inside a range named after the Task (_asyncio_tasks).
//
// Why C: the replacement runs for every callback an event loop runs; as Python code it cost
// 10-30% of an asyncio-heavy program (a frame, attribute reads, a dictionary lookup, two calls
// into the core per step). Here a step costs two attribute reads, a type check, a hash lookup
// and a static-name range (the core's fastest), and any other callback one attribute read more
// than before.
#include <Python.h>

#include <string>
#include <unordered_map>
#include <unordered_set>

#include "framescope/record_function.h"

namespace framescope::py {

namespace {

PyObject* g_original_run = nullptr;  // asyncio.events.Handle._run
PyObject* g_task_types = nullptr;    // tuple of the Task classes
PyObject* g_callback = nullptr;      // interned "_callback"
PyObject* g_self = nullptr;          // interned "__self__"
PyObject* g_namer = nullptr;         // task -> its range's name (Python, once per Task)

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
  PyObject* text = PyObject_CallOneArg(g_namer, task);
  if (!text) return nullptr;
  Py_ssize_t size = 0;
  const char* utf8 = PyUnicode_Check(text) ? PyUnicode_AsUTF8AndSize(text, &size) : nullptr;
  if (!utf8) {
    Py_DECREF(text);
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "task namer must return a str");
    return nullptr;
  }
  const char* name = names().emplace(utf8, size_t(size)).first->c_str();
  Py_DECREF(text);
  PyObject* ref = PyWeakref_NewRef(task, nullptr);
  if (!ref) return nullptr;
  g_tasks.emplace(task, TaskName{ref, name});
  return name;
}

// Handle._run(self): the original, inside the Task's range when the callback is a Task's.
PyObject* task_step_run(PyObject*, PyObject* handle) {
  PyObject* callback = PyObject_GetAttr(handle, g_callback);
  if (!callback) return nullptr;
  PyObject* task = nullptr;
  if (optional_attr(callback, g_self, &task) < 0) {
    Py_DECREF(callback);
    return nullptr;
  }
  Py_DECREF(callback);
  const char* name = nullptr;
  if (task) {
    const int is_task = PyObject_IsInstance(task, g_task_types);
    if (is_task > 0) name = name_of(task);
    Py_DECREF(task);
    if (is_task < 0 || (is_task > 0 && !name)) return nullptr;
  }
  if (!name) return PyObject_CallOneArg(g_original_run, handle);
  RecordFunction range(name, RecordScope::kUserScope);
  return PyObject_CallOneArg(g_original_run, handle);
}

PyMethodDef g_step_def = {"_run", task_step_run, METH_O,
                          "asyncio's Handle._run, inside the Task's range when the callback is a "
                          "Task's step (framescope._asyncio_tasks)."};

// _asyncio_steps_install(handle_class, task_types, namer) -> None: replaces
// handle_class._run (idempotent).
PyObject* install(PyObject*, PyObject* args) {
  PyObject *cls, *types, *namer;
  if (!PyArg_ParseTuple(args, "O!O!O:_asyncio_steps_install", &PyType_Type, &cls, &PyTuple_Type,
                        &types, &namer)) {
    return nullptr;
  }
  if (g_original_run) Py_RETURN_NONE;
  PyObject* original = PyObject_GetAttrString(cls, "_run");
  if (!original) return nullptr;
  PyObject* fn = PyCFunction_New(&g_step_def, nullptr);
  PyObject* method = fn ? PyInstanceMethod_New(fn) : nullptr;
  Py_XDECREF(fn);
  if (!method || PyObject_SetAttrString(cls, "_run", method) < 0) {
    Py_XDECREF(method);
    Py_DECREF(original);
    return nullptr;
  }
  Py_DECREF(method);
  g_original_run = original;
  Py_INCREF(types);
  Py_XSETREF(g_task_types, types);
  Py_INCREF(namer);
  Py_XSETREF(g_namer, namer);
  Py_RETURN_NONE;
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
     "Replaces handle_class._run: a callback bound to an instance of task_types runs inside a "
     "range named namer(task) (asked once per Task)."},
    {"_asyncio_steps_uninstall", uninstall, METH_O, "Puts handle_class._run back."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

bool asyncio_steps_init(PyObject* module) {
  g_callback = PyUnicode_InternFromString("_callback");
  g_self = PyUnicode_InternFromString("__self__");
  return g_callback && g_self && PyModule_AddFunctions(module, g_methods) == 0;
}

}  // namespace framescope::py
