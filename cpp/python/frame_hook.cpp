// cpp/python/frame_hook.cpp: installing, chaining and running the PEP 523 frame hook.
#include "frame_hook.h"

#include <dlfcn.h>
#include <pthread.h>

#include <cstdio>

#include "framescope/clock.h"
#include "framescope/internal/thread_buffer.h"
#include "tracer.h"
#include "tracer_api.h"

namespace framescope::py {

thread_local HookThread t_hook FRAMESCOPE_TLS_IE = {nullptr, UINTPTR_MAX, 0, 0, nullptr, 0};
EvalFrameFunction g_previous_eval = nullptr;

namespace {

unsigned g_hook_users = 0;  // GIL-protected

PyObject* framescope_eval_frame(PyThreadState* ts, FsFrame* frame, int throwflag);

PyInterpreterState* interp() { return PyInterpreterState_Get(); }

// Stack room (bytes) the hook keeps free below the deepest frame it lets run: enough for the
// interpreter, an exception, a traceback and a callback to run and unwind.
constexpr uint64_t kHardReserve = 256 * 1024;

constexpr bool kTracerSwitchesOnDeepStacks = FS_PY311;

// The tracer stops using the hook once the stack is this deep (then calls are inlined again and
// stop eating C stack): half the stack, leaving at least 1 MiB. Not on 3.10: there every Python
// call recurses in C with or without a hook, a hooked level takes about the C stack of a plain
// one (measured: ~20,000 levels either way in 8 MiB) and a profile function makes each level
// larger (~16,300), so switching would lose depth. The hook then only refuses frames within the
// hard reserve, with RecursionError where plain 3.10 would overflow the stack.
uint64_t tracer_switch_depth(uint64_t stack_size) {
#if FS_PY311
  uint64_t part = stack_size / 2;
  uint64_t leave = uint64_t(1) << 20;
  return stack_size > leave + part ? part : (stack_size > leave ? stack_size - leave : 0);
#else
  return stack_size - 2 * kHardReserve;
#endif
}

// Computes this thread's stack bounds once. pthread_getattr_np reports the main thread's stack
// from RLIMIT_STACK (it grows on demand up to that), other threads' from their attributes. The
// slow path then runs only for frames deeper than the tracer's switch depth.
void learn_stack(HookThread& h) {
  pthread_attr_t attr;
  void* addr = nullptr;
  size_t size = 0;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    pthread_attr_getstack(&attr, &addr, &size);
    pthread_attr_destroy(&attr);
  }
  if (!addr || size < 4 * kHardReserve) {
    // Unknown or tiny stack: never take the slow path again (CPython's own limits apply).
    h.stack_low = 0;
    h.stack_size = 0;
    h.stack_check_below = 0;
    return;
  }
  h.stack_low = reinterpret_cast<uintptr_t>(addr);
  h.stack_size = size;
  h.stack_check_below = h.stack_low + (size - tracer_switch_depth(size));
}

// The rare path of hooked frames: a thread's first frame, or a deep stack. Returns false when
// the frame must be refused.
// True when `here` lies below the thread's check line (so the stack is deep), learning the
// thread's stack bounds on first use. False when the bounds are unknown.
bool below_check_line(HookThread& h, uintptr_t here) {
  if (h.stack_check_below == UINTPTR_MAX) learn_stack(h);
  return h.stack_low && here < h.stack_check_below;
}

FRAMESCOPE_NOINLINE bool stack_slow_path(HookThread& h, uintptr_t here, const char** why) {
  if (!below_check_line(h, here)) return true;
  uint64_t remaining = here - h.stack_low;
  // Deep recursion while the tracer is the hook's only user: hand new frames to the fallback
  // backend, whose calls the interpreter inlines again (no C stack per Python call).
  if (kTracerSwitchesOnDeepStacks && remaining > kHardReserve && g_tracer.hook_records_frames &&
      tracer_switch_to_fallback("deep recursion")) {
    return true;
  }
  if (remaining > kHardReserve) return true;
  *why =
      "maximum recursion depth exceeded (framescope: the C stack is nearly exhausted by "
      "frames evaluated through the PEP 523 hook)";
  return false;
}

// Calls the function we chain to; the real C stack is guarded by stack_slow_path().
FRAMESCOPE_ALWAYS_INLINE PyObject* chain(PyThreadState* ts, FsFrame* frame, int throwflag) {
  return eval_hooked_frame(g_previous_eval, ts, frame, throwflag);
}

FRAMESCOPE_ALWAYS_INLINE PyObject* traced_eval(PyThreadState* ts, FsFrame* frame, int throwflag,
                                               HookThread& h) {
  internal::ThreadBuffer* buffer = internal::current_buffer();
  if (FRAMESCOPE_UNLIKELY(!buffer)) return chain(ts, frame, throwflag);
  PyCodeObject* code = frame_code(frame);
  // Calls and returns are 8-byte compact events; a call that needs register_code() (see
  // fast_compact_call) is an ordinary 16-byte kPyCall.
  if (const uint64_t compact = fast_compact_call(code); FRAMESCOPE_LIKELY(compact != 0)) {
    if (FRAMESCOPE_UNLIKELY(h.depth == 0)) record_anchor(ts, h, buffer);
    buffer->append_compact(now_ticks(), compact);
  } else {
    const uint64_t key = register_code(code, frame);
    if (FRAMESCOPE_UNLIKELY(!key)) return chain(ts, frame, throwflag);
    if (FRAMESCOPE_UNLIKELY(h.depth == 0)) record_anchor(ts, h, buffer);
    buffer->append(now_ticks(), internal::pack_word(internal::EventKind::kPyCall, key));
  }
  ++h.depth;
  PyObject* result = chain(ts, frame, throwflag);
  --h.depth;
  if (FRAMESCOPE_LIKELY(g_tracer.hook_records_exits)) {
    // Re-read the buffer: the session may have stopped inside this frame.
    if (internal::ThreadBuffer* b = internal::current_buffer(); FRAMESCOPE_LIKELY(b == buffer)) {
      b->append_compact(now_ticks(), internal::kCompactReturnBits);
    }
  }
  return result;
}

// run_frame()'s body, inlined into the hook itself so that a traced call costs one C frame.
FRAMESCOPE_ALWAYS_INLINE PyObject* run_frame_inline(PyThreadState* ts, FsFrame* frame,
                                                    int throwflag, HookThread& h) {
  char marker;
  uintptr_t here = reinterpret_cast<uintptr_t>(&marker);
  if (FRAMESCOPE_UNLIKELY(here < h.stack_check_below)) {
    const char* why = nullptr;
    if (!stack_slow_path(h, here, &why)) return refuse_frame(ts, frame, why);
  }
  if (FRAMESCOPE_LIKELY(g_tracer.hook_records_frames)) return traced_eval(ts, frame, throwflag, h);
  return chain(ts, frame, throwflag);
}

PyObject* framescope_eval_frame(PyThreadState* ts, FsFrame* frame, int throwflag) {
  HookThread& h = t_hook;
  if (FRAMESCOPE_UNLIKELY(h.eval_callback != nullptr)) return eval_api_frame(ts, frame, throwflag);
  return run_frame_inline(ts, frame, throwflag, h);
}

}  // namespace

