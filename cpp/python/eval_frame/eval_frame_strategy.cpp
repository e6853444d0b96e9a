// cpp/python/eval_frame/eval_frame_strategy.cpp: FrameAction and FrameExecStrategy (torch's).
#include "eval_frame/eval_frame_internal.h"  // first: Python.h with the internal frame headers

namespace framescope::py {

PyTypeObject g_exec_strategy_type = {PyVarObject_HEAD_INIT(nullptr, 0)};

namespace {

// framescope.eval_frame.FrameAction: an enum.IntEnum made at module init (strong).
PyObject* g_frame_action = nullptr;

const char* const kActionNames[] = {"DEFAULT", "SKIP", "RUN_ONLY"};

PyObject* strategy_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"cur_action", "recursive_action", "apply_to_code", nullptr};
  PyObject* cur = nullptr;
  PyObject* recursive = nullptr;
  int apply_to_code = 1;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OOp:FrameExecStrategy",
                                   const_cast<char**>(kwlist), &cur, &recursive, &apply_to_code)) {
    return nullptr;
  }
  ExecStrategy s;
  if ((cur && !parse_frame_action(cur, "cur_action", &s.cur)) ||
      (recursive && !parse_frame_action(recursive, "recursive_action", &s.recursive))) {
    return nullptr;
  }
  auto* self = reinterpret_cast<FrameExecStrategyObject*>(type->tp_alloc(type, 0));
  if (!self) return nullptr;
  self->strategy = s;
  self->apply_to_code = apply_to_code != 0;
  return reinterpret_cast<PyObject*>(self);
}

FrameExecStrategyObject* as_strategy(PyObject* self) {
  return reinterpret_cast<FrameExecStrategyObject*>(self);
}

PyObject* strategy_get_cur(PyObject* self, void*) {
  return frame_action_object(as_strategy(self)->strategy.cur);
}
PyObject* strategy_get_recursive(PyObject* self, void*) {
  return frame_action_object(as_strategy(self)->strategy.recursive);
}
PyObject* strategy_get_apply(PyObject* self, void*) {
  return PyBool_FromLong(as_strategy(self)->apply_to_code);
}

PyObject* strategy_repr(PyObject* self) {
  const FrameExecStrategyObject* s = as_strategy(self);
  return PyUnicode_FromFormat("FrameExecStrategy(FrameAction.%s, FrameAction.%s%s)",
                              kActionNames[s->strategy.cur], kActionNames[s->strategy.recursive],
                              s->apply_to_code ? "" : ", apply_to_code=False");
}

