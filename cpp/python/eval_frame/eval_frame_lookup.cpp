// cpp/python/eval_frame/eval_frame_lookup.cpp: what happens to a frame the eval_frame API
// intercepts: exec strategies, the guarded lookup inside a "Cache Lookup" range, the callback on a
// miss, and running the result under the recursive action.
//
// Flow of a frame that has not started, on a thread whose callback is set (torch's
// dynamo__custom_eval_frame; docs/eval_frame.md lists where framescope differs):
//   1. the code's stored strategy: cur_action SKIP, or run-only with nothing cached -> run the
//      frame, under the stored recursive action;
//   2. the thread's callback is taken out (it reads as None) so that guards, hooks and the
//      callback are never intercepted themselves;
//   3. inside a "Cache Lookup" range: check_fn(f_locals) of each entry visible to this thread
//      (isolation), most recent first; the first true one moves to the head. With
//      skip_guard_eval_unsafe, the first visible entry is a hit without running any guard;
//   4. the guard complete hook, when set and the code has entries, may turn a hit into a miss;
//   5. a miss: with skip_guard_eval_unsafe, RuntimeError; in run-only mode (the callback is False,
//      or the code's cur_action is RUN_ONLY) the original code runs; else
//      callback(frame, head_entry_or_None, frame_state) returns None, a FrameExecStrategy or a
//      GuardedCode (a new head entry); its strategy is stored for the code unless
//      apply_to_code=False, and its recursive action applies unless the stored one is not DEFAULT;
//   6. the callback is put back (unless set_eval_frame() was called meanwhile), then the hit or
//      the new entry runs -- the frame itself when it caches the frame's own code, else a shadow
//      call (eval_frame_run.cpp) -- with the thread's callback swapped for the recursive
//      action's (SKIP: None, RUN_ONLY: False) while it runs.
// The common case -- the code's most recently hit entry caches the frame's own code and its guard
// holds -- takes eval_head_entry(), the same steps in one function (docs/performance.md has what
// each costs); anything else there continues in the general walk. When that entry's guard is
// `bool` itself, its result is read from the frame (no code runs), and a hit runs the frame at
// once (eval_frame_guard_entry()); so does it when that guard is a Guard whose checks run no code
// (eval_frame_guard.h), compiled for the code when the entry was made.
#include "eval_frame/eval_frame_internal.h"  // first: Python.h with the internal frame headers

#include <new>
#include <type_traits>

#include "eval_frame/eval_frame_guard.h"
#include "framescope/record_function.h"
#include "tracer/tracer.h"
#include "tracer/tracer_api.h"

