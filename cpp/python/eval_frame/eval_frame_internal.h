// cpp/python/eval_frame/eval_frame_internal.h: the eval_frame API's types and frame access.
//
// The eval_frame API only ever looks at frames that have not started running (a fresh call, or
// on 3.10 the first resume of a generator): their argument slots hold the bound arguments and
// nothing else has happened yet. On 3.11+ that also means MAKE_CELL and COPY_FREE_VARS have not
// run: an argument that is a cell still holds its raw value, and free variables are only in the
// function's closure. On 3.10 the frame object was fully set up by the caller: cells exist (a
// cell argument's slot is empty, its value is in the cell) and free variables hold the closure's
// cells.
#pragma once

#include "tracer/frame_hook.h"  // first: Python.h with the internal frame headers

#include <cstdint>

#include "code_extra.h"

namespace framescope::py {

// ---- exec strategies ---------------------------------------------------------------------------

/// What a frame does (torch's FrameAction): values of framescope.eval_frame.FrameAction.
enum FrameAction : uint8_t {
  kActionDefault = 0,  ///< look the code up; call the callback on a miss
  kActionSkip = 1,     ///< run the original code, no lookup (recursive: the callback is None)
  kActionRunOnly = 2,  ///< look up and run a hit; a miss runs the original code, no callback
};

/// torch's FrameExecStrategy: the action for frames of a code object, and for every frame they
/// call, transitively (applied by swapping the thread's callback while the frame runs).
struct ExecStrategy {
  uint8_t cur = kActionDefault;
  uint8_t recursive = kActionDefault;
};

/// A FrameExecStrategy object: a strategy, and whether the callback's choice is stored for
/// later calls of the code (apply_to_code) or concerns this call only.
struct FrameExecStrategyObject {
  PyObject ob_base;  // PyObject_HEAD
  ExecStrategy strategy;
  bool apply_to_code;
};
extern PyTypeObject g_exec_strategy_type;

/// A new FrameAction member for `action` (new reference or null).
PyObject* frame_action_object(uint8_t action);
/// A new FrameExecStrategy (new reference or null).
PyObject* new_exec_strategy(ExecStrategy strategy, bool apply_to_code);
/// Parses an action argument (a FrameAction, or an int 0-2; not a bool). False with TypeError or
/// ValueError set.
bool parse_frame_action(PyObject* obj, const char* what, uint8_t* out);
/// Adds FrameAction and FrameExecStrategy to the module. False with an exception set.
bool eval_frame_strategy_init(PyObject* module);

// ---- objects -----------------------------------------------------------------------------------

struct FrameGuardProgram;

/// How a cache entry's guard is decided from the frame (CacheEntryObject::frame_guard).
enum FrameGuard : uint8_t {
  kNoFrameGuard = 0,  ///< check_fn is called
  /// check_fn is `bool`: the guard's result is the truth of f_locals, whether the frame binds a
  /// value (frame_binds_a_value)
  kTruthGuard = 1,
  /// check_fn is a Guard that runs no code: its guard_program runs on the frame
  kProgramGuard = 2,
};

/// One cached entry of a code object: a guard and the code to run when it holds. Entries form a
/// singly linked list (most recently hit first) owned by the code's EvalState.
struct CacheEntryObject {
  PyObject ob_base;  // PyObject_HEAD
  /// Null once the entry was dropped (reset_code, code death). Strong, except when it is the
  /// intercepted code itself (same_code): that code owns the entry (through co_extra), so the
  /// entry only borrows it.
  PyObject* code;
  PyObject* check_fn;      ///< strong; null once dropped
  CacheEntryObject* next;  ///< strong
  PyObject* shadow_func;   ///< strong: an idle function over `code` (see acquire_shadow), or null
  PyObject* kwonly_names;  ///< strong tuple of keyword-only argument names, or null
  /// Strong: the isolation key of the thread setting under which the entry was made (see
  /// entry_visible), or null for a shared entry. Kept when the entry is dropped (it is only a
  /// label).
  PyObject* isolation;
  /// Owned: the check_fn Guard compiled for the frame's code, when frame_guard is
  /// kProgramGuard (else null).
  FrameGuardProgram* guard_program;
  bool same_code;  ///< `code` is the intercepted code itself: run the frame as it is
  /// How a hit is decided from the frame, without calling check_fn (FrameGuard), when the entry
  /// runs the frame's own code and its guard runs no Python code: then a hit needs none of the
  /// lookup's protections against guards that run code (eval_api_frame's frame-guard path).
  uint8_t frame_guard;
};

/// What a callback returns to cache and run code: GuardedCode(code=..., check_fn=...).
/// An optional FrameExecStrategy goes with it (torch's ConvertFrameReturn); without one it is
/// (DEFAULT, DEFAULT), applied to the code, as torch's wrap_guarded_code.
struct GuardedCodeObject {
  PyObject ob_base;    // PyObject_HEAD
  PyObject* code;      ///< strong code object
  PyObject* check_fn;  ///< strong callable
  ExecStrategy strategy;
  bool apply_to_code;
  bool has_strategy;  ///< a strategy was given (the `strategy` attribute is not None)
};

/// The frame handed to a callback: a view of a frame that has not started, valid only while the
/// callback runs (the frame's memory belongs to CPython and is gone or reused afterwards).
struct EvalFrameObject {
  PyObject ob_base;  // PyObject_HEAD
  FsFrame* frame;    ///< borrowed; null once the callback returned
  PyObject* locals;  ///< strong: the f_locals (FrameLocals view) the guards got
  PyObject* back;    ///< strong: the caller's frame object (or None), taken when created
};

extern PyTypeObject g_cache_entry_type;
extern PyTypeObject g_guarded_code_type;
extern PyTypeObject g_eval_frame_type;

/// Per-code-object state, kept in CodeExtra::eval_state. GIL-protected. Reference-counted because
/// a guard or callback may call reset_code() on the code being looked up: the lookup holds a
/// reference and sees `detached`.
struct EvalState {
  Py_ssize_t refs = 1;               ///< the code's reference + one per lookup in progress
  bool detached = false;             ///< dropped by reset_code() or the code's death
  ExecStrategy strategy;             ///< set_code_exec_strategy(), skip_code(), the callback
  CacheEntryObject* head = nullptr;  ///< strong, most recently hit first
  PyObject* frame_state = nullptr;   ///< strong dict, created for the first callback call
  /// While attached: the CodeExtra holding this state, and the list of all attached states
  /// (dropped together at interpreter exit).
  CodeExtra* owner = nullptr;
  EvalState* prev_attached = nullptr;
  EvalState* next_attached = nullptr;
};

/// Live EvalStates and CacheEntry objects (leak tests).
extern Py_ssize_t g_live_states;
extern Py_ssize_t g_live_entries;
/// Intercepted frames disposed of by unwinding them (3.12+, see discard_unstarted_frame).
extern Py_ssize_t g_frames_unwound;

// ---- per-thread state --------------------------------------------------------------------------

struct ThreadGuardObject;

/// The eval_frame API's per-thread state besides hook_thread().eval_callback. Trivially
/// constructible: initial-exec TLS read on every intercepted frame.
struct EvalThread {
  /// Borrowed: the next unstarted frame running this code is a shadow call made by
  /// run_entry_code(), and runs as it is (no lookup).
  PyObject* bypass_code;
  /// Bumped by set_eval_frame() on this thread: after a lookup the callback taken out for the
  /// guards and the callback is put back only if nobody set another one meanwhile.
  uint64_t generation;
  /// Borrowed: the object in this thread's dict whose deallocation (thread exit) gives the
  /// thread's callback and its share of the hook back. Null until the thread enables a callback.
  ThreadGuardObject* guard;
  /// Strong: a FrameLocals view kept for the next lookup on this thread (see
  /// eval_frame_locals.cpp), or null.
  PyObject* locals_cache;
  /// Strong: the isolation key set with the callback (set_eval_frame(..., isolate=)), or null.
  PyObject* isolation;
  /// set_eval_frame(..., guard_errors="fail"): a guard that raises counts as a failed guard.
  bool guard_errors_fail;
};
extern thread_local EvalThread t_eval FRAMESCOPE_TLS_IE;

// ---- frames that have not started -------------------------------------------------------------

/// True when a frame already ran (a generator being resumed): never offered to a callback.
FRAMESCOPE_ALWAYS_INLINE bool frame_started(FsFrame* f) noexcept {
#if FS_PY311
  // Generator frames live in the generator and are evaluated only to resume it; its creation
  // call (RETURN_GENERATOR) runs on a thread-owned frame.
  return f->owner == FRAME_OWNED_BY_GENERATOR;
#else
  return f->f_lasti >= 0;
#endif
}

/// True while a trace/profile function or a sys.monitoring callback runs on this thread.
FRAMESCOPE_ALWAYS_INLINE bool thread_is_tracing(PyThreadState* ts) noexcept {
  return ts->tracing > 0;
}

/// Argument slots of a code object: positional, keyword-only, *args, **kwargs.
inline int code_arg_slots(PyCodeObject* co) noexcept {
  return co->co_argcount + co->co_kwonlyargcount + ((co->co_flags & CO_VARARGS) ? 1 : 0) +
         ((co->co_flags & CO_VARKEYWORDS) ? 1 : 0);
}

inline int code_free_count(PyCodeObject* co) noexcept {
#if FS_PY311
  return co->co_nfreevars;
#else
  return int(PyTuple_GET_SIZE(co->co_freevars));
#endif
}

/// True for function bodies (fast locals); false for module and class bodies and exec() code,
/// whose locals are a mapping.
inline bool code_is_function_body(PyCodeObject* co) noexcept {
  return (co->co_flags & CO_OPTIMIZED) != 0;
}

/// The value bound to argument slot `i` of an unstarted frame (borrowed, may be null).
inline PyObject* frame_argument(FsFrame* f, int i) noexcept {
#if FS_PY311
  return f->localsplus[i];
#else
  PyObject* v = f->f_localsplus[i];
  PyCodeObject* co = f->f_code;
  if (v || !co->co_cell2arg) return v;
  // A 3.10 argument that is also a cell was moved into its cell when the frame was made.
  Py_ssize_t ncells = PyTuple_GET_SIZE(co->co_cellvars);
  for (Py_ssize_t k = 0; k < ncells; k++) {
    if (co->co_cell2arg[k] == i) {
      PyObject* cell = f->f_localsplus[co->co_nlocals + k];
      return cell ? PyCell_GET(cell) : nullptr;
    }
  }
  return nullptr;
#endif
}

#if FS_PY311
/// The function object whose call made the frame (borrowed; a function for every frame the hook
/// sees, but checked before use).
inline PyObject* frame_function(FsFrame* f) noexcept {
#if FS_PY312
  return f->f_funcobj;
#else
  return reinterpret_cast<PyObject*>(f->f_func);
#endif
}
#endif

/// The cell of free variable `j` of an unstarted frame (borrowed, may be null).
inline PyObject* frame_free_cell(FsFrame* f, int j) noexcept {
#if FS_PY311
  PyObject* func = frame_function(f);
  if (!func || !PyFunction_Check(func)) return nullptr;
  PyObject* closure = PyFunction_GET_CLOSURE(func);  // borrowed
  if (!closure || !PyTuple_Check(closure) || j >= PyTuple_GET_SIZE(closure)) return nullptr;
  return PyTuple_GET_ITEM(closure, j);
#else
  PyCodeObject* co = f->f_code;
  return f->f_localsplus[co->co_nlocals + PyTuple_GET_SIZE(co->co_cellvars) + j];
#endif
}

/// Free variables shown in f_locals: those of function bodies only (as torch and CPython's own
/// frame locals: a class body's free variables are not its locals).
inline int shown_free_count(PyCodeObject* co) noexcept {
  return code_is_function_body(co) ? code_free_count(co) : 0;
}

/// Where f_locals finds `name` (a str) in frames of `co`: an argument slot (below
/// code_arg_slots(co)), or code_arg_slots(co) + j for shown free variable j; -1 when f_locals
/// never shows that name. Names are interned, and so are the string literals guards use:
/// pointers are compared first, values only when no pointer matched.
int frame_local_index(PyCodeObject* co, PyObject* name) noexcept;

/// The value f_locals shows at `index` (see frame_local_index; `nargs` is code_arg_slots of the
/// frame's code) of an unstarted frame: borrowed, null when unbound.
FRAMESCOPE_ALWAYS_INLINE PyObject* frame_local_value(FsFrame* f, int index, int nargs) noexcept {
  if (index < nargs) return frame_argument(f, index);
  PyObject* cell = frame_free_cell(f, index - nargs);
  return cell && PyCell_Check(cell) ? PyCell_GET(cell) : nullptr;
}

/// Whether an unstarted frame's f_locals binds a value after the first argument (its truth, when
/// the first argument is unbound): any argument slot or shown free variable.
bool frame_binds_a_later_value(FsFrame* f) noexcept;

/// The truth of an unstarted frame's f_locals (a FrameLocals view of it): whether any argument or
/// shown free variable is bound. Reads the frame only, runs no Python code. Inline: most frames
/// answer with their first argument.
FRAMESCOPE_ALWAYS_INLINE bool frame_binds_a_value(FsFrame* f) noexcept {
  PyCodeObject* co = frame_code(f);
  if (FRAMESCOPE_LIKELY(co->co_argcount > 0 && frame_argument(f, 0))) return true;
  return frame_binds_a_later_value(f);
}

/// Name of argument slot `i` / free variable `j` (borrowed).
inline PyObject* code_argument_name(PyCodeObject* co, int i) noexcept {
#if FS_PY311
  return PyTuple_GET_ITEM(co->co_localsplusnames, i);
#else
  return PyTuple_GET_ITEM(co->co_varnames, i);
#endif
}
inline PyObject* code_free_name(PyCodeObject* co, int j) noexcept {
#if FS_PY311
  return PyTuple_GET_ITEM(co->co_localsplusnames, co->co_nlocalsplus - co->co_nfreevars + j);
#else
  return PyTuple_GET_ITEM(co->co_freevars, j);
#endif
}

/// The pending exception, taken out and put back (PyErr_Fetch is deprecated on 3.12+).
struct PendingError {
#if FS_PY312
  PyObject* exc = nullptr;
  void take() noexcept { exc = PyErr_GetRaisedException(); }
  void restore() noexcept {
    PyErr_SetRaisedException(exc);
    exc = nullptr;
  }
  PyObject* value() const noexcept { return exc; }  ///< borrowed, may be null
  void drop() noexcept { Py_CLEAR(exc); }
#else
  PyObject* type = nullptr;
  PyObject* val = nullptr;
  PyObject* tb = nullptr;
  void take() noexcept {
    PyErr_Fetch(&type, &val, &tb);
    if (!type) return;
    PyErr_NormalizeException(&type, &val, &tb);
    if (tb && val) PyException_SetTraceback(val, tb);
  }
  void restore() noexcept {
    PyErr_Restore(type, val, tb);
    type = val = tb = nullptr;
  }
  PyObject* value() const noexcept { return val; }  ///< borrowed, may be null
  void drop() noexcept {
    Py_CLEAR(type);
    Py_CLEAR(val);
    Py_CLEAR(tb);
  }
#endif
};

// ---- process-wide settings (GIL-protected) ----------------------------------------------------

extern PyObject* g_guard_fail_hook;      ///< strong or null
extern PyObject* g_guard_error_hook;     ///< strong or null
extern PyObject* g_guard_complete_hook;  ///< strong or null
extern bool g_skip_guard_eval_unsafe;    ///< set_skip_guard_eval_unsafe()
/// g_skip_guard_eval_unsafe || g_guard_complete_hook: the lookup tests this one flag.
extern bool g_lookup_extras;

// ---- per-code states (eval_frame_state.cpp) ----------------------------------------------------

/// This code's state, created if missing. Borrowed; null with an exception set.
EvalState* state_for(PyCodeObject* code);
/// This code's state, or null when it has none. Borrowed.
inline EvalState* existing_state(PyCodeObject* code) noexcept {
  CodeExtra* extra = find_code_extra(code);
  return extra ? static_cast<EvalState*>(extra->eval_state) : nullptr;
}
/// Frees a state whose last reference was given back.
void free_released_state(EvalState* st);
/// Gives back a reference taken with ++st->refs (frees a detached state on the last one).
/// Inline: every lookup gives back the one it took.
FRAMESCOPE_ALWAYS_INLINE void release_state(EvalState* st) {
  if (--st->refs == 0) free_released_state(st);
}
/// Drops the entries, frame_state and strategy of `code` (reset_code).
void reset_state(PyCodeObject* code);
/// Drops every code object's state (reset(), interpreter exit).
void reset_all_states();
/// Installs the freefunc hook that drops a state when its code object dies.
void eval_frame_state_init();

// ---- shared functions --------------------------------------------------------------------------

/// f_locals of an unstarted frame: a new dict of its bound arguments and of the free variables
/// that hold a value; for module/class bodies, their locals mapping. New reference or null.
PyObject* build_frame_locals(FsFrame* frame);

/// A FrameLocals object: the f_locals guards, hooks and callbacks get (eval_frame_locals.cpp).
struct FrameLocalsObject {
  PyObject ob_base;  // PyObject_HEAD
  FsFrame* frame;    ///< borrowed: the live frame, or null once the view ended or was written to
  /// Strong dict of the values, for a view kept past its lookup or written to; null while the
  /// view reads the frame.
  PyObject* snapshot;
};
/// A new blank view (new reference or null): acquire_frame_locals() when the thread has none.
FrameLocalsObject* new_frame_locals();
/// release_frame_locals() of a view someone else still holds, or written to, or when the thread
/// already keeps one.
void release_frame_locals_slow(PyObject* locals);

/// The f_locals guards and callbacks get: a FrameLocals view of the frame (for module and class
/// bodies, their namespace). New reference or null. Must be given back with
/// release_frame_locals() while the frame is alive. Inline: every lookup takes the view the
/// thread keeps and gives it back (the allocation happens once per thread, or when a guard kept
/// the previous view).
FRAMESCOPE_ALWAYS_INLINE PyObject* acquire_frame_locals(FsFrame* frame) {
  auto* self = reinterpret_cast<FrameLocalsObject*>(t_eval.locals_cache);
  if (FRAMESCOPE_LIKELY(self != nullptr)) {
    t_eval.locals_cache = nullptr;  // its reference is the caller's now
  } else if (!(self = new_frame_locals())) {
    return nullptr;
  }
  self->frame = frame;
  return reinterpret_cast<PyObject*>(self);
}
/// Gives a view back: one nobody else holds and nobody wrote to goes back to the thread for its
/// next lookup; one kept by a guard, hook or callback becomes a snapshot of the values it showed.
FRAMESCOPE_ALWAYS_INLINE void release_frame_locals(PyObject* locals) {
  auto* self = reinterpret_cast<FrameLocalsObject*>(locals);
  if (FRAMESCOPE_LIKELY(Py_REFCNT(locals) == 1 && !self->snapshot && !t_eval.locals_cache)) {
    self->frame = nullptr;
    t_eval.locals_cache = locals;
    return;
  }
  release_frame_locals_slow(locals);
}
/// Frees this thread's recycled view (thread exit).
void release_thread_locals_cache();
bool eval_frame_locals_init(PyObject* module);

/// A Frame for the callback (new reference or null). `locals` (borrowed) is the f_locals view the
/// guards saw. expire_eval_frame() makes it unusable.
PyObject* new_eval_frame(PyThreadState* ts, FsFrame* frame, PyObject* locals);
void expire_eval_frame(PyObject* wrapper);

/// A new entry running `code` (after checking that it fits frames of `frame_code`) under
/// `check_fn`, labelled with `isolation` (borrowed, may be null). New reference, or null with
/// TypeError/ValueError/NotImplementedError set.
CacheEntryObject* new_cache_entry(PyCodeObject* frame_code, PyObject* code, PyObject* check_fn,
                                  PyObject* isolation);
/// Drops an entry's references (reset_code, code death). The entry object may live on if the
/// user holds it; it then reads as code=None, check_fn=None, next=None.
void drop_cache_entry(CacheEntryObject* entry);

/// Runs a cached entry whose code differs from the frame's on the frame's arguments and closure,
/// then disposes of the (never started) frame. `intercepting`: the thread's callback is set while
/// it runs (not None under a SKIP recursive action), so the shadow frame reaches the eval_frame
/// API and must be let through. New reference or null.
PyObject* run_entry_code(PyThreadState* ts, FsFrame* frame, CacheEntryObject* entry,
                         bool intercepting);
/// Error exit for an intercepted frame that never ran (the exception is set): disposes of the
/// frame where the evaluation function must (3.12+). Returns null.
PyObject* fail_unstarted_frame(PyThreadState* ts, FsFrame* frame);

/// Adds the GuardedCode, CacheEntry and Frame types to the module. False with an exception set.
bool eval_frame_types_init(PyObject* module);

}  // namespace framescope::py
