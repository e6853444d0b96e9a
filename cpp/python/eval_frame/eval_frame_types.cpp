// cpp/python/eval_frame/eval_frame_types.cpp: GuardedCode, CacheEntry and the callbacks' Frame.
#include "eval_frame/eval_frame_internal.h"  // first: Python.h with the internal frame headers

#include "eval_frame/eval_frame_guard.h"

namespace framescope::py {

Py_ssize_t g_live_entries = 0;

namespace {

PyObject* none_if_null(PyObject* o) { return Py_NewRef(o ? o : Py_None); }

// ---- GuardedCode -------------------------------------------------------------------------------

int guarded_code_init(PyObject* self_obj, PyObject* args, PyObject* kwargs) {
  auto* self = reinterpret_cast<GuardedCodeObject*>(self_obj);
  static const char* kwlist[] = {"code", "check_fn", "strategy", nullptr};
  PyObject* code = nullptr;
  PyObject* check_fn = nullptr;
  PyObject* strategy = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|O:GuardedCode", const_cast<char**>(kwlist),
                                   &code, &check_fn, &strategy)) {
    return -1;
  }
  if (!PyCode_Check(code)) {
    PyErr_Format(PyExc_TypeError, "GuardedCode: code must be a code object, not %.100s",
                 Py_TYPE(code)->tp_name);
    return -1;
  }
  if (!PyCallable_Check(check_fn)) {
    PyErr_Format(PyExc_TypeError, "GuardedCode: check_fn must be callable, not %.100s",
                 Py_TYPE(check_fn)->tp_name);
    return -1;
  }
  if (strategy != Py_None && !PyObject_TypeCheck(strategy, &g_exec_strategy_type)) {
    PyErr_Format(PyExc_TypeError,
                 "GuardedCode: strategy must be None or a FrameExecStrategy, not %.100s",
                 Py_TYPE(strategy)->tp_name);
    return -1;
  }
  // Cached entries may compile a Guard's checks: from now on they cannot change.
  if (is_guard(check_fn)) freeze_guard(check_fn);
  Py_XSETREF(self->code, Py_NewRef(code));
  Py_XSETREF(self->check_fn, Py_NewRef(check_fn));
  self->has_strategy = strategy != Py_None;
  if (self->has_strategy) {
    auto* s = reinterpret_cast<FrameExecStrategyObject*>(strategy);
    self->strategy = s->strategy;
    self->apply_to_code = s->apply_to_code;
  }
  return 0;
}

int guarded_code_traverse(PyObject* self_obj, visitproc visit, void* arg) {
  auto* self = reinterpret_cast<GuardedCodeObject*>(self_obj);
  Py_VISIT(self->code);
  Py_VISIT(self->check_fn);
  return 0;
}

int guarded_code_clear(PyObject* self_obj) {
  auto* self = reinterpret_cast<GuardedCodeObject*>(self_obj);
  Py_CLEAR(self->code);
  Py_CLEAR(self->check_fn);
  return 0;
}

void guarded_code_dealloc(PyObject* self_obj) {
  PyObject_GC_UnTrack(self_obj);
  guarded_code_clear(self_obj);
  Py_TYPE(self_obj)->tp_free(self_obj);
}

PyObject* guarded_code_get_code(PyObject* self, void*) {
  return none_if_null(reinterpret_cast<GuardedCodeObject*>(self)->code);
}
PyObject* guarded_code_get_check_fn(PyObject* self, void*) {
  return none_if_null(reinterpret_cast<GuardedCodeObject*>(self)->check_fn);
}

PyObject* guarded_code_get_strategy(PyObject* self_obj, void*) {
  auto* self = reinterpret_cast<GuardedCodeObject*>(self_obj);
  if (!self->has_strategy) Py_RETURN_NONE;
  return new_exec_strategy(self->strategy, self->apply_to_code);
}

PyObject* guarded_code_repr(PyObject* self_obj) {
  auto* self = reinterpret_cast<GuardedCodeObject*>(self_obj);
  if (!self->code) return PyUnicode_FromString("<GuardedCode (uninitialised)>");
  return PyUnicode_FromFormat("<GuardedCode code=%R check_fn=%R>", self->code, self->check_fn);
}