namespace framescope::py {

// Defined here, where every intercepted frame reads it: in its own translation unit a
// thread_local is read directly, elsewhere through a check for a dynamic initializer.
thread_local EvalThread t_eval FRAMESCOPE_TLS_IE = {nullptr, 0, nullptr, nullptr, nullptr, false};

PyObject* g_guard_fail_hook = nullptr;
PyObject* g_guard_error_hook = nullptr;
PyObject* g_guard_complete_hook = nullptr;
bool g_skip_guard_eval_unsafe = false;
bool g_lookup_extras = false;

namespace {

// The name of every lookup's range (static storage: events record its address).
constexpr const char* kCacheLookupName = "Cache Lookup";

// What the lookup of one frame sees of the thread's setting: whether the callback is False (taken
// when the lookup starts, as the callback is taken out meanwhile). The isolation key and the
// guard_errors setting are read from the thread when they are needed (guards and callbacks do not
// change them, unless they call set_eval_frame(), whose choice then applies at once).
struct LookupContext {
  bool run_only;
};

// Whether `e` may be hit by this lookup. An isolated setting sees only the entries made under an
// equal key; a shared one sees the shared entries, and in run-only mode every entry (as torch's
// run-only mode matches every backend; a RUN_ONLY recursive action drops the isolation, see
// run_swapped). 1 yes, 0 no, -1 error (a key's __eq__ raised).
FRAMESCOPE_ALWAYS_INLINE int entry_visible(const CacheEntryObject* e, LookupContext lk) {
  PyObject* key = e->isolation;
  PyObject* mine = t_eval.isolation;  // borrowed: the thread holds it
  if (FRAMESCOPE_LIKELY(!mine)) return lk.run_only || !key;
  if (!key) return 0;
  if (key == mine) return 1;
  Py_INCREF(mine);  // __eq__ may change the thread's setting
  int eq = PyObject_RichCompareBool(key, mine, Py_EQ);
  Py_DECREF(mine);
  return eq;
}

// Moves `e` to the head of the list if it is still in it. The list may have changed while guards
// ran (another thread can run while a guard does), so the predecessor is looked up again.
void move_to_head(EvalState* st, CacheEntryObject* e) {
  CacheEntryObject* prev = st->head;
  if (prev == e || !prev) return;
  while (prev && prev->next != e) prev = prev->next;
  if (!prev) return;
  // References move along with the links: prev takes e's, e takes the old head's, st takes e.
  prev->next = e->next;
  e->next = st->head;
  st->head = e;
}

// check_fn(f_locals) through its vectorcall slot when it has one (Python functions, most
// builtins): PyObject_CallOneArg would look the thread state up again.
FRAMESCOPE_ALWAYS_INLINE int call_guard(PyObject* check_fn, PyObject* locals) {
  PyObject* r;  // new
  PyTypeObject* type = Py_TYPE(check_fn);
  if (PyType_HasFeature(type, Py_TPFLAGS_HAVE_VECTORCALL) && type->tp_vectorcall_offset > 0) {
    vectorcallfunc vc = *reinterpret_cast<vectorcallfunc*>(reinterpret_cast<char*>(check_fn) +
                                                           type->tp_vectorcall_offset);
    PyObject* args[2] = {nullptr, locals};
    r = vc ? vc(check_fn, args + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr)
           : PyObject_CallOneArg(check_fn, locals);
    if (!r && !PyErr_Occurred()) {
      PyErr_Format(PyExc_SystemError, "guard %R returned NULL without setting an exception",
                   check_fn);
    }
  } else {
    r = PyObject_CallOneArg(check_fn, locals);
  }
  if (!r) return -1;
  int ok = r == Py_True ? 1 : r == Py_False ? 0 : PyObject_IsTrue(r);
  Py_DECREF(r);
  return ok;
}

// hook(check_fn, code, f_locals, index, is_last), as Dynamo calls its guard hooks. `index` is
// the entry's position in the code's list, `is_last` whether it is the list's last entry. A null
// `e` is an entry its guard dropped (reset_code): code None, the last one, as a dropped entry
// reads.
int call_guard_hook(PyObject* hook, PyObject* check_fn, CacheEntryObject* e, PyObject* locals,
                    Py_ssize_t index) {
  PyObject* hook_ref = Py_NewRef(hook);  // the hook may replace itself
  PyObject* code = Py_NewRef(e && e->code ? e->code : Py_None);
  PyObject* idx = PyLong_FromSsize_t(index);
  PyObject* r = nullptr;
  if (idx) {
    PyObject* args[5] = {check_fn, code, locals, idx, e && e->next ? Py_False : Py_True};
    r = PyObject_Vectorcall(hook_ref, args, 5, nullptr);
  }
  Py_XDECREF(idx);
  Py_DECREF(code);
  Py_DECREF(hook_ref);
  if (!r) return -1;
  Py_DECREF(r);
  return 0;
}

// A guard raised (its exception is set). The error hook is told; then with guard_errors="raise"
// the guard's exception stands (-1), with "fail" it is dropped and the guard counts as one that
// did not hold (0). An exception from the hook wins either way (-1), with the guard's as its
// __context__.
FRAMESCOPE_NOINLINE int handle_guard_error(PyObject* check_fn, CacheEntryObject* e,
                                           PyObject* locals, Py_ssize_t index, bool fail) {
  PendingError guard_error;
  guard_error.take();
  if (g_guard_error_hook && call_guard_hook(g_guard_error_hook, check_fn, e, locals, index) < 0) {
    PendingError hook_error;
    hook_error.take();
    if (hook_error.value() && guard_error.value() && hook_error.value() != guard_error.value()) {
      PyException_SetContext(hook_error.value(), Py_NewRef(guard_error.value()));
    }
    guard_error.drop();
    hook_error.restore();
    return -1;
  }
  if (fail) {
    guard_error.drop();
    return 0;
  }
  guard_error.restore();
  return -1;
}

// skip_guard_eval_unsafe: the first visible entry (the most recently hit one) is a hit, no guard
// runs. Same results as walk_entries.
FRAMESCOPE_NOINLINE int first_visible_entry(EvalState* st, LookupContext lk,
                                            CacheEntryObject** hit) {
  CacheEntryObject* e = st->head;
  Py_XINCREF(e);
  while (e && !st->detached) {
    int visible = entry_visible(e, lk);  // may run a key's __eq__
    if (visible < 0) {
      Py_DECREF(e);
      return -1;
    }
    if (visible && e->code && !st->detached) {
      move_to_head(st, e);
      *hit = e;
      return 1;
    }
    CacheEntryObject* next = e->next;
    Py_XINCREF(next);
    Py_DECREF(e);
    e = next;
  }
  Py_XDECREF(e);
  return 0;
}

// Runs the guards of the visible entries in order from `e` (a new reference; the entry at
// position `index`). When `check_fn` is given (a new reference: e's guard), that guard already
// ran and returned `ok`; then a null `e` is an entry that guard dropped (it reset the code). 1:
// hit (*hit is a new reference, moved to the head), 0: miss (also when the state was reset
// meanwhile), -1: error. Consumes the references to `e` and `check_fn`.
FRAMESCOPE_NOINLINE int walk_from(EvalState* st, LookupContext lk, PyObject* locals,
                                  CacheEntryObject* e, Py_ssize_t index, PyObject* check_fn, int ok,
                                  CacheEntryObject** hit) {
  if (!e && check_fn) {  // as below for an entry whose state was reset by its guard
    if (ok < 0) ok = handle_guard_error(check_fn, nullptr, locals, index, t_eval.guard_errors_fail);
    Py_DECREF(check_fn);
    return ok < 0 ? -1 : 0;
  }
  while (e) {
    if (!check_fn) {
      int visible = entry_visible(e, lk);
      if (visible < 0) {
        Py_DECREF(e);
        return -1;
      }
      if (!visible) {
        if (st->detached) break;
        goto next;
      }
      // Held across the call: the guard may reset the code, dropping the entry's references.
      check_fn = Py_XNewRef(e->check_fn);
      if (!check_fn) break;
      ok = call_guard(check_fn, locals);
    }
    {
      const bool raised = ok < 0;
      if (raised &&
          (ok = handle_guard_error(check_fn, e, locals, index, t_eval.guard_errors_fail)) < 0) {
        Py_DECREF(check_fn);
        Py_DECREF(e);
        return -1;
      }
      if (st->detached) {
        Py_DECREF(check_fn);
        break;
      }
      if (ok) {
        Py_DECREF(check_fn);
        move_to_head(st, e);
        *hit = e;
        return 1;
      }
      if (!raised && g_guard_fail_hook &&
          call_guard_hook(g_guard_fail_hook, check_fn, e, locals, index) < 0) {
        Py_DECREF(check_fn);
        Py_DECREF(e);
        return -1;
      }
      Py_CLEAR(check_fn);
    }
  next:
    CacheEntryObject* next = e->next;
    Py_XINCREF(next);
    Py_DECREF(e);
    e = next;
    ++index;
  }
  Py_XDECREF(e);
  return 0;
}

// Runs the guards of the visible entries in order. 1: hit (*hit is a new reference, moved to the
// head), 0: miss (also when the state was reset meanwhile), -1: error. *locals_out gets the
// f_locals view the guards saw (new reference), if one was made.
FRAMESCOPE_ALWAYS_INLINE int walk_entries(EvalState* st, FsFrame* frame, LookupContext lk,
                                          PyObject** locals_out, CacheEntryObject** hit) {
  PyObject* locals = acquire_frame_locals(frame);  // new
  if (!locals) return -1;
  *locals_out = locals;
  return walk_from(st, lk, locals, reinterpret_cast<CacheEntryObject*>(Py_XNewRef(st->head)), 0,
                   nullptr, 0, hit);
}

// The guard complete hook, called after the lookup of a code that has entries: hook(cache_hit).
// A false result turns a hit into a miss. Returns the lookup's new result (1 hit, 0 miss, -1
// error), releasing *hit when it is no longer one.
int complete_lookup(PyCodeObject* code, int found, CacheEntryObject** hit) {
  EvalState* cur = existing_state(code);
  if (!cur || !cur->head) return found;
  PyObject* hook = Py_NewRef(g_guard_complete_hook);  // the hook may replace itself
  PyObject* r = PyObject_CallOneArg(hook, found > 0 ? Py_True : Py_False);
  Py_DECREF(hook);
  int keep = -1;
  if (r) {
    keep = PyObject_IsTrue(r);
    Py_DECREF(r);
  }
  if (found > 0 && keep <= 0) Py_CLEAR(*hit);
  return keep < 0 ? -1 : found > 0 && keep ? 1 : 0;
}

// The lookup when skip_guard_eval_unsafe or a guard complete hook is set (g_lookup_extras): out
// of the common path, which then tests one flag. Same results as walk_entries.
FRAMESCOPE_NOINLINE int lookup_with_extras(EvalState* st, PyCodeObject* code, FsFrame* frame,
                                           LookupContext lk, PyObject** locals_out,
                                           CacheEntryObject** hit) {
  int found = 0;
  {
    RecordFunction range(kCacheLookupName);
    if (st->head) {
      found = g_skip_guard_eval_unsafe ? first_visible_entry(st, lk, hit)
                                       : walk_entries(st, frame, lk, locals_out, hit);
    }
  }
  if (g_guard_complete_hook && found >= 0) found = complete_lookup(code, found, hit);
  return found;
}

enum class Plan : uint8_t { kError, kRunFrame, kRunEntry };

// What the callback decided, read from its return value: None (skip this code from now on, as
// torch's default ConvertFrameReturn), a FrameExecStrategy, or a GuardedCode.
struct Decision {
  ExecStrategy strategy{kActionSkip, kActionDefault};
  bool apply_to_code = true;
  GuardedCodeObject* guarded = nullptr;  // borrowed from the return value
};

bool read_decision(PyObject* r, Decision* d) {
  if (r == Py_None) return true;
  if (PyObject_TypeCheck(r, &g_guarded_code_type)) {
    d->guarded = reinterpret_cast<GuardedCodeObject*>(r);
    d->strategy = d->guarded->has_strategy ? d->guarded->strategy : ExecStrategy{};
    d->apply_to_code = d->guarded->has_strategy ? d->guarded->apply_to_code : true;
    return true;
  }
  if (PyObject_TypeCheck(r, &g_exec_strategy_type)) {
    auto* s = reinterpret_cast<FrameExecStrategyObject*>(r);
    d->strategy = s->strategy;
    d->apply_to_code = s->apply_to_code;
    return true;
  }
  PyErr_Format(PyExc_TypeError,
               "eval_frame callback must return None, a GuardedCode or a FrameExecStrategy, not "
               "%.100s",
               Py_TYPE(r)->tp_name);
  return false;
}

// A miss with a callable callback. `*st` (held) may be swapped for the code's fresh state when
// the code was reset meanwhile. On kRunEntry, *hit is a new reference to the new entry.
// *recursive becomes the decision's recursive action unless the stored one was not DEFAULT.
FRAMESCOPE_NOINLINE Plan call_callback(PyThreadState* ts, FsFrame* frame, PyCodeObject* code,
                                       EvalState** st, PyObject* callback, ExecStrategy stored,
                                       uint8_t* recursive, PyObject** locals,
                                       CacheEntryObject** hit) {
  if ((*st)->detached) {
    EvalState* fresh = state_for(code);
    if (!fresh) return Plan::kError;
    ++fresh->refs;
    release_state(*st);
    *st = fresh;
  }
  EvalState* s = *st;
  if (!s->frame_state && !(s->frame_state = PyDict_New())) return Plan::kError;
  if (!*locals && !(*locals = acquire_frame_locals(frame))) return Plan::kError;
  PyObject* head = Py_NewRef(s->head ? reinterpret_cast<PyObject*>(s->head) : Py_None);
  PyObject* frame_state = Py_NewRef(s->frame_state);
  PyObject* wrapper = new_eval_frame(ts, frame, *locals);  // new
  PyObject* r = nullptr;
  if (wrapper) {
    PyObject* args[3] = {wrapper, head, frame_state};
    r = PyObject_Vectorcall(callback, args, 3, nullptr);
    expire_eval_frame(wrapper);
    Py_DECREF(wrapper);
  }
  Py_DECREF(head);
  Py_DECREF(frame_state);
  if (!r) return Plan::kError;

  // The callback may have reset this code: what it returns goes to the code's current state.
  Plan plan = Plan::kError;
  Decision d;
  CacheEntryObject* e = nullptr;  // new
  if (read_decision(r, &d) &&
      (!d.guarded ||
       (e = new_cache_entry(code, d.guarded->code, d.guarded->check_fn, t_eval.isolation)))) {
    if (EvalState* cur = state_for(code)) {
      if (stored.recursive == kActionDefault) *recursive = d.strategy.recursive;
      if (d.apply_to_code) cur->strategy = d.strategy;
      if (e) {
        e->next = cur->head;  // the list's reference moves to e
        cur->head = e;
        *hit = reinterpret_cast<CacheEntryObject*>(Py_NewRef(e));
        e = nullptr;
        plan = Plan::kRunEntry;
      } else {
        plan = Plan::kRunFrame;
      }
    }
  }
  Py_XDECREF(e);
  Py_DECREF(r);
  return plan;
}

// Outcome::action of a lookup that failed (an exception is set).
constexpr uint8_t kFailed = 0xff;

// What to do with an intercepted frame, returned in two registers: run the frame (entry null)
// or the entry on it, with `action` for the frames it calls; or fail.
struct Outcome {
  CacheEntryObject* entry;  ///< a new reference to the entry to run, or null
  uint8_t action;           ///< a FrameAction for the frames the frame calls, or kFailed
};

// One lookup in progress: what begin_lookup() took from the thread and what the walk found.
struct Lookup {
  EvalState* st;        ///< held (++refs): a guard may reset the code
  PyObject* callback;   ///< the thread's callback, taken out while the lookup runs (its ref)
  uint64_t generation;  ///< t_eval.generation when it was taken out
  LookupContext lk;
  PyObject* locals;       ///< the f_locals view the guards saw (new reference), or null
  CacheEntryObject* hit;  ///< the entry hit (new reference), or null
};

// Starts the lookup of a frame of `st`'s code. No re-entry: the callback is taken out of the
// thread (it reads as None) while guards, hooks and the callback run; the lookup holds its
// reference meanwhile.
FRAMESCOPE_ALWAYS_INLINE Lookup begin_lookup(HookThread& h, EvalState* st) {
  ++st->refs;
  PyObject* callback = h.eval_callback;
  h.eval_callback = nullptr;
  return Lookup{st,      callback, t_eval.generation, LookupContext{callback == Py_False},
                nullptr, nullptr};
}

// Ends a lookup: gives the thread its callback back (nested frames of the code run are
// intercepted again) unless set_eval_frame() ran meanwhile (its choice then stands), and
// releases the view and the state.
FRAMESCOPE_ALWAYS_INLINE void end_lookup(HookThread& h, const Lookup& lookup) {
  if (FRAMESCOPE_LIKELY(t_eval.generation == lookup.generation)) {
    h.eval_callback = lookup.callback;
  } else {
    Py_DECREF(lookup.callback);
  }
  if (lookup.locals) release_frame_locals(lookup.locals);
  release_state(lookup.st);
}

// What follows the walk (`found`: 1 hit, 0 miss, -1 error): a miss calls the callback (or, in
// run-only mode, runs the original code); then the lookup ends. Returns what to run.
FRAMESCOPE_NOINLINE Outcome conclude_lookup(PyThreadState* ts, FsFrame* frame, PyCodeObject* code,
                                            Lookup lookup, int found) {
  // Read after the guards (which rarely change it): a reset meanwhile leaves it in the old state.
  const ExecStrategy stored = lookup.st->strategy;
  uint8_t recursive = stored.recursive;
  Plan plan = found > 0 ? Plan::kRunEntry : Plan::kError;
  if (found == 0) {
    if (g_skip_guard_eval_unsafe) {
      PyErr_Format(PyExc_RuntimeError,
                   "Recompilation triggered with skip_guard_eval_unsafe set: no cached entry of "
                   "%R can run (framescope.eval_frame.set_skip_guard_eval_unsafe(False) lets the "
                   "callback be called again)",
                   reinterpret_cast<PyObject*>(code));
    } else if (lookup.lk.run_only || stored.cur == kActionRunOnly) {
      plan = Plan::kRunFrame;
    } else {
      plan = call_callback(ts, frame, code, &lookup.st, lookup.callback, stored, &recursive,
                           &lookup.locals, &lookup.hit);
    }
  }
  end_lookup(hook_thread(), lookup);
  CacheEntryObject* hit = lookup.hit;
  if (plan == Plan::kError) return {nullptr, kFailed};
  if (plan == Plan::kRunEntry && hit->same_code) {
    Py_DECREF(hit);
    return {nullptr, recursive};
  }
  return {plan == Plan::kRunEntry ? hit : nullptr, recursive};
}

// The lookup (and callback) of an intercepted frame. Out of line so that the C stack the frame
// keeps while it runs (deep recursion) holds none of this. kRunEntry never comes with an entry
// caching the frame's own code: that is kRunFrame.
FRAMESCOPE_NOINLINE Outcome intercept(PyThreadState* ts, FsFrame* frame, PyCodeObject* code,
                                      EvalState* st) {
  HookThread& h = hook_thread();  // one TLS access
  // c_stack_nearly_exhausted() starts with this test of the hook's check line; made here, the
  // common case costs no call.
  char marker;
  if (FRAMESCOPE_UNLIKELY(reinterpret_cast<uintptr_t>(&marker) < h.stack_check_below) &&
      c_stack_nearly_exhausted()) {
    PyErr_SetString(PyExc_RecursionError,
                    "maximum recursion depth exceeded (framescope: the C stack is nearly exhausted "
                    "by frames intercepted by the eval_frame API)");
    return {nullptr, kFailed};
  }
  if (!st && !(st = state_for(code))) return {nullptr, kFailed};
  Lookup lookup = begin_lookup(h, st);
  int found = 0;
  if (FRAMESCOPE_LIKELY(!g_lookup_extras)) {
    RecordFunction range(kCacheLookupName);
    if (st->head) found = walk_entries(st, frame, lookup.lk, &lookup.locals, &lookup.hit);
  } else {
    found = lookup_with_extras(st, code, frame, lookup.lk, &lookup.locals, &lookup.hit);
  }
  return conclude_lookup(ts, frame, code, lookup, found);
}

// Runs the frame (or `entry` on it) with the thread's setting swapped for what the recursive
// action says every frame it calls does: SKIP -> callback None; RUN_ONLY -> False without
// isolation, so that, as in torch (whose run-only mode matches every backend), the callees' hits
// may run any entry. Afterwards the setting is put back, unless set_eval_frame() was called on
// this thread meanwhile (then that choice stands; torch puts its callback back regardless).
FRAMESCOPE_NOINLINE PyObject* run_swapped(PyThreadState* ts, FsFrame* frame, int throwflag,
                                          uint8_t action, CacheEntryObject* entry) {
  PyObject* replacement = action == kActionSkip ? nullptr : Py_False;
  PyObject* saved =
      hook_thread().eval_callback;  // the thread's reference: ours while the frame runs
  if (saved == replacement && (!replacement || !t_eval.isolation)) {
    return entry ? run_entry_code(ts, frame, entry, saved != nullptr)
                 : run_frame(ts, frame, throwflag);
  }
  PyObject* saved_isolation = replacement ? t_eval.isolation : nullptr;  // moved here too
  if (replacement) t_eval.isolation = nullptr;
  const uint64_t generation = t_eval.generation;
  hook_thread().eval_callback = Py_XNewRef(replacement);
  PyObject* result = entry ? run_entry_code(ts, frame, entry, replacement != nullptr)
                           : run_frame(ts, frame, throwflag);
  if (t_eval.generation == generation) {
    PyObject* current = hook_thread().eval_callback;
    hook_thread().eval_callback = saved;
    if (replacement) t_eval.isolation = saved_isolation;
    Py_XDECREF(current);
  } else {
    Py_XDECREF(saved);
    Py_XDECREF(saved_isolation);
  }
  return result;
}

// Runs the frame, or `entry` (borrowed, may be null) on it, under `action` for its callees.
FRAMESCOPE_ALWAYS_INLINE PyObject* run_under(PyThreadState* ts, FsFrame* frame, int throwflag,
                                             uint8_t action, CacheEntryObject* entry) {
  if (FRAMESCOPE_LIKELY(action == kActionDefault)) {
    return entry ? run_entry_code(ts, frame, entry, true) : run_frame(ts, frame, throwflag);
  }
  return run_swapped(ts, frame, throwflag, action, entry);
}

// Runs what a lookup decided for a fresh frame.
FRAMESCOPE_ALWAYS_INLINE PyObject* run_outcome(PyThreadState* ts, FsFrame* frame, Outcome o) {
  PyObject* result;
  if (FRAMESCOPE_LIKELY(o.action == kActionDefault)) {
    if (!o.entry) return run_frame(ts, frame, 0);
    result = run_entry_code(ts, frame, o.entry, true);
  } else if (o.action == kFailed) {
    return fail_unstarted_frame(ts, frame);
  } else {
    result = run_swapped(ts, frame, 0, o.action, o.entry);
  }
  Py_XDECREF(o.entry);
  return result;
}

// Intercepts a fresh frame and runs what the lookup (or the callback) decided.
FRAMESCOPE_ALWAYS_INLINE PyObject* intercept_and_run(PyThreadState* ts, FsFrame* frame,
                                                     PyCodeObject* code, EvalState* st) {
  return run_outcome(ts, frame, intercept(ts, frame, code, st));
}

// Whether a lookup may start with the head entry's guard in eval_head_entry(): the entry was
// made under the thread's isolation key itself or both have none (so entry_visible() holds
// without a compare, in run-only mode too), and no skip_guard_eval_unsafe or guard complete hook
// changes what a lookup does.
FRAMESCOPE_ALWAYS_INLINE bool head_entry_path(const CacheEntryObject* e) {
  return e->check_fn && e->isolation == t_eval.isolation && !g_lookup_extras;
}

// RecordFunction::end_slow() for a Cache Lookup range that ends on the thread that began it:
// nothing is written once the session stopped; while it runs the thread still owns `b` (only its
// slot was invalidated); a begin the buffer dropped counts its end as dropped too.
FRAMESCOPE_NOINLINE void end_lookup_range_slow(internal::ThreadBuffer* b, uint64_t seq,
                                               uint64_t epoch) {
  const bool slot = internal::t_slot.buffer == b && internal::t_slot.epoch == epoch;
  if (!slot && internal::g_session_epoch.load(std::memory_order_relaxed) != epoch) return;
  if (seq == internal::ThreadBuffer::kDroppedSeq) {
    b->count_dropped(1);
  } else {
    b->append(now_ticks(), internal::pack_word(internal::EventKind::kRangeEnd, seq));
  }
}

// The Cache Lookup range of eval_head_entry(): the events RecordFunction(kCacheLookupName)
// records, with less bookkeeping where a session records on this thread and nothing else
// observes ranges (no callbacks, no shapes): two appends, and the buffer, the begin's sequence
// number and the session kept in three locals rather than a RecordFunction's ten fields. Any
// other case takes a real RecordFunction. Begins and ends on one thread (a lookup's).
class LookupRange {
 public:
  FRAMESCOPE_ALWAYS_INLINE LookupRange() noexcept {
    if (FRAMESCOPE_UNLIKELY(internal::g_range_consumers.load(std::memory_order_relaxed) != 0)) {
      start();
    }
  }
  /// Inert until start_lean().
  struct Deferred {};
  explicit LookupRange(Deferred) noexcept {}
  ~LookupRange() { end(); }
  LookupRange(const LookupRange&) = delete;
  LookupRange& operator=(const LookupRange&) = delete;

