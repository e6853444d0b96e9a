/* cpp/python/tracer/requicken.c: 3.12 only: puts back the superinstructions that sys.monitoring
 * took out of a code object framescope watched, once framescope's events are off it again.
 *
 * Why: CPython 3.12 forms its superinstructions (LOAD_FAST__LOAD_FAST, STORE_FAST__LOAD_FAST...)
 * once, when a code object is made (_PyCode_Quicken), and _Py_Instrument turns every one of them
 * back into its first instruction whenever a code's events change — also when they are removed —
 * without ever forming them again. framescope puts local events (PY_RETURN/PY_YIELD) on the code
 * of the frames running when a session starts, to see them end; those are the program's hottest
 * loops (the main loop, the function an attach interrupted), which ran 2-3% more instructions
 * for the rest of the process after the window (bench/attach.py, docs/attach.md). 3.13 makes its
 * superinstructions in the compiler and instrumentation leaves them alone; 3.10/3.11 watch with
 * a profile function, which changes no bytecode.
 *
 * This is _PyCode_Quicken's superinstruction pass, for a code object none of whose instructions
 * is instrumented (so no tool's events are on it: with any, the next change of its events would
 * undo the pass anyway, and an instrumented instruction must not be paired), leaving the
 * specialized instructions and their counters as they are. Pairing is safe with frames of the
 * code suspended anywhere in it: a superinstruction only replaces the opcode of a pair's first
 * instruction; a frame resuming at, or jumping to, the second runs it alone, as CPython's own
 * quickened code does. Needs the GIL. */
#include <patchlevel.h>

#if PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030D0000
#define Py_BUILD_CORE 1
#include <Python.h>

/* The opcode tables, as our own copies: libpython does not export its own. */
#define NEED_OPCODE_TABLES 1
#define _PyOpcode_Jump framescope_opcode_jump
#define _PyOpcode_Caches framescope_opcode_caches
#define _PyOpcode_Deopt framescope_opcode_deopt
#include <internal/pycore_opcode.h>

/* The superinstruction that starts with `first` and is followed by `second` (both base
 * opcodes), or 0: _PyCode_Quicken's table. */
static int superinstruction(int first, int second) {
  switch (first << 8 | second) {
    case LOAD_CONST << 8 | LOAD_FAST:
      return LOAD_CONST__LOAD_FAST;
    case LOAD_FAST << 8 | LOAD_CONST:
      return LOAD_FAST__LOAD_CONST;
    case LOAD_FAST << 8 | LOAD_FAST:
      return LOAD_FAST__LOAD_FAST;
    case STORE_FAST << 8 | LOAD_FAST:
      return STORE_FAST__LOAD_FAST;
    case STORE_FAST << 8 | STORE_FAST:
      return STORE_FAST__STORE_FAST;
    default:
      return 0;
  }
}

int framescope_requicken(PyObject* object) {
  if (!PyCode_Check(object)) return -1;
  PyCodeObject* code = (PyCodeObject*)object;
  _Py_CODEUNIT* instructions = _PyCode_CODE(code);
  const Py_ssize_t n = Py_SIZE(code);
  for (Py_ssize_t i = 0; i < n; i++) {
    const int opcode = instructions[i].op.code;
    if (opcode >= MIN_INSTRUMENTED_OPCODE) return -1; /* a tool's events are on it */
    i += _PyOpcode_Caches[_PyOpcode_Deopt[opcode]];
  }
  int formed = 0;
  int opcode = 0;
  for (Py_ssize_t i = 0; i < n; i++) {
    const int previous = opcode;
    opcode = _PyOpcode_Deopt[instructions[i].op.code];
    const int caches = _PyOpcode_Caches[opcode];
    if (caches) {
      i += caches;
      continue;
    }
    const int super = superinstruction(previous, opcode);
    if (super && instructions[i - 1].op.code != super) {
      instructions[i - 1].op.code = (uint8_t)super;
      formed++;
    }
  }
  return formed;
}
#else
#include <Python.h>

int framescope_requicken(PyObject* object) {
  (void)object;
  return -1; /* (3.12 only) */
}
#endif
