// cpp/python/eval_frame/eval_frame_guard.h: Guard, framescope's own C guard (declared checks on
// a frame's f_locals), and the program a cache entry runs it as, straight on the frame.
//
// Why a guard type of our own: a guard that is any callable costs a call per lookup (CPython's
// vectorcall, its recursion check, the result's truth), and since it may run Python code the
// lookup must protect itself around it (the code's state held, the thread's callback taken out
// and put back, an f_locals view taken and given back). A Guard is a list of checks the lookup
// can read: when none of them runs Python code (identity, exact type, None, equality with an
// int/str/... constant, the length of a builtin container), the entry gets a FrameGuardProgram
// when it is made -- the checks with each name resolved to its frame slot -- and a hit of that
// entry is decided from the frame like a `bool` guard's (eval_frame_lookup.cpp). Otherwise the
// Guard is called as any guard is: check_fn(f_locals).
#pragma once

#include "eval_frame/eval_frame_internal.h"  // first: Python.h with the internal frame headers

#include <vector>

namespace framescope::py {

/// What a check tests of a value (GuardValue's methods).
enum class GuardCheckKind : uint8_t {
  kBound,      ///< the value exists (a local with no checks of its own)
  kTypeIs,     ///< type(v) is obj
  kIs,         ///< v is obj
  kIsNone,     ///< v is None
  kIsNotNone,  ///< v is not None
  kEquals,     ///< type(v) is type(obj) and v == obj
  kLenIs,      ///< len(v) == n
  kSatisfies,  ///< obj(v) is true (a Python predicate)
};

/// Where a FrameGuardOp finds its value.
enum class GuardLoad : uint8_t {
  kPrevious,       ///< the previous op's value
  kTypedArgument,  ///< argument slot `index`, whose type must be exactly `type`
  kArgument,       ///< argument slot `index`
  kFree,           ///< free variable `index` (of type `type`, when set)
};

/// One step of a FrameGuardProgram: read a value (unless it is the previous op's), check that its
/// type is exactly `type` when that is set (a local's first check, type_is, folded into its
/// read), then apply `kind` (kBound: nothing more). Holds strong references to `type` and `obj`.
struct FrameGuardOp {
  PyObject* type;
  PyObject* obj;
  Py_ssize_t n;
  int32_t index;
  GuardLoad load;
  GuardCheckKind kind;
};

/// A Guard that runs no Python code, compiled for frames of one code object: its checks in the
/// Guard's order, each name resolved to its frame slot. Owned by a CacheEntry (freed by
/// free_frame_guard_program); immutable once built, read under the GIL.
struct FrameGuardProgram {
  std::vector<FrameGuardOp> ops;
};

/// True when `obj` is a Guard (exactly: the type cannot be subclassed).
bool is_guard(PyObject* obj) noexcept;

/// Makes a Guard unchangeable (GuardedCode(check_fn=guard)): adding a check raises from then on.
void freeze_guard(PyObject* guard) noexcept;

/// Prepares a Guard for caching on frames of `frame_code` (new_cache_entry): freezes it (no more
/// checks can be added), checks that f_locals of such frames shows every local it names (else
/// ValueError naming it), and when the entry runs the frame's own code (`same_code`) and no check
/// runs Python code, returns a new program (the caller owns it). *program stays null otherwise.
/// False with an exception set.
bool prepare_guard_for_code(PyObject* guard, PyCodeObject* frame_code, bool same_code,
                            FrameGuardProgram** program);

/// Frees a program and its references (null is fine).
void free_frame_guard_program(FrameGuardProgram* program) noexcept;

/// Visits the program's references (tp_traverse of the entry that owns it).
int traverse_frame_guard_program(const FrameGuardProgram* program, visitproc visit, void* arg);

/// v == c for a constant of one of the exact builtin scalar types a program compares (no Python
/// code runs); an error (none is expected) counts as not equal, and is cleared.
bool guard_constant_equals(PyObject* v, PyObject* c) noexcept;

/// Whether the program's checks hold on an unstarted frame of its code: 1 yes, 0 no. Runs no
/// Python code and never fails: inline, since a cache hit is decided by it. kQuick: makes no
/// call either (so that the caller saves no registers for one), returning -1 (undecided) where
/// one is needed -- a constant that is not the value itself, a length -- for the caller to ask
/// again without kQuick, out of line. The common checks (an exact type, a constant) are tested
/// before the switch of the others.
template <bool kQuick>
FRAMESCOPE_ALWAYS_INLINE int run_frame_guard(const FrameGuardProgram* p, FsFrame* f) noexcept {
  PyObject* v = nullptr;
  for (const FrameGuardOp& op : p->ops) {
    if (FRAMESCOPE_LIKELY(op.load == GuardLoad::kTypedArgument)) {  // a local's type_is first
      v = frame_argument(f, op.index);
      if (!v || reinterpret_cast<PyObject*>(Py_TYPE(v)) != op.type) return 0;
    } else if (op.load != GuardLoad::kPrevious) {
      if (op.load == GuardLoad::kArgument) {
        v = frame_argument(f, op.index);
      } else {
        PyObject* cell = frame_free_cell(f, op.index);
        v = cell && PyCell_Check(cell) ? PyCell_GET(cell) : nullptr;
      }
      if (!v) return 0;
      if (op.type && reinterpret_cast<PyObject*>(Py_TYPE(v)) != op.type) return 0;
    }
    if (op.kind == GuardCheckKind::kBound) continue;
    if (op.kind == GuardCheckKind::kEquals) {
      if (v == op.obj) continue;  // small ints, interned strings, None, True, False
      if (Py_TYPE(v) != Py_TYPE(op.obj)) return 0;
      if constexpr (kQuick) {
        return -1;
      } else {
        if (!guard_constant_equals(v, op.obj)) return 0;
        continue;
      }
    }
    switch (op.kind) {
      case GuardCheckKind::kTypeIs:
        if (reinterpret_cast<PyObject*>(Py_TYPE(v)) != op.obj) return 0;
        break;
      case GuardCheckKind::kIs:
        if (v != op.obj) return 0;
        break;
      case GuardCheckKind::kIsNone:
        if (v != Py_None) return 0;
        break;
      case GuardCheckKind::kIsNotNone:
        if (v == Py_None) return 0;
        break;
      case GuardCheckKind::kLenIs: {
        if constexpr (kQuick) {
          return -1;
        } else {
          // Only after an exact type check for a builtin container (see
          // prepare_guard_for_code): the length is read without running code.
          const Py_ssize_t n = PyObject_Length(v);
          if (n < 0) PyErr_Clear();
          if (n != op.n) return 0;
          break;
        }
      }
      case GuardCheckKind::kSatisfies:  // never compiled: a predicate runs code
        return 0;
      default:  // kBound, handled above
        break;
    }
  }
  return 1;
}

/// Adds Guard and GuardValue to the module. False with an exception set.
bool eval_frame_guard_init(PyObject* module);

}  // namespace framescope::py