  /// Ends the range (idempotent).
  FRAMESCOPE_ALWAYS_INLINE void end() noexcept {
    if (FRAMESCOPE_LIKELY(state_ == kInert)) return;
    if (FRAMESCOPE_LIKELY(state_ == kLean)) {
      state_ = kInert;
      if (FRAMESCOPE_LIKELY(internal::t_slot.buffer == buffer_ &&
                            internal::t_slot.epoch == epoch_ &&
                            seq_ != internal::ThreadBuffer::kDroppedSeq)) {
        buffer_->append(now_ticks(), internal::pack_word(internal::EventKind::kRangeEnd, seq_));
      } else {
        end_lookup_range_slow(buffer_, seq_, epoch_);
      }
      return;
    }
    state_ = kInert;
    std::launder(reinterpret_cast<RecordFunction*>(observed_))->~RecordFunction();  // ends it
  }

  /// Starts the range (of an inert one) when it is recorded leanly, which runs no code; false,
  /// still inert, when it would be observed some other way (a RecordFunction, whose callbacks
  /// may run code) or not recorded on this thread.
  FRAMESCOPE_ALWAYS_INLINE bool start_lean() noexcept {
    internal::ThreadBuffer* b = internal::current_buffer();
    if (!is_lean(b)) return false;
    begin_lean(b);
    return true;
  }

