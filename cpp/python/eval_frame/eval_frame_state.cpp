// cpp/python/eval_frame/eval_frame_state.cpp: the eval_frame API's per-code-object state (cache
// entries, frame_state, exec strategy): creation, reset, and release when the code object dies.
#include "eval_frame/eval_frame_internal.h"  // first: Python.h with the internal frame headers

#include <new>

namespace framescope::py {

Py_ssize_t g_live_states = 0;

namespace {

// Every attached state. A state's entries and frame_state are reachable only through co_extra,
// which the garbage collector does not see: a guard whose globals hold the function of its code
// (any module-level guard of a module-level function) makes a cycle that is never collected. At
// interpreter exit they are all dropped (reset_all_states), so that finalization frees what they
// hold, as it would without framescope.
EvalState* g_attached = nullptr;

// Empties a state that is no longer reachable from its code (the caller unlinked it): dropping
// entries and frame_state may run arbitrary code (finalizers), which must find it gone.
void detach_state(EvalState* st) {
  st->detached = true;
  st->owner = nullptr;
  if (st->prev_attached) st->prev_attached->next_attached = st->next_attached;
  if (st->next_attached) st->next_attached->prev_attached = st->prev_attached;
  if (g_attached == st) g_attached = st->next_attached;
  st->prev_attached = st->next_attached = nullptr;
  CacheEntryObject* e = st->head;
  PyObject* frame_state = st->frame_state;
  st->head = nullptr;
  st->frame_state = nullptr;
  while (e) {
    CacheEntryObject* next = e->next;  // the reference e held is now ours
    e->next = nullptr;
    drop_cache_entry(e);
    Py_DECREF(e);
    e = next;
  }
  Py_XDECREF(frame_state);
  release_state(st);
}

// Installed as g_free_eval_state: the code object died.
void free_eval_state(void* p) { detach_state(static_cast<EvalState*>(p)); }

}  // namespace

EvalState* state_for(PyCodeObject* code) {
  CodeExtra* extra = get_or_create_code_extra(code);
  if (!extra) return nullptr;
  if (!extra->eval_state) {
    auto* st = new (std::nothrow) EvalState();
    if (!st) {
      PyErr_NoMemory();
      return nullptr;
    }
    ++g_live_states;
    st->owner = extra;
    st->next_attached = g_attached;
    if (g_attached) g_attached->prev_attached = st;
    g_attached = st;
    extra->eval_state = st;
  }
  return static_cast<EvalState*>(extra->eval_state);
}

void free_released_state(EvalState* st) {
  --g_live_states;
  delete st;
}

void reset_state(PyCodeObject* code) {
  CodeExtra* extra = find_code_extra(code);
  if (!extra || !extra->eval_state) return;
  auto* st = static_cast<EvalState*>(extra->eval_state);
  extra->eval_state = nullptr;
  detach_state(st);
}

void reset_all_states() {
  // Each state is unlinked before it is emptied: finalizers run by the emptying find its code
  // without state (and may even create a new one, which the loop then drops too).
  while (EvalState* st = g_attached) {
    st->owner->eval_state = nullptr;
    detach_state(st);
  }
}

void eval_frame_state_init() { g_free_eval_state = free_eval_state; }

}  // namespace framescope::py