PyObject* strategy_richcompare(PyObject* a, PyObject* b, int op) {
  if ((op != Py_EQ && op != Py_NE) || !PyObject_TypeCheck(b, &g_exec_strategy_type)) {
    Py_RETURN_NOTIMPLEMENTED;
  }
  const FrameExecStrategyObject* x = as_strategy(a);
  const FrameExecStrategyObject* y = as_strategy(b);
  const bool eq = x->strategy.cur == y->strategy.cur &&
                  x->strategy.recursive == y->strategy.recursive &&
                  x->apply_to_code == y->apply_to_code;
  return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

Py_hash_t strategy_hash(PyObject* self) {
  const FrameExecStrategyObject* s = as_strategy(self);
  return 1 + s->strategy.cur + 3 * s->strategy.recursive + 9 * s->apply_to_code;
}

PyGetSetDef g_strategy_getset[] = {
    {"cur_action", strategy_get_cur, nullptr, "What frames of the code do (a FrameAction).",
     nullptr},
    {"recursive_action", strategy_get_recursive, nullptr,
     "What every frame they call does, transitively (a FrameAction).", nullptr},
    {"apply_to_code", strategy_get_apply, nullptr,
     "Returned by a callback: True stores the strategy for later calls of the code; False "
     "applies it to this call only.",
     nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

}  // namespace

PyObject* frame_action_object(uint8_t action) {
  return PyObject_CallFunction(g_frame_action, "i", int(action));
}

PyObject* new_exec_strategy(ExecStrategy strategy, bool apply_to_code) {
  auto* self = PyObject_New(FrameExecStrategyObject, &g_exec_strategy_type);
  if (!self) return nullptr;
  self->strategy = strategy;
  self->apply_to_code = apply_to_code;
  return reinterpret_cast<PyObject*>(self);
}

bool parse_frame_action(PyObject* obj, const char* what, uint8_t* out) {
  if (!PyLong_Check(obj) || PyBool_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "FrameExecStrategy: %s must be a FrameAction, not %.100s", what,
                 Py_TYPE(obj)->tp_name);
    return false;
  }
  long v = PyLong_AsLong(obj);
  if (v == -1 && PyErr_Occurred()) return false;
  if (v < kActionDefault || v > kActionRunOnly) {
    PyErr_Format(PyExc_ValueError,
                 "FrameExecStrategy: %s must be FrameAction.DEFAULT (0), SKIP (1) or RUN_ONLY (2), "
                 "not %ld",
                 what, v);
    return false;
  }
  *out = uint8_t(v);
  return true;
}

bool eval_frame_strategy_init(PyObject* module) {
  if (!g_frame_action) {
    // FrameAction is an IntEnum, as torch's _FrameAction: made through the enum module so that
    // it behaves as any Python enum (iteration, names, pickling by name).
    PyObject* int_enum = nullptr;  // new
    if (PyObject* enum_module = PyImport_ImportModule("enum")) {
      int_enum = PyObject_GetAttrString(enum_module, "IntEnum");
      Py_DECREF(enum_module);
    }
    PyObject* args = int_enum ? Py_BuildValue("(s[(si)(si)(si)])", "FrameAction", kActionNames[0],
                                              0, kActionNames[1], 1, kActionNames[2], 2)
                              : nullptr;  // new
    PyObject* kwargs = args ? Py_BuildValue("{s:s}", "module", "framescope.eval_frame") : nullptr;
    g_frame_action = kwargs ? PyObject_Call(int_enum, args, kwargs) : nullptr;
    Py_XDECREF(kwargs);
    Py_XDECREF(args);
    Py_XDECREF(int_enum);
    if (!g_frame_action) return false;
    PyObject* doc = PyUnicode_FromString(
        "What an intercepted frame does (torch's FrameAction). DEFAULT: look the code up, call "
        "the callback on a miss. SKIP: run the original code, no lookup (as a recursive action: "
        "the callback is None for every frame called). RUN_ONLY: look up and run a hit; a miss "
        "runs the original code and the callback is not called.");
    if (!doc || PyObject_SetAttrString(g_frame_action, "__doc__", doc) < 0) {
      Py_XDECREF(doc);
      return false;
    }
    Py_DECREF(doc);
  }
  PyTypeObject* t = &g_exec_strategy_type;
  t->tp_name = "framescope.eval_frame.FrameExecStrategy";
  t->tp_basicsize = sizeof(FrameExecStrategyObject);
  t->tp_flags = Py_TPFLAGS_DEFAULT;
  t->tp_doc = PyDoc_STR(
      "FrameExecStrategy(cur_action=FrameAction.DEFAULT, recursive_action=FrameAction.DEFAULT, "
      "apply_to_code=True)\n--\n\n"
      "torch's FrameExecStrategy: what frames of a code object do (cur_action) and what every "
      "frame they call does, transitively (recursive_action). A callback returns one to decide "
      "without caching code; set_code_exec_strategy() stores one for a code object.");
  t->tp_new = strategy_new;
  t->tp_repr = strategy_repr;
  t->tp_richcompare = strategy_richcompare;
  t->tp_hash = strategy_hash;
  t->tp_getset = g_strategy_getset;
  if (PyType_Ready(t) < 0) return false;
  return PyModule_AddObjectRef(module, "FrameAction", g_frame_action) == 0 &&
         PyModule_AddObjectRef(module, "FrameExecStrategy", reinterpret_cast<PyObject*>(t)) == 0;
}

}  // namespace framescope::py