 private:
  enum State : uint8_t { kInert, kLean, kObserved };
  static FRAMESCOPE_ALWAYS_INLINE bool is_lean(internal::ThreadBuffer* b) noexcept {
    return b != nullptr && !internal::have_callbacks() && !b->record_shapes;
  }
  FRAMESCOPE_ALWAYS_INLINE void begin_lean(internal::ThreadBuffer* b) noexcept {
    epoch_ = internal::t_slot.epoch;
    seq_ = b->append(now_ticks(),
                     internal::range_begin_word(kCacheLookupName, RecordScope::kFunction));
    buffer_ = b;
    state_ = kLean;
  }
  FRAMESCOPE_ALWAYS_INLINE void start() noexcept {
    internal::ThreadBuffer* b = internal::current_buffer();
    if (FRAMESCOPE_LIKELY(is_lean(b))) {
      begin_lean(b);
    } else {
      new (observed_) RecordFunction(kCacheLookupName);
      state_ = kObserved;
    }
  }

  State state_ = kInert;
  // Set in the kLean state only.
  internal::ThreadBuffer* buffer_;
  uint64_t seq_;
  uint64_t epoch_;
  // The kObserved state's range, built in place (a std::optional would add its own flag to
  // test on every lookup).
  alignas(RecordFunction) unsigned char observed_[sizeof(RecordFunction)];
};

// What eval_head_entry() has in place of a LookupRange when nothing observed ranges as the lookup
// began (a LookupRange would then stay inert: its test, state and end are left out).
struct NoLookupRange {
  void end() noexcept {}
};

// Runs `entry` (a new reference, given back here), caching another code object, on a fresh
// frame under `recursive` for its callees (run_outcome() for a hit of another code).
FRAMESCOPE_NOINLINE PyObject* run_other_code(PyThreadState* ts, FsFrame* frame,
                                             CacheEntryObject* entry, uint8_t recursive) {
  return run_outcome(ts, frame, Outcome{entry, recursive});
}

// The rest of a lookup eval_head_entry() started, when its head entry did not simply hold:
// conclude_lookup() and the run, out of line.
FRAMESCOPE_NOINLINE PyObject* finish_head_lookup(PyThreadState* ts, FsFrame* frame,
                                                 PyCodeObject* code, EvalState* st,
                                                 PyObject* callback, uint64_t generation,
                                                 PyObject* locals, int found,
                                                 CacheEntryObject* hit) {
  const Lookup lookup{st, callback, generation, LookupContext{callback == Py_False}, locals, hit};
  return run_outcome(ts, frame, conclude_lookup(ts, frame, code, lookup, found));
}

// The common lookup, kept lean: the guard of the code's most recently hit entry (see
// head_entry_path()) runs first, and when it holds the frame runs at once (no entry reference
// kept, no Outcome). Anything else -- the guard fails or raises, the code is reset meanwhile, a
// guard changed the code's strategy -- continues in walk_from() and conclude_lookup(), exactly
// as intercept() would have gone on. The same Cache Lookup range covers the guards.
// Out of line: eval_api_frame() stays a small dispatcher (skipped codes and started frames pay
// for none of this function's registers and stack). Two variants: kRange when something
// observed ranges as the lookup began (a session recording them), else one without the range's
// state on its stack and in its registers.
template <bool kRange>
FRAMESCOPE_NOINLINE PyObject* eval_head_entry(PyThreadState* ts, FsFrame* frame, PyCodeObject* code,
                                              EvalState* st, CacheEntryObject* e) {
  HookThread& h = hook_thread();
  char marker;
  if (FRAMESCOPE_UNLIKELY(reinterpret_cast<uintptr_t>(&marker) < h.stack_check_below)) {
    return intercept_and_run(ts, frame, code, st);  // checks the C stack first
  }
  // begin_lookup(), spelled out in scalars: an aggregate would live on the stack.
  ++st->refs;
  PyObject* const callback = h.eval_callback;
  h.eval_callback = nullptr;
  const uint64_t generation = t_eval.generation;
  PyObject* const locals = acquire_frame_locals(frame);
  if (FRAMESCOPE_UNLIKELY(!locals)) {
    return finish_head_lookup(ts, frame, code, st, callback, generation, nullptr, -1, nullptr);
  }
  // Held across the call: the guard may reset the code, dropping the entry's references. The
  // entry itself is not held: entries leave their state's list only when the state is detached
  // (reset_code, the code's death), so while `st` is not detached `e` lives on.
  PyObject* check_fn = Py_NewRef(e->check_fn);
  {
    std::conditional_t<kRange, LookupRange, NoLookupRange> range;
    const int ok = call_guard(check_fn, locals);
    if (FRAMESCOPE_UNLIKELY(ok <= 0 || st->detached)) {
      // walk_from() goes on from e, holding it; a detached state's e may be gone (null).
      CacheEntryObject* held =
          st->detached ? nullptr : reinterpret_cast<CacheEntryObject*>(Py_NewRef(e));
      CacheEntryObject* hit = nullptr;
      const int found =
          walk_from(st, LookupContext{callback == Py_False}, locals, held, 0, check_fn, ok, &hit);
      range.end();
      return finish_head_lookup(ts, frame, code, st, callback, generation, locals, found, hit);
    }
    Py_DECREF(check_fn);
    move_to_head(st, e);  // a guard may have added entries before it
  }
  // The head entry held. An entry running another code object (a shadow call) is held from
  // here, while its state is still attached: what follows may run code (a callback's or a kept
  // view's finalizers) that resets the code.
  CacheEntryObject* const other =
      e->same_code ? nullptr : reinterpret_cast<CacheEntryObject*>(Py_NewRef(e));
  // Read after the guard, as conclude_lookup() reads it.
  const uint8_t recursive = st->strategy.recursive;
  if (FRAMESCOPE_LIKELY(t_eval.generation == generation)) {
    h.eval_callback = callback;
  } else {
    Py_DECREF(callback);
  }
  release_frame_locals(locals);
  release_state(st);
  if (FRAMESCOPE_LIKELY(!other)) {
    if (FRAMESCOPE_LIKELY(recursive == kActionDefault)) return run_frame(ts, frame, 0);
    return run_swapped(ts, frame, 0, recursive, nullptr);
  }
  return run_other_code(ts, frame, other, recursive);
}

// Whether the guard of the head entry `e` holds, decided from the frame as e->frame_guard says
// (kTruth: `bool`, kProgram: a Guard compiled for the code): either reads the frame and runs no
// Python code, so nothing the lookup protects against can happen meanwhile (a guard that resets
// the code, sets another callback, adds entries, keeps the view, or is intercepted itself), and
// the lookup comes down to the guard's result. The caller checked what eval_head_entry() is taken
// for (head_entry_path), and sees to the Cache Lookup range (run_frame_guard_hit_in_range).
// 1 holds, 0 does not, -1 undecided (kQuick: see run_frame_guard).
template <FrameGuard kGuard, bool kQuick>
FRAMESCOPE_ALWAYS_INLINE int frame_guard_holds(const CacheEntryObject* e, FsFrame* frame) {
  if constexpr (kGuard == kTruthGuard) {
    (void)e;
    return frame_binds_a_value(frame);
  } else {
    return run_frame_guard<kQuick>(e->guard_program, frame);
  }
}

// frame_guard_holds() on a thread whose C stack is not deep (else 0): deep C stacks take the
// lookup, which checks them. When the guard does not hold, the lookup runs it again (no harm: it
// has no effects) and goes on as usual (the guard fail hook, the walk, the callback).
template <FrameGuard kGuard, bool kQuick>
FRAMESCOPE_ALWAYS_INLINE int frame_guard_holds_at_once(const CacheEntryObject* e, FsFrame* frame) {
  char marker;
  if (FRAMESCOPE_UNLIKELY(reinterpret_cast<uintptr_t>(&marker) < hook_thread().stack_check_below)) {
    return 0;
  }
  return frame_guard_holds<kGuard, kQuick>(e, frame);
}

// The hit frame_guard_holds_at_once() found, while something observes ranges: its Cache Lookup
// range is recorded around the guard, as eval_head_entry() records it, when that takes two
// appends (which run no code); otherwise (the range would be observed by callbacks, which may
// run code) the lookup runs as usual.
template <FrameGuard kGuard>
FRAMESCOPE_NOINLINE PyObject* run_frame_guard_hit_in_range(PyThreadState* ts, FsFrame* frame,
                                                           PyCodeObject* code, EvalState* st,
                                                           CacheEntryObject* e) {
  {
    LookupRange range{LookupRange::Deferred{}};
    if (!range.start_lean()) return eval_head_entry<true>(ts, frame, code, st, e);
    // The guard again, inside its range (it has no effects, and reads the same frame as the
    // caller's test did: it holds). Never false; if it were, the lookup would go on in a range of
    // its own.
    if (FRAMESCOPE_UNLIKELY(!(frame_guard_holds<kGuard, false>(e, frame)))) {
      range.end();
      return eval_head_entry<true>(ts, frame, code, st, e);
    }
  }
  return run_frame(ts, frame, 0);
}

// eval_head_entry() in the variant for whether something observes ranges now.
FRAMESCOPE_ALWAYS_INLINE PyObject* eval_head_entry_here(PyThreadState* ts, FsFrame* frame,
                                                        PyCodeObject* code, EvalState* st,
                                                        CacheEntryObject* e) {
  if (FRAMESCOPE_UNLIKELY(internal::g_range_consumers.load(std::memory_order_relaxed) != 0)) {
    return eval_head_entry<true>(ts, frame, code, st, e);
  }
  return eval_head_entry<false>(ts, frame, code, st, e);
}

// A head entry with a frame guard of kind kGuard (eval_api_frame() checked head_entry_path()): a
// hit runs the frame at once (frame_guard_holds_at_once), anything else takes eval_head_entry().
// Out of line, so that eval_api_frame()'s other paths keep its small frame; one per kind, so
// that a `bool` guard pays no test of the kind. kQuick (a Guard's program): the guard is first
// tried without calls, which would make this function save registers on every hit; a check that
// needs one asks again in the variant that makes them.
template <FrameGuard kGuard, bool kQuick>
FRAMESCOPE_NOINLINE PyObject* eval_frame_guard_entry(PyThreadState* ts, FsFrame* frame,
                                                     PyCodeObject* code, EvalState* st,
                                                     CacheEntryObject* e) {
  const int holds = frame_guard_holds_at_once<kGuard, kQuick>(e, frame);
  if (FRAMESCOPE_LIKELY(holds > 0)) {
    if (FRAMESCOPE_LIKELY(internal::g_range_consumers.load(std::memory_order_relaxed) == 0)) {
      return run_frame(ts, frame, 0);
    }
    return run_frame_guard_hit_in_range<kGuard>(ts, frame, code, st, e);
  }
  if constexpr (kQuick) {
    if (holds < 0) return eval_frame_guard_entry<kGuard, false>(ts, frame, code, st, e);
  }
  return eval_head_entry_here(ts, frame, code, st, e);
}

// A fresh frame of a code whose stored strategy is not (DEFAULT, DEFAULT): out of the common path.
FRAMESCOPE_NOINLINE PyObject* eval_with_strategy(PyThreadState* ts, FsFrame* frame,
                                                 PyCodeObject* code, EvalState* st) {
  const ExecStrategy s = st->strategy;
  if (s.cur == kActionSkip ||
      (!st->head && (s.cur == kActionRunOnly || hook_thread().eval_callback == Py_False))) {
    return run_under(ts, frame, 0, s.recursive, nullptr);
  }
  return intercept_and_run(ts, frame, code, st);
}

// A generator resumed (or thrown into), or a frame run while tracing: it runs as it is, under its
// code's recursive action (so that the action covers everything a generator calls).
FRAMESCOPE_NOINLINE PyObject* eval_started_frame(PyThreadState* ts, FsFrame* frame, int throwflag) {
  EvalState* st = existing_state(frame_code(frame));
  if (st && st->strategy.recursive != kActionDefault && !thread_is_tracing(ts)) {
    return run_swapped(ts, frame, throwflag, st->strategy.recursive, nullptr);
  }
  return run_frame(ts, frame, throwflag);
}

}  // namespace

PyObject* eval_api_frame(PyThreadState* ts, FsFrame* frame, int throwflag) {
  EvalThread& t = t_eval;
  if (FRAMESCOPE_UNLIKELY(t.bypass_code != nullptr) &&
      reinterpret_cast<PyObject*>(frame_code(frame)) == t.bypass_code && !throwflag &&
      !frame_started(frame)) {
    t.bypass_code = nullptr;  // the shadow call of a cached entry: already looked up
    return run_frame(ts, frame, throwflag);
  }
  // Generators are offered once per call: never on a resume, throw() or close().
  if (throwflag || frame_started(frame) || thread_is_tracing(ts)) {
    return eval_started_frame(ts, frame, throwflag);
  }
  PyCodeObject* code = frame_code(frame);
  EvalState* st = existing_state(code);
  if (st) {
    if (FRAMESCOPE_UNLIKELY((st->strategy.cur | st->strategy.recursive) != kActionDefault)) {
      return eval_with_strategy(ts, frame, code, st);
    }
    if (CacheEntryObject* e = st->head) {
      if (FRAMESCOPE_LIKELY(head_entry_path(e))) {
        if (e->frame_guard == kTruthGuard) {
          return eval_frame_guard_entry<kTruthGuard, false>(ts, frame, code, st, e);
        }
        if (e->frame_guard == kProgramGuard) {
          return eval_frame_guard_entry<kProgramGuard, true>(ts, frame, code, st, e);
        }
        return eval_head_entry_here(ts, frame, code, st, e);
      }
    } else if (hook_thread().eval_callback == Py_False) {
      return run_frame(ts, frame, 0);
    }
  } else if (hook_thread().eval_callback == Py_False) {
    return run_frame(ts, frame, 0);
  }
  return intercept_and_run(ts, frame, code, st);
}

}  // namespace framescope::py
