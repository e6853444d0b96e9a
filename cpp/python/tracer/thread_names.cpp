// cpp/python/tracer/thread_names.cpp: thread names for the trace, read without running Python code.
//
// The trace names each thread by its OS id. At stop only the live threads can be asked, so a
// thread that ran and exited during the session would lose its name. We keep the Thread objects
// threading knows at start (threading._active) and those the tracer sees start running
// (threading.Thread._bootstrap_inner), and read `_name` and `_native_id` from their instance
// dicts. Reading dicts runs no Python code: the trace shows nothing of this, and a
// KeyboardInterrupt cannot land in the middle of start() or stop() through it.
#include "tracer/thread_names.h"

#include <algorithm>
#include <vector>

#include "code_extra.h"  // includes py_compat.h, which must come before Python.h
#include "py_text.h"

namespace framescope::py {

PyObject* g_thread_bootstrap_code = nullptr;

namespace {

std::vector<PyObject*> g_threads;  // threading.Thread objects (strong); GIL-protected
// Names of threads that exited, moved out of g_threads to keep it short (oldest first).
std::vector<std::pair<uint64_t, std::string>> g_finished;
constexpr size_t kCompactAtLeast = 64;
size_t g_compact_at = kCompactAtLeast;

// A borrowed entry of a dict, or null; never leaves an exception set.
PyObject* dict_get(PyObject* dict, const char* key) {
  if (!dict || !PyDict_Check(dict)) return nullptr;
  PyObject* value = PyDict_GetItemString(dict, key);  // borrowed; str keys compare in C
  if (!value) PyErr_Clear();
  return value;
}

// The module dict of threading when it is imported (borrowed), else null.
PyObject* threading_dict() {
  PyObject* module = dict_get(PyImport_GetModuleDict(), "threading");
  return module && PyModule_Check(module) ? PyModule_GetDict(module) : nullptr;
}

// What a Thread object says about itself, read from its instance dict.
struct ThreadFields {
  bool started = false;  // has a native id (it ran)
  uint64_t native_id = 0;
  PyObject* ident = nullptr;  // borrowed from `dict`
  std::string name;
};

// False when `thread`'s attributes cannot be read without running Python code (a class with its
// own __getattribute__) or are not there.
bool read_fields(PyObject* thread, ThreadFields& out) {
  if (Py_TYPE(thread)->tp_getattro != PyObject_GenericGetAttr) return false;
  PyObject* dict = PyObject_GenericGetDict(thread, nullptr);  // new
  if (!dict) {
    PyErr_Clear();
    return false;
  }
  PyObject* name = dict_get(dict, "_name");
  PyObject* native_id = dict_get(dict, "_native_id");
  out.ident = dict_get(dict, "_ident");
  if (name && PyUnicode_Check(name)) out.name = utf8_of(name);
  if (native_id && PyLong_Check(native_id)) {
    out.native_id = PyLong_AsUnsignedLongLong(native_id);
    out.started = !PyErr_Occurred();
    PyErr_Clear();
  }
  Py_DECREF(dict);  // `ident` stays alive: the Thread still holds it
  return name != nullptr;
}

// True while `thread` runs: threading._active maps its ident to it.
bool is_alive(PyObject* thread, PyObject* ident) {
  PyObject* active = dict_get(threading_dict(), "_active");
  if (!active || !ident || !PyDict_Check(active)) return false;
  PyObject* current = PyDict_GetItemWithError(active, ident);  // borrowed; int keys
  PyErr_Clear();
  return current == thread;
}

void hold(PyObject* thread) {
  Py_INCREF(thread);
  g_threads.push_back(thread);
}

// Moves the threads that exited out of g_threads (their names into g_finished).
void compact() {
  size_t kept = 0;
  for (PyObject* thread : g_threads) {
    ThreadFields f;
    if (read_fields(thread, f) && f.started && !is_alive(thread, f.ident)) {
      g_finished.emplace_back(f.native_id, std::move(f.name));
      Py_DECREF(thread);
    } else {
      g_threads[kept++] = thread;
    }
  }
  g_threads.resize(kept);
  g_compact_at = std::max(kCompactAtLeast, 2 * g_threads.size());
}

}  // namespace

void thread_names_start() noexcept {
  thread_names_release();
  PyObject* threading = threading_dict();
  if (!threading) return;
  try {
    if (PyObject* active = dict_get(threading, "_active")) {
      PyObject *ident, *thread;
      Py_ssize_t pos = 0;
      while (PyDict_Next(active, &pos, &ident, &thread)) hold(thread);
    }
    // threading.Thread._bootstrap_inner: from the class dict (a plain function there).
    PyObject* cls = dict_get(threading, "Thread");
    PyObject* fn = cls && PyType_Check(cls)
                       ? dict_get(reinterpret_cast<PyTypeObject*>(cls)->tp_dict, "_bootstrap_inner")
                       : nullptr;
    if (fn && PyFunction_Check(fn) && init_code_extra()) {
      PyObject* code = PyFunction_GetCode(fn);  // borrowed
      if (CodeExtra* extra = get_or_create_code_extra(reinterpret_cast<PyCodeObject*>(code))) {
        extra->tracer_slow_path = true;  // every call goes through register_code()
        extra->compact_epoch = kNoCompactEpoch;
        g_thread_bootstrap_code = Py_NewRef(code);
      }
    }
  } catch (...) {  // out of memory: fewer names
  }
  PyErr_Clear();
}

void thread_names_note_started(PyObject* thread) noexcept {
  if (!thread) return;
  try {
    hold(thread);
    if (g_threads.size() >= g_compact_at) compact();
  } catch (...) {
  }
}

void thread_names_note_current() noexcept {
  PyObject* active = dict_get(threading_dict(), "_active");
  if (!active) return;
  PyObject* ident = PyLong_FromUnsignedLong(PyThread_get_thread_ident());  // new
  if (!ident) {
    PyErr_Clear();
    return;
  }
  PyObject* thread = PyDict_GetItemWithError(active, ident);  // borrowed
  PyErr_Clear();
  Py_DECREF(ident);
  thread_names_note_started(thread);
}

std::unordered_map<uint64_t, std::string> thread_names_collect() noexcept {
  std::unordered_map<uint64_t, std::string> names;
  try {
    // Later sources win: exited threads, then threads seen during the session, then the live
    // ones as threading knows them now.
    for (const auto& [id, name] : g_finished) names[id] = name;
    auto add = [&names](PyObject* thread) {
      ThreadFields f;
      if (read_fields(thread, f) && f.started) names[f.native_id] = std::move(f.name);
    };
    for (PyObject* thread : g_threads) add(thread);
    if (PyObject* active = dict_get(threading_dict(), "_active")) {
      PyObject *ident, *thread;
      Py_ssize_t pos = 0;
      while (PyDict_Next(active, &pos, &ident, &thread)) add(thread);
    }
  } catch (...) {
  }
  PyErr_Clear();
  return names;
}

void thread_names_release() noexcept {
  for (PyObject* thread : g_threads) Py_DECREF(thread);
  g_threads.clear();
  g_finished.clear();
  g_compact_at = kCompactAtLeast;
  Py_CLEAR(g_thread_bootstrap_code);
}

void thread_names_after_fork_child() noexcept {
  // The Thread objects of the parent's other threads: threading forgets them in the child too.
  PyObject* code = g_thread_bootstrap_code;
  g_thread_bootstrap_code = nullptr;
  thread_names_release();
  g_thread_bootstrap_code = code;
}

}  // namespace framescope::py
