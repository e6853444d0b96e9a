// cpp/python/tracer/fallback_tracer.cpp: the fallback backends' common part: what they record and
// starting/stopping them. The platforms: monitoring_backend.cpp (3.12+), setprofile_backend.cpp
// (3.10/3.11); builtin names: builtin_names.cpp.
#include <vector>

#include "tracer/fallback_internal.h"
#include "tracer/memory_hooks.h"
#include "tracer/tracer.h"

namespace framescope::py {

namespace fallback {

State g_fb;

namespace {
FRAMESCOPE_ALWAYS_INLINE void record(internal::EventKind kind, uint64_t payload) {
  if (internal::ThreadBuffer* b = internal::current_buffer()) {
    const uint64_t ticks = now_ticks();
    if (g_memory_tracking) flush_allocations(b, ticks);  // before the event: see memory_hooks.h
    b->append(ticks, internal::pack_word(kind, payload));
  }
}
}  // namespace

bool record_python_call(PyCodeObject* code, FsFrame* frame) {
  // The time of the call, not of the end of attaching the thread to the session or of a first
  // sight's registration (microseconds each).
  const uint64_t ticks = now_ticks();
  internal::ThreadBuffer* buffer = internal::current_buffer();
  if (buffer == nullptr) return false;
  if (uint64_t key = frame_key(code, frame)) {
    if (g_memory_tracking) flush_allocations(buffer, ticks);
    buffer->append(ticks, internal::pack_word(internal::EventKind::kPyCall, key));
    return true;
  }
  return false;
}

void record_python_return() { record(internal::EventKind::kPyReturn, 0); }

// Calls into framescope's own builtins that were not recorded, innermost last, so that their
// returns are not recorded either: C calls and returns nest, so a return whose callable is the
// innermost skipped call's is that call's. Identity only (borrowed). Tagged with the session:
// a session stopped inside such a call (a profile's stop) never sees its return.
struct OwnCCall {
  PyObject* callable;
  uint64_t epoch;
};
thread_local std::vector<OwnCCall> t_own_c_calls;

void record_c_call(PyObject* callable) {
  const uint64_t ticks = now_ticks();  // before attaching, or naming a callable first seen
  internal::ThreadBuffer* buffer = internal::current_buffer();
  if (buffer == nullptr || is_python_callable(callable)) return;
  const uint64_t key = c_function_key(callable);
  if (FRAMESCOPE_UNLIKELY(is_own_c_function(callable, key))) {
    if (!t_own_c_calls.empty() && t_own_c_calls.back().epoch != buffer->epoch) {
      t_own_c_calls.clear();
    }
    t_own_c_calls.push_back({callable, buffer->epoch});
    return;
  }
  if (g_memory_tracking) flush_allocations(buffer, ticks);
  buffer->append(ticks, internal::pack_word(internal::EventKind::kCCall, key));
}

void record_c_return(PyObject* callable) {
  if (FRAMESCOPE_UNLIKELY(!t_own_c_calls.empty())) {
    const OwnCCall& innermost = t_own_c_calls.back();
    if (innermost.epoch != internal::g_session_epoch.load(std::memory_order_relaxed)) {
      t_own_c_calls.clear();  // left by an earlier session (its object may be gone)
    } else if (innermost.callable == callable) {
      t_own_c_calls.pop_back();
      return;
    }
  }
  if (is_python_callable(callable)) return;
  record(internal::EventKind::kCReturn, 0);
}

}  // namespace fallback

using fallback::g_fb;

bool fallback_start(bool python_frames, bool c_calls) {
  bool old_py = g_fb.python_frames, old_c = g_fb.c_calls;
  g_fb.python_frames = g_fb.python_frames || python_frames;
  g_fb.c_calls = g_fb.c_calls || c_calls;
  if (!fallback::platform_start()) {
    g_fb.python_frames = old_py;
    g_fb.c_calls = old_c;
    return false;
  }
  g_fb.running = true;
  return true;
}

void fallback_stop() {
  if (!g_fb.running) return;
  fallback::platform_stop();
  g_fb = fallback::State{};
}

bool resolve_c_function(uint64_t key, Symbol& out) {
  return fallback::resolve_c_function_key(key, out);
}

void fallback_release() { fallback::release_c_function_names(); }

}  // namespace framescope::py