PyGetSetDef g_guarded_code_getset[] = {
    {"code", guarded_code_get_code, nullptr, "The code object to run on the frame.", nullptr},
    {"check_fn", guarded_code_get_check_fn, nullptr,
     "The guard: check_fn(f_locals) -> bool, true when `code` may run.", nullptr},
    {"strategy", guarded_code_get_strategy, nullptr,
     "The FrameExecStrategy that goes with the code, or None: (DEFAULT, DEFAULT), applied to "
     "the code.",
     nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

// ---- CacheEntry --------------------------------------------------------------------------------

int cache_entry_traverse(PyObject* self_obj, visitproc visit, void* arg) {
  auto* self = reinterpret_cast<CacheEntryObject*>(self_obj);
  if (!self->same_code) Py_VISIT(self->code);
  Py_VISIT(self->check_fn);
  Py_VISIT(reinterpret_cast<PyObject*>(self->next));
  Py_VISIT(self->shadow_func);
  Py_VISIT(self->kwonly_names);
  Py_VISIT(self->isolation);
  return traverse_frame_guard_program(self->guard_program, visit, arg);
}

int cache_entry_clear(PyObject* self_obj) {
  auto* self = reinterpret_cast<CacheEntryObject*>(self_obj);
  drop_cache_entry(self);
  Py_CLEAR(self->next);
  Py_CLEAR(self->isolation);
  return 0;
}

void cache_entry_dealloc(PyObject* self_obj) {
  PyObject_GC_UnTrack(self_obj);
  cache_entry_clear(self_obj);
  --g_live_entries;
  Py_TYPE(self_obj)->tp_free(self_obj);
}

PyObject* cache_entry_get_code(PyObject* self, void*) {
  return none_if_null(reinterpret_cast<CacheEntryObject*>(self)->code);
}
PyObject* cache_entry_get_check_fn(PyObject* self, void*) {
  return none_if_null(reinterpret_cast<CacheEntryObject*>(self)->check_fn);
}
PyObject* cache_entry_get_next(PyObject* self, void*) {
  return none_if_null(reinterpret_cast<PyObject*>(reinterpret_cast<CacheEntryObject*>(self)->next));
}

PyObject* cache_entry_get_isolation(PyObject* self, void*) {
  return none_if_null(reinterpret_cast<CacheEntryObject*>(self)->isolation);
}

PyObject* cache_entry_repr(PyObject* self_obj) {
  auto* self = reinterpret_cast<CacheEntryObject*>(self_obj);
  if (!self->code) return PyUnicode_FromString("<CacheEntry (dropped)>");
  return PyUnicode_FromFormat("<CacheEntry code=%R check_fn=%R>", self->code, self->check_fn);
}

PyGetSetDef g_cache_entry_getset[] = {
    {"code", cache_entry_get_code, nullptr,
     "The code run when the guard holds (None once dropped).", nullptr},
    {"check_fn", cache_entry_get_check_fn, nullptr, "The guard (None once dropped).", nullptr},
    {"next", cache_entry_get_next, nullptr, "The next entry of the code object, or None.", nullptr},
    {"isolation", cache_entry_get_isolation, nullptr,
     "The isolation key of the callback setting that made the entry (the callback for "
     "isolate=True, else the isolation id), or None for a shared entry.",
     nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

// ---- Frame -------------------------------------------------------------------------------------

// The frame's memory is CPython's: on 3.11+ a slot of the thread's data stack that the next call
// reuses, on 3.10 a frame object that may be freed or recycled. A Frame kept past the callback
// must therefore refuse every access instead of reading it.
FsFrame* live_frame(PyObject* self_obj) {
  FsFrame* f = reinterpret_cast<EvalFrameObject*>(self_obj)->frame;
  if (!f) {
    PyErr_SetString(PyExc_RuntimeError,
                    "framescope.eval_frame.Frame: used after the eval_frame callback that received "
                    "it returned (the frame is only valid during the callback)");
  }
  return f;
}

void eval_frame_dealloc(PyObject* self_obj) {
  auto* self = reinterpret_cast<EvalFrameObject*>(self_obj);
  Py_CLEAR(self->locals);
  Py_CLEAR(self->back);
  Py_TYPE(self_obj)->tp_free(self_obj);
}

PyObject* eval_frame_get_code(PyObject* self, void*) {
  FsFrame* f = live_frame(self);
  return f ? Py_NewRef(reinterpret_cast<PyObject*>(frame_code(f))) : nullptr;
}

PyObject* eval_frame_get_locals(PyObject* self_obj, void*) {
  if (!live_frame(self_obj)) return nullptr;
  return none_if_null(reinterpret_cast<EvalFrameObject*>(self_obj)->locals);
}

PyObject* eval_frame_get_globals(PyObject* self, void*) {
  FsFrame* f = live_frame(self);
  return f ? Py_NewRef(f->f_globals) : nullptr;
}

PyObject* eval_frame_get_builtins(PyObject* self, void*) {
  FsFrame* f = live_frame(self);
  return f ? Py_NewRef(f->f_builtins) : nullptr;
}

// A callback only sees frames that have not executed an instruction yet: f_lasti is -1 on every
// version (3.13's own frame objects would say 0 for such a frame) and the line is the first one.
PyObject* eval_frame_get_lasti(PyObject* self, void*) {
  return live_frame(self) ? PyLong_FromLong(-1) : nullptr;
}

PyObject* eval_frame_get_lineno(PyObject* self, void*) {
  FsFrame* f = live_frame(self);
  return f ? PyLong_FromLong(frame_code(f)->co_firstlineno) : nullptr;
}

PyObject* eval_frame_get_back(PyObject* self_obj, void*) {
  if (!live_frame(self_obj)) return nullptr;
  return none_if_null(reinterpret_cast<EvalFrameObject*>(self_obj)->back);
}

// The cells of the frame's free variables, as a tuple (empty when it has none), as torch's frame
// wrapper's `closure`.
PyObject* eval_frame_get_closure(PyObject* self, void*) {
  FsFrame* f = live_frame(self);
  if (!f) return nullptr;
#if FS_PY311
  PyObject* func = frame_function(f);  // borrowed
  PyObject* closure = func && PyFunction_Check(func) ? PyFunction_GET_CLOSURE(func) : nullptr;
  if (closure) return Py_NewRef(closure);
#endif
  const int nfree = code_free_count(frame_code(f));
  PyObject* cells = PyTuple_New(nfree);  // new
  if (!cells) return nullptr;
  for (int j = 0; j < nfree; j++) {
    PyObject* cell = frame_free_cell(f, j);  // borrowed
    PyTuple_SET_ITEM(cells, j, Py_NewRef(cell ? cell : Py_None));
  }
  return cells;
}

// inspect.getmodule(obj) first tries obj.__module__: answering with the frame's module name lets
// it find the module of a Frame as it does for real frames (through their file name).
PyObject* eval_frame_get_module(PyObject* self, void*) {
  FsFrame* f = live_frame(self);
  if (!f) return nullptr;
  PyObject* name = nullptr;
  if (PyDict_Check(f->f_globals)) {
    name = PyDict_GetItemString(f->f_globals, "__name__");  // borrowed
  }
  return none_if_null(name);
}

PyObject* eval_frame_repr(PyObject* self_obj) {
  auto* self = reinterpret_cast<EvalFrameObject*>(self_obj);
  if (!self->frame) return PyUnicode_FromString("<framescope.eval_frame.Frame (expired)>");
  PyCodeObject* code = frame_code(self->frame);
  return PyUnicode_FromFormat("<framescope.eval_frame.Frame of %U, file %R, line %d>",
                              code->co_name, code->co_filename, code->co_firstlineno);
}

PyGetSetDef g_eval_frame_getset[] = {
    {"f_code", eval_frame_get_code, nullptr, "The code object the frame was called with.", nullptr},
    {"f_locals", eval_frame_get_locals, nullptr,
     "A read-only mapping (FrameLocals) of the bound arguments and of the free variables that "
     "hold a value, as the guards saw it; for module and class bodies, their namespace.",
     nullptr},
    {"f_globals", eval_frame_get_globals, nullptr, "The frame's globals.", nullptr},
    {"f_builtins", eval_frame_get_builtins, nullptr, "The frame's builtins.", nullptr},
    {"f_lasti", eval_frame_get_lasti, nullptr, "-1: the frame has not started.", nullptr},
    {"f_lineno", eval_frame_get_lineno, nullptr, "The code's first line.", nullptr},
    {"f_back", eval_frame_get_back, nullptr, "The caller's frame object, or None.", nullptr},
    {"closure", eval_frame_get_closure, nullptr,
     "The cells of the frame's free variables, as a tuple (empty when it has none).", nullptr},
    {"__module__", eval_frame_get_module, nullptr, "__name__ of the frame's globals.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

}  // namespace

PyTypeObject g_guarded_code_type = {PyVarObject_HEAD_INIT(nullptr, 0)};
PyTypeObject g_cache_entry_type = {PyVarObject_HEAD_INIT(nullptr, 0)};
PyTypeObject g_eval_frame_type = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyObject* new_eval_frame(PyThreadState* ts, FsFrame* frame, PyObject* locals) {
  auto* self = PyObject_New(EvalFrameObject, &g_eval_frame_type);
  if (!self) return nullptr;
  self->frame = frame;
  self->locals = Py_XNewRef(locals);
#if FS_PY311
  // The frame is not linked yet: the thread's current frame is the caller's. Taken now because
  // during the callback the current frame is the callback's own.
  self->back = reinterpret_cast<PyObject*>(PyThreadState_GetFrame(ts));  // new, may be null
  if (!self->back && PyErr_Occurred()) {
    Py_DECREF(self);
    return nullptr;
  }
#else
  (void)ts;
  self->back = Py_XNewRef(reinterpret_cast<PyObject*>(frame->f_back));
#endif
  return reinterpret_cast<PyObject*>(self);
}

void expire_eval_frame(PyObject* wrapper) {
  auto* self = reinterpret_cast<EvalFrameObject*>(wrapper);
  self->frame = nullptr;
  // Nothing can be read any more: let go of the references now (no cycles through a kept Frame).
  Py_CLEAR(self->locals);
  Py_CLEAR(self->back);
}

void drop_cache_entry(CacheEntryObject* entry) {
  if (entry->same_code) {
    entry->code = nullptr;  // borrowed
  } else {
    Py_CLEAR(entry->code);
  }
  // Dropped entries are never looked up again, but the entry may be: a cleared check_fn goes
  // with its compiled program.
  entry->frame_guard = kNoFrameGuard;
  FrameGuardProgram* program = entry->guard_program;
  entry->guard_program = nullptr;
  free_frame_guard_program(program);
  Py_CLEAR(entry->check_fn);
  Py_CLEAR(entry->shadow_func);
  Py_CLEAR(entry->kwonly_names);
}

bool eval_frame_types_init(PyObject* module) {
  PyTypeObject* t = &g_guarded_code_type;
  t->tp_name = "framescope.eval_frame.GuardedCode";
  t->tp_basicsize = sizeof(GuardedCodeObject);
  t->tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC;
  t->tp_doc = PyDoc_STR(
      "GuardedCode(code, check_fn, strategy=None)\n--\n\n"
      "What an eval_frame callback returns to cache `code` for the frame's code object: it runs "
      "on this frame now, and on later calls whenever check_fn(f_locals) is true.");
  t->tp_new = PyType_GenericNew;
  t->tp_init = guarded_code_init;
  t->tp_dealloc = guarded_code_dealloc;
  t->tp_traverse = guarded_code_traverse;
  t->tp_clear = guarded_code_clear;
  t->tp_repr = guarded_code_repr;
  t->tp_getset = g_guarded_code_getset;

  t = &g_cache_entry_type;
  t->tp_name = "framescope.eval_frame.CacheEntry";
  t->tp_basicsize = sizeof(CacheEntryObject);
  t->tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC;
  t->tp_doc = PyDoc_STR(
      "A cached entry of a code object (created by the eval_frame API, not by users): .code, "
      ".check_fn and .next, most recently hit first.");
  t->tp_dealloc = cache_entry_dealloc;
  t->tp_traverse = cache_entry_traverse;
  t->tp_clear = cache_entry_clear;
  t->tp_repr = cache_entry_repr;
  t->tp_getset = g_cache_entry_getset;

  t = &g_eval_frame_type;
  t->tp_name = "framescope.eval_frame.Frame";
  t->tp_basicsize = sizeof(EvalFrameObject);
  t->tp_flags = Py_TPFLAGS_DEFAULT;
  t->tp_doc = PyDoc_STR(
      "The frame an eval_frame callback receives: f_code, f_locals, f_globals, f_builtins, "
      "f_lasti, f_lineno, f_back, closure. Valid only while the callback runs; afterwards every "
      "attribute "
      "raises RuntimeError.");
  t->tp_dealloc = eval_frame_dealloc;
  t->tp_repr = eval_frame_repr;
  t->tp_getset = g_eval_frame_getset;

  for (PyTypeObject* type : {&g_guarded_code_type, &g_cache_entry_type, &g_eval_frame_type}) {
    if (PyType_Ready(type) < 0) return false;
  }
  if (!eval_frame_locals_init(module) || !eval_frame_guard_init(module)) return false;
  if (PyModule_AddObjectRef(module, "GuardedCode",
                            reinterpret_cast<PyObject*>(&g_guarded_code_type)) < 0 ||
      PyModule_AddObjectRef(module, "CacheEntry",
                            reinterpret_cast<PyObject*>(&g_cache_entry_type)) < 0 ||
      PyModule_AddObjectRef(module, "EvalFrame", reinterpret_cast<PyObject*>(&g_eval_frame_type)) <
          0) {
    return false;
  }
  return true;
}

}  // namespace framescope::py