void record_anchor(PyThreadState* ts, HookThread& h, internal::ThreadBuffer* buffer) {
  const void* caller = current_frame_address(ts);
  if (caller != h.last_anchor) {
    h.last_anchor = caller;
    buffer->append(now_ticks(), internal::pack_word(internal::EventKind::kPyAnchor,
                                                    reinterpret_cast<uint64_t>(caller)));
  }
}

void anchor_outermost_range() {
  HookThread& h = t_hook;
  if (h.depth != 0 || !g_tracer.hook_records_frames) return;
  if (internal::ThreadBuffer* buffer = internal::current_buffer()) {
    record_anchor(PyThreadState_Get(), h, buffer);
  }
}

bool c_stack_nearly_exhausted() {
  HookThread& h = t_hook;
  char marker;
  uintptr_t here = reinterpret_cast<uintptr_t>(&marker);
  if (FRAMESCOPE_LIKELY(here >= h.stack_check_below)) return false;
  return below_check_line(h, here) && here - h.stack_low <= kHardReserve;
}

PyObject* run_frame(PyThreadState* ts, FsFrame* frame, int throwflag) {
  return run_frame_inline(ts, frame, throwflag, t_hook);
}

PyObject* refuse_frame(PyThreadState* ts, FsFrame* frame, const char* why) {
  // Returning null without evaluating would leave the frame to us to clear and pop, which needs
  // CPython internals that are not exported. Evaluating it with throwflag=1 and the exception
  // set makes the default evaluation unwind it at once, cleaning up like any raising frame.
  PyErr_SetString(PyExc_RecursionError, why);
  return g_previous_eval(ts, frame, 1);
}

void prepare_hook_thread() {
  if (t_hook.stack_check_below == UINTPTR_MAX) learn_stack(t_hook);
}

void hook_acquire(HookUser user) {
  prepare_hook_thread();
  if (g_hook_users == 0) {
    EvalFrameFunction current = _PyInterpreterState_GetEvalFrameFunc(interp());
    if (current != framescope_eval_frame) {
      g_previous_eval = current;
      _PyInterpreterState_SetEvalFrameFunc(interp(), framescope_eval_frame);
    } else if (!g_previous_eval) {
      g_previous_eval = _PyEval_EvalFrameDefault;
    }
  }
  g_hook_users |= user;
}

void hook_release(HookUser user) {
  if (!(g_hook_users & user)) return;
  g_hook_users &= ~user;
  if (g_hook_users == 0 && hook_is_current()) {
    _PyInterpreterState_SetEvalFrameFunc(interp(), g_previous_eval);
  }
}

unsigned hook_users() { return g_hook_users; }

bool hook_is_current() {
  return _PyInterpreterState_GetEvalFrameFunc(interp()) == framescope_eval_frame;
}

std::string foreign_frame_hook() {
  EvalFrameFunction current = _PyInterpreterState_GetEvalFrameFunc(interp());
  if (current == _PyEval_EvalFrameDefault || current == framescope_eval_frame) return {};
  // The eval function is a C function pointer; dladdr names it for the message when it can.
  Dl_info info{};
  char address[32];
  std::snprintf(address, sizeof address, "%p", reinterpret_cast<void*>(current));
  if (dladdr(reinterpret_cast<void*>(current), &info) == 0 || !info.dli_fname) return address;
  return std::string(info.dli_sname ? info.dli_sname : address) + " in " + info.dli_fname;
}

bool hook_detach_for_tracer() {
  if (g_hook_users != kHookUserTracer) return false;
  g_hook_users = 0;
  if (hook_is_current()) _PyInterpreterState_SetEvalFrameFunc(interp(), g_previous_eval);
  return true;
}

}  // namespace framescope::py
