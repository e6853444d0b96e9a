// cpp/python/tracer/frame_hook.h: the one PEP 523 hook shared by the tracer and eval_frame API.
#pragma once

#include <cstdint>

#include "framescope/internal/thread_buffer.h"
#include "framescope/macros.h"
#include "py_compat.h"
#include "tracer/tracer.h"

#define FRAMESCOPE_TLS_IE __attribute__((tls_model("initial-exec")))

namespace framescope::py {

/// Who needs the hook installed. The hook is installed while any user holds it.
enum HookUser : unsigned {
  kHookUserTracer = 1u << 0,
  kHookUserEvalApi = 1u << 1,
  /// 3.10 fallback backend: the hook records nothing, it only moves deep recursion onto stack
  /// segments (3.10 recurses in C for every Python call, hook or not).
  kHookUserStackGuard = 1u << 2,
};

/// Per-thread state read by the hook on every frame (fields: framescope/internal/thread_buffer.h).
/// It is part of the core's thread slot, so that the hook reaches it and the thread's buffer
/// through one TLS block.
using HookThread = internal::HookThreadState;
/// The calling thread's hook state: a plain initial-exec TLS access, no __tls_get_addr call.
FRAMESCOPE_ALWAYS_INLINE HookThread& hook_thread() noexcept { return internal::t_slot.hook; }

/// Holds the hook for `user`, installing it (chained to the current function) on first use.
/// Needs the GIL. Never fails.
void hook_acquire(HookUser user);
/// Releases `user`. When no user is left the previous function is restored exactly, unless
/// another function replaced ours meanwhile (then ours stays as a pass-through).
void hook_release(HookUser user);
/// Users currently holding the hook.
unsigned hook_users();
/// True when our function is the interpreter's eval function right now.
bool hook_is_current();
/// Installs (now, if ours is installed, and from then on) the hook variant that also writes the
/// thread's counted Python allocations before each recorded call and return (memory_hooks.h),
/// or the plain one. Needs the GIL.
void hook_set_memory_variant(bool memory);
/// Removes our function while the tracer is its only user (the deep-recursion switch);
/// returns false when the eval_frame API also needs it.
bool hook_detach_for_tracer();

/// Records which Python frame is running when the hook has no frame of its own open on this
/// thread (a call from a frame that was running before the session, or from C), so that replay
/// can close the pre-existing frames that returned meanwhile, at `ticks`. Needs the GIL.
void record_anchor(PyThreadState* ts, HookThread& h, internal::ThreadBuffer* buffer,
                   uint64_t ticks);

/// The same for a range that starts outside any hooked frame (record_function at module level):
/// does nothing unless the hook tracer records on this thread. Needs the GIL.
void anchor_outermost_range();

/// True when this thread's C stack (or the stack segment it runs on) has less than the hook's
/// reserve left, learning the bounds on first use. The 3.10 setprofile backend uses it to raise
/// RecursionError where plain 3.10 would overflow the stack. Cheap: one compare unless the stack
/// is deep.
bool c_stack_nearly_exhausted();

/// run_frame() while the hook records: records `frame` for the tracer, then chains to it.
PyObject* run_traced_frame(PyThreadState* ts, FsFrame* frame, int throwflag);

/// The function our hook chains to (the previous PEP 523 function or the default).
extern EvalFrameFunction g_previous_eval;

/// Evaluates `frame` the way the interpreter would without framescope's eval_frame API: records
/// it for the tracer when tracing, then chains to the previous eval function. The eval_frame API
/// calls this to run (cached or original) code; the hook checked the stack on entry. Borrowed
/// frame; new reference or null. Inline: without a tracing session (the eval_frame API's usual
/// case) the frame is chained at the caller, with no call into the tracer's variants.
FRAMESCOPE_ALWAYS_INLINE PyObject* run_frame(PyThreadState* ts, FsFrame* frame, int throwflag) {
  if (FRAMESCOPE_LIKELY(!hook_records_frames())) {
    return eval_hooked_frame(g_previous_eval, ts, frame, throwflag);
  }
  return run_traced_frame(ts, frame, throwflag);
}

/// Refuses to evaluate `frame`: sets RecursionError and lets the default evaluation unwind the
/// frame (so CPython clears it on every version). Returns null.
PyObject* refuse_frame(PyThreadState* ts, FsFrame* frame, const char* why);

/// Implemented by the eval_frame API: a frame on a thread whose eval_callback is set.
PyObject* eval_api_frame(PyThreadState* ts, FsFrame* frame, int throwflag);

}  // namespace framescope::py
