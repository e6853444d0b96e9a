// cpp/python/tracer/frame_hook.cpp: installing, chaining and running the PEP 523 frame hook.
#include "tracer/frame_hook.h"

#include <dlfcn.h>
#include <pthread.h>

#include <climits>
#include <cstdio>

#include "framescope/clock.h"
#include "framescope/internal/thread_buffer.h"
#include "stack_segments.h"
#include "tracer/initial_frames.h"
#include "tracer/memory_hooks.h"
#include "tracer/tracer.h"
#include "tracer/tracer_api.h"

namespace framescope::py {

EvalFrameFunction g_previous_eval = nullptr;
#if !FS_PY311
namespace {
const int kNoRecursionLimit = INT_MAX;
}
const int* g_recursion_limit = &kNoRecursionLimit;
#endif

namespace {

unsigned g_hook_users = 0;  // GIL-protected

// The hook comes in variants, chosen when it is installed (hook_set_memory_variant): the
// memory variant (profile_memory) also writes the thread's Python allocations counted since its
// last event before each call and return it records (memory_hooks.h); kTsc says which clock
// now_ticks() would read (internal::g_use_tsc, fixed at start-up). Template parameters, so that
// the usual variant's hot path reads the TSC without testing a flag at every call and return,
// and is exactly what it is without memory profiling.
template <bool kMemory, bool kTsc>
PyObject* framescope_eval_frame(PyThreadState* ts, FsFrame* frame, int throwflag);

bool g_memory_variant = false;  // hook_set_memory_variant(); GIL-protected

// The variant to install: memory or plain, for the session clock.
EvalFrameFunction installed_eval() {
  if (internal::g_use_tsc) {
    return g_memory_variant ? framescope_eval_frame<true, true>
                            : framescope_eval_frame<false, true>;
  }
  return g_memory_variant ? framescope_eval_frame<true, false>
                          : framescope_eval_frame<false, false>;
}

bool is_our_eval(EvalFrameFunction f) {
  return f == framescope_eval_frame<false, true> || f == framescope_eval_frame<true, true> ||
         f == framescope_eval_frame<false, false> || f == framescope_eval_frame<true, false>;
}

// now_ticks() for a hook variant: the same clock, without the run-time test of g_use_tsc.
template <bool kTsc>
FRAMESCOPE_ALWAYS_INLINE uint64_t hook_ticks() {
#if FRAMESCOPE_HAVE_TSC
  if constexpr (kTsc) return __rdtsc();
  return monotonic_ns();
#else
  return read_tsc();
#endif
}

PyInterpreterState* interp() { return PyInterpreterState_Get(); }

// Stack room (bytes) the hook keeps free below the deepest frame it lets run: enough for the
// interpreter, an exception, a traceback and a callback to run and unwind.
constexpr uint64_t kHardReserve = 256 * 1024;

// Deep stacks. With a frame hook installed every Python->Python call recurses in C (on 3.10 it
// always does), so a recursion that plain Python runs would exhaust the C stack. A frame that
// starts below the thread's check line takes the slow path, which, in this order:
//  1. continues on a fresh stack segment (cpp/core/stack_segments.h) once less than kCheckRoom
//     is left, up to the per-thread budget: the program runs as it does without framescope, on
//     every version, and the tracer keeps its backend;
//  2. on 3.11+, when the tracer is the hook's only user, hands new frames to the fallback
//     backend, whose calls the interpreter inlines again (no C stack per Python call), at half
//     the thread's stack, so that C recursion below the Python frames keeps room;
//  3. refuses frames within kHardReserve of the end with RecursionError (never a crash).
// The check line starts where step 2 would act; the first frame past it lowers it to kCheckRoom
// while segments are usable.
constexpr uint64_t kCheckRoom = 2 * kHardReserve;

constexpr bool kTracerSwitchesOnDeepStacks = FS_PY311;

// Where the check line starts on a thread's own stack of `size` bytes: half the stack, leaving at
// least 1 MiB, on 3.11+ (see step 2); kCheckRoom on 3.10, where every Python call recurses in C
// with or without a hook, so switching backends would not save stack.
uint64_t initial_check_room(uint64_t size) {
  if (!kTracerSwitchesOnDeepStacks) return kCheckRoom;
  const uint64_t leave = uint64_t(1) << 20;
  return size / 2 > leave ? size / 2 : leave;
}

// Segments can be used now. Not once greenlet is imported: it switches between greenlets by
// copying the stack between a greenlet's start and stop addresses, assuming one contiguous stack
// per thread, and aborts ("slp_switch failed") when a switch spans a segment and the thread's
// stack. Needs the GIL.
bool segments_usable() {
  if (!internal::stack_segments_supported() || internal::stack_segment_budget() == 0) {
    return false;
  }
  PyObject* modules = PyImport_GetModuleDict();  // borrowed
  return !modules || !PyDict_GetItemString(modules, "greenlet");
}

// Sets the hook's view of the stack it runs on, whose lowest usable address is `low`.
void set_stack_bounds(HookThread& h, uintptr_t low, uint64_t check_room) {
  h.stack_low = low;
  h.stack_check_below = low + check_room;
}

// Computes this thread's stack bounds once. pthread_getattr_np reports the main thread's stack
// from RLIMIT_STACK (it grows on demand up to that), other threads' from their attributes. The
// slow path then runs only for frames past the check line.
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
    h.stack_check_below = 0;
    return;
  }
  set_stack_bounds(h, reinterpret_cast<uintptr_t>(addr), initial_check_room(size));
}

// True when `here` lies below the thread's check line (so the stack is deep), learning the
// thread's stack bounds on first use. False when the bounds are unknown.
bool below_check_line(HookThread& h, uintptr_t here) {
  if (h.stack_check_below == UINTPTR_MAX) learn_stack(h);
  return h.stack_low && here < h.stack_check_below;
}

// Where the C stack is now (compared with the thread's check line). The stack pointer read
// directly on x86-64 and AArch64: the address of a local would make the hook allocate a stack
// frame for it.
FRAMESCOPE_ALWAYS_INLINE uintptr_t current_stack_address() {
  uintptr_t sp;
#if defined(__x86_64__)
  asm volatile("mov %%rsp, %0" : "=r"(sp));
#elif defined(__aarch64__)
  asm volatile("mov %0, sp" : "=r"(sp));
#else
  char marker;
  sp = reinterpret_cast<uintptr_t>(&marker);
#endif
  return sp;
}

// Calls the function we chain to; the real C stack is guarded by the hook's deep-stack path.
FRAMESCOPE_ALWAYS_INLINE PyObject* chain(PyThreadState* ts, FsFrame* frame, int throwflag) {
  return eval_hooked_frame(g_previous_eval, ts, frame, throwflag);
}

// Records the call of `frame` (8 bytes when the code has a compact index, else a 16-byte
// kPyCall through register_code()). False when nothing was recorded: the call is not part of the
// trace (a generator's creation on 3.11+) or its code could not be registered. The memory
// variant first writes the thread's allocations counted since its previous event.
template <bool kMemory, bool kTsc>
FRAMESCOPE_ALWAYS_INLINE bool record_call(internal::ThreadBuffer* buffer, PyCodeObject* code,
                                          FsFrame* frame, int throwflag) {
  // fast_compact_call() inlined, minus its test of the bits: compact_epoch names a session only
  // when the code has (nonzero) compact bits in it, so the one compare decides.
  if (const CodeExtra* extra = find_code_extra(code);
      FRAMESCOPE_LIKELY(extra && extra->compact_epoch == g_tracer.epoch)) {
    const uint64_t ticks = hook_ticks<kTsc>();
    if (kMemory) flush_allocations(buffer, ticks);
    buffer->append_compact(ticks, extra->compact_call_bits);
    return true;
  }
  if (left_out_code(code)) return false;      // filtered out: no clock read, no registration
  const uint64_t ticks = hook_ticks<kTsc>();  // the call's time, not the end of its registration
  const uint64_t key = register_code(code, frame, throwflag);
  if (FRAMESCOPE_UNLIKELY(!key)) return false;
  if (kMemory) flush_allocations(buffer, ticks);
  buffer->append(ticks, internal::pack_word(internal::EventKind::kPyCall, key));
  return true;
}

// The session of the buffer current_buffer() just returned (its thread slot says which): read
// at a call, kept for its return.
FRAMESCOPE_ALWAYS_INLINE uint64_t current_buffer_epoch() { return internal::t_slot.epoch; }

// A return event through append_compact()'s slow path (a new chunk or base); passes `result` on.
FRAMESCOPE_NOINLINE PyObject* append_return_slow(internal::ThreadBuffer* buffer, uint64_t ticks,
                                                 PyObject* result) {
  buffer->append_compact_slow(ticks, internal::kCompactReturnBits);
  return result;
}

// Records the return of a frame whose call went to the buffer of the session with `epoch`.
// The buffer is read again: the session may have stopped inside this frame, and another one may
// have started since. A frame called in one session and returning in a later one is no call of
// the later session (there it is a frame from the start, whose end initial_frames.h records):
// its return must not close a slice of the later session. Compared by epoch, not by buffer
// address: the later session's buffer for this thread is often allocated at the same address.
// (current_buffer() has just compared the slot's epoch: the compare below reuses that load.)
// The hook still records for that session (not switched to the fallback, not stopped): one
// compare of hook_epoch, which names the session while the hook records and none otherwise.
template <bool kMemory, bool kTsc>
FRAMESCOPE_ALWAYS_INLINE void record_return(uint64_t epoch) {
  if (FRAMESCOPE_LIKELY(g_tracer.hook_epoch == epoch)) {
    if (internal::ThreadBuffer* b = internal::current_buffer();
        FRAMESCOPE_LIKELY(b != nullptr && current_buffer_epoch() == epoch)) {
      const uint64_t ticks = hook_ticks<kTsc>();
      if (kMemory) flush_allocations(b, ticks);
      b->append_compact(ticks, internal::kCompactReturnBits);
    }
  }
}

#if FS_PY312
// A call while the thread runs no Python frame of the innermost evaluation: 3.12+ free a
// returning frame's locals (running finalizers and weakref callbacks) after unlinking it, inside
// the default evaluation, so before the hook records that frame's return. CPython's own hooks
// saw it return before: record that here, so that these calls follow it, as calls of its caller.
// Replay closes the innermost Python slice at this event and ignores its late return event.
template <bool kMemory, bool kTsc>
FRAMESCOPE_NOINLINE void record_exit_before_cleanup(internal::ThreadBuffer* buffer) {
  const uint64_t ticks = hook_ticks<kTsc>();
  if (kMemory) flush_allocations(buffer, ticks);
  buffer->append(ticks, internal::pack_word(internal::EventKind::kPyExitEarly, 0));
}
#endif

#if FS_PY313
// 3.13 runs the work pending on the thread (a garbage collection an allocation scheduled,
// signal handlers, pending calls, a GIL hand-over) at a called frame's RESUME, *before* it
// reports the frame's start to sys.monitoring (3.12 after): CPython's hooks see finalizers that
// a collection runs there beside the frame, as calls of its caller. The hook records the call
// before that RESUME, so it runs that work itself first, where it would otherwise nest under
// the frame. Only for a frame's first run (a resume after `yield from`/`await` does not check),
// and only when work is pending (one load and test on the hot path). Returns the throwflag to
// evaluate the frame with: 1 when the work raised (the frame then unwinds with that error at
// its start, as it would have at its RESUME).
FRAMESCOPE_NOINLINE int run_pending_work_before_call(PyThreadState* ts, FsFrame* frame,
                                                     int throwflag) {
  if (throwflag || frame_is_resumed(frame)) return throwflag;
  return _Py_HandlePending(ts) < 0 ? 1 : 0;
}
#endif

// A call at hook depth 0: made from a frame that was running before the session (or from C with
// no hooked frame open). Records an anchor (the caller, for replay to close the frames from the
// start that ended unseen) and, on 3.10/3.11, takes the initial-frame watch off the thread while
// the call runs (initial_frames.h). Out of line: the hot path pays only the depth test.
template <bool kMemory, bool kTsc>
FRAMESCOPE_NOINLINE PyObject* traced_eval_outermost(PyThreadState* ts, FsFrame* frame,
                                                    int throwflag, HookThread& h,
                                                    internal::ThreadBuffer* buffer) {
  if (frame_start_fails_recursion_check(ts)) {
    return chain(ts, frame, throwflag);  // never runs: not a call of the trace
  }
#if FS_PY313
  if (FRAMESCOPE_UNLIKELY(thread_has_pending_work(ts))) {
    throwflag = run_pending_work_before_call(ts, frame, throwflag);
  }
#endif
  PyCodeObject* code = frame_code(frame);
  if (left_out_code(code)) return chain(ts, frame, throwflag);  // filtered out: only chained
  const uint64_t ticks = hook_ticks<kTsc>();
  const uint64_t compact = fast_compact_call(code);
  const uint64_t key = compact ? 0 : register_code(code, frame, throwflag);
  if (!compact && !key) return chain(ts, frame, throwflag);  // not part of the trace
  record_anchor(ts, h, buffer, ticks);
#if !FS_PY312
  const bool paused = initial_watch_pause(ts);
#endif
  if (kMemory) flush_allocations(buffer, ticks);
  if (compact) {
    buffer->append_compact(ticks, compact);
  } else {
    buffer->append(ticks, internal::pack_word(internal::EventKind::kPyCall, key));
  }
  const uint64_t epoch = current_buffer_epoch();
  ++h.depth;
  PyObject* result = chain(ts, frame, throwflag);
  --h.depth;
  record_return<kMemory, kTsc>(epoch);
#if !FS_PY312
  if (paused) initial_watch_resume(ts);
#endif
  return result;
}

// After a recorded frame ran: records its return and passes its result on. Out of line and
// reached by a tail call, so that nothing it needs (the thread slot's address, the tracer's
// state) is kept in a callee-saved register across the frame's evaluation.
template <bool kMemory, bool kTsc>
FRAMESCOPE_NOINLINE PyObject* finish_recorded_frame_general(PyObject* result, uint64_t epoch) {
  record_return<kMemory, kTsc>(epoch);
  return result;
}

// record_return() for the usual case (the thread slot current and the session unchanged; no
// memory variant; no new chunk or base), whatever else leaves with a tail call, so that this
// function saves no register either.
template <bool kMemory, bool kTsc>
FRAMESCOPE_NOINLINE PyObject* finish_recorded_frame(PyObject* result, uint64_t epoch) {
  --hook_thread().depth;
  if (FRAMESCOPE_UNLIKELY(g_tracer.hook_epoch != epoch)) return result;  // see record_return()
  // As at the call (see record_or_chain()): the slot's epoch compared with hook_epoch stands
  // for current_buffer()'s compare with g_session_epoch.
  if (kMemory || FRAMESCOPE_UNLIKELY(internal::t_slot.epoch != epoch)) {
    return finish_recorded_frame_general<kMemory, kTsc>(result, epoch);
  }
  internal::ThreadBuffer* buffer = internal::t_slot.buffer;
  if (FRAMESCOPE_UNLIKELY(!buffer)) return result;
  const uint64_t ticks = hook_ticks<kTsc>();
  if (FRAMESCOPE_UNLIKELY(!buffer->append_compact_fast(ticks, internal::kCompactReturnBits))) {
    return append_return_slow(buffer, ticks, result);
  }
  return result;
}

// Runs a frame whose call was just recorded (with the session its buffer belongs to in the
// thread slot) and records its return.
template <bool kMemory, bool kTsc>
FRAMESCOPE_ALWAYS_INLINE PyObject* run_recorded_frame(PyThreadState* ts, FsFrame* frame,
                                                      int throwflag, HookThread& h) {
  const uint64_t epoch = current_buffer_epoch();
  ++h.depth;
  PyObject* result = chain(ts, frame, throwflag);
  return finish_recorded_frame<kMemory, kTsc>(result, epoch);
}

// The hook's general recording path: every case (a code's first call in the session, left-out
// code, labelled and generator calls, work pending on 3.13). The plain variant (kMemory false)
// is the same code as without memory profiling; the memory variant writes the thread's counted
// allocations before each call and return it records (memory_hooks.h).
template <bool kMemory, bool kTsc>
FRAMESCOPE_ALWAYS_INLINE PyObject* traced_eval(PyThreadState* ts, FsFrame* frame, int throwflag,
                                               HookThread& h) {
  internal::ThreadBuffer* buffer = internal::current_buffer();
  if (FRAMESCOPE_UNLIKELY(!buffer)) return chain(ts, frame, throwflag);
  if (FRAMESCOPE_UNLIKELY(h.depth == 0)) {
    return traced_eval_outermost<kMemory, kTsc>(ts, frame, throwflag, h, buffer);
  }
  // A frame that fails the recursion check never runs: not a call of the trace.
  if (frame_start_fails_recursion_check(ts)) {
    return chain(ts, frame, throwflag);
  }
#if FS_PY313
  if (FRAMESCOPE_UNLIKELY(thread_has_pending_work(ts))) {
    throwflag = run_pending_work_before_call(ts, frame, throwflag);
  }
#endif
#if FS_PY312
  if (FRAMESCOPE_UNLIKELY(thread_runs_no_python_frame(ts))) {
    record_exit_before_cleanup<kMemory, kTsc>(buffer);
  }
#endif
  const bool recorded = record_call<kMemory, kTsc>(buffer, frame_code(frame), frame, throwflag);
  if (FRAMESCOPE_UNLIKELY(!recorded)) {
    return chain(ts, frame, throwflag);
  }
  return run_recorded_frame<kMemory, kTsc>(ts, frame, throwflag, h);
}

// Out of line: the frame is not the usual case (see record_or_chain()), or the hook records
// nothing right now (hook_epoch names no session: another backend, the eval_frame API alone).
template <bool kMemory, bool kTsc>
FRAMESCOPE_NOINLINE PyObject* record_or_chain_general(PyThreadState* ts, FsFrame* frame,
                                                      int throwflag, HookThread& h) {
  if (!hook_records_frames()) return chain(ts, frame, throwflag);
  return traced_eval<kMemory, kTsc>(ts, frame, throwflag, h);
}

// The usual case whose call event needs append_compact()'s slow path (a new chunk, a new base).
template <bool kMemory, bool kTsc>
FRAMESCOPE_NOINLINE PyObject* record_or_chain_slow_append(PyThreadState* ts, FsFrame* frame,
                                                          int throwflag, HookThread& h,
                                                          internal::ThreadBuffer* buffer,
                                                          uint64_t ticks, uint64_t bits) {
  buffer->append_compact_slow(ticks, bits);
  return run_recorded_frame<kMemory, kTsc>(ts, frame, throwflag, h);
}

// The frame as the interpreter would run it without the eval_frame API: recorded when the
// tracer records, then chained (run_traced_frame() and dispatch_frame() share it).
//
// The usual case is decided first, by one compare: the code has a compact index in the session
// the hook records for. compact_epoch names a session only when the code has compact bits, no
// slow path and is registered in it, and hook_epoch names none while the hook records nothing,
// so this compare also stands for "the hook records" (no separate test of a flag at each call).
// The thread slot is then compared with hook_epoch too, where current_buffer() compares it with
// g_session_epoch: the two are the same session while the hook records, unless the core session
// was stopped on its own (not through tracer_stop()). Then the slot still holds that session's
// buffer, which stays alive with its newest chunk while its thread owns it (t_owner): the events
// go where nothing reads them any more, as they would have been dropped. (A thread new to the
// session, paused or invalidated has another epoch in its slot and takes the general path.)
//
// Until the call's event is written, every unusual case leaves for an out-of-line path with a
// tail call and never comes back: a call that returns here would make the compiler keep the
// frame, the throwflag and the extra in callee-saved registers, which every traced call would
// then save and restore. So what stays live across the frame's evaluation is only what the
// return needs: the epoch and (3.12+, for the C recursion units) `ts`; the return's function
// reaches the thread slot again by itself.
template <bool kMemory, bool kTsc>
FRAMESCOPE_ALWAYS_INLINE PyObject* record_or_chain(PyThreadState* ts, FsFrame* frame, int throwflag,
                                                   HookThread& h) {
  const CodeExtra* extra = find_code_extra(frame_code(frame));
  const uint64_t hook_epoch = g_tracer.hook_epoch;
  if (FRAMESCOPE_UNLIKELY(!extra || extra->compact_epoch != hook_epoch) ||
      FRAMESCOPE_UNLIKELY(internal::t_slot.epoch != hook_epoch)) {
    return record_or_chain_general<kMemory, kTsc>(ts, frame, throwflag, h);
  }
  internal::ThreadBuffer* buffer = internal::t_slot.buffer;
  if (FRAMESCOPE_UNLIKELY(!buffer)) return chain(ts, frame, throwflag);  // not recording here
  if (FRAMESCOPE_UNLIKELY(h.depth == 0)) {
    return traced_eval_outermost<kMemory, kTsc>(ts, frame, throwflag, h, buffer);
  }
  if (frame_start_fails_recursion_check(ts)) {
    return chain(ts, frame, throwflag);  // never runs: not a call of the trace
  }
#if FS_PY313
  // Pending work may run any Python code: the general path runs it, then decides again.
  if (FRAMESCOPE_UNLIKELY(thread_has_pending_work(ts))) {
    return record_or_chain_general<kMemory, kTsc>(ts, frame, throwflag, h);
  }
#endif
#if FS_PY312
  // The general path first records the end of the frame that just left the stack.
  if (FRAMESCOPE_UNLIKELY(thread_runs_no_python_frame(ts))) {
    return record_or_chain_general<kMemory, kTsc>(ts, frame, throwflag, h);
  }
#endif
  const uint64_t ticks = hook_ticks<kTsc>();
  if (kMemory) flush_allocations(buffer, ticks);
  const uint64_t bits = extra->compact_call_bits;
  if (FRAMESCOPE_UNLIKELY(!buffer->append_compact_fast(ticks, bits))) {
    return record_or_chain_slow_append<kMemory, kTsc>(ts, frame, throwflag, h, buffer, ticks, bits);
  }
  return run_recorded_frame<kMemory, kTsc>(ts, frame, throwflag, h);
}

// What the hook does with a frame once the stack has room: the eval_frame API's interception,
// the tracer's recording, or a plain chain. Inlined into the hook so that a traced call costs
// one C frame.
template <bool kMemory, bool kTsc>
FRAMESCOPE_ALWAYS_INLINE PyObject* dispatch_frame(PyThreadState* ts, FsFrame* frame, int throwflag,
                                                  HookThread& h) {
  if (FRAMESCOPE_UNLIKELY(h.eval_callback != nullptr)) return eval_api_frame(ts, frame, throwflag);
  return record_or_chain<kMemory, kTsc>(ts, frame, throwflag, h);
}

struct SegmentCall {
  PyThreadState* ts;
  FsFrame* frame;
  int throwflag;
  PyObject* result;
};

// dispatch_frame() in the variant the hook runs as (off the hot path: stack segments).
PyObject* dispatch_variant(PyThreadState* ts, FsFrame* frame, int throwflag) {
  if (internal::g_use_tsc) {
    return g_memory_tracking ? dispatch_frame<true, true>(ts, frame, throwflag, hook_thread())
                             : dispatch_frame<false, true>(ts, frame, throwflag, hook_thread());
  }
  return g_memory_tracking ? dispatch_frame<true, false>(ts, frame, throwflag, hook_thread())
                           : dispatch_frame<false, false>(ts, frame, throwflag, hook_thread());
}

void run_segment_call(void* p) {
  auto* call = static_cast<SegmentCall*>(p);
  call->result = dispatch_variant(call->ts, call->frame, call->throwflag);
}

// Runs the frame on `segment`. The thread state, the GIL and CPython's own counters are not
// tied to the stack, so the frame runs as it would on the thread's stack; the hook's bounds
// follow it there and back.
PyObject* eval_on_segment(PyThreadState* ts, FsFrame* frame, int throwflag, HookThread& h,
                          const internal::StackSegment& segment) {
  const uintptr_t saved_low = h.stack_low;
  const uintptr_t saved_check = h.stack_check_below;
  set_stack_bounds(h, segment.low, kCheckRoom);
  ++h.stack_segment_level;
  SegmentCall call{ts, frame, throwflag, nullptr};
  internal::call_on_stack_segment(segment, run_segment_call, &call);
  --h.stack_segment_level;
  // Keep the segment just left for the next time the recursion goes this deep; drop deeper ones.
  internal::release_stack_segments_above(h.stack_segment_level);
  h.stack_low = saved_low;
  h.stack_check_below = saved_check;
  return call.result;
}

// The hook's slow path for a frame that starts below the check line (or a thread's first
// frame): see "Deep stacks" above. Returns true with *result set when it ran (or refused) the
// frame, false when the caller should run it here as usual.
FRAMESCOPE_NOINLINE bool deep_stack_eval(PyThreadState* ts, FsFrame* frame, int throwflag,
                                         uintptr_t here, PyObject** result) {
  HookThread& h = hook_thread();
  if (!below_check_line(h, here)) return false;
  const uint64_t remaining = here - h.stack_low;
  if (segments_usable()) {
    if (remaining > kCheckRoom) {
      h.stack_check_below = h.stack_low + kCheckRoom;  // segments take over near the end
      return false;
    }
    internal::StackSegment segment;
    if (internal::acquire_stack_segment(h.stack_segment_level, &segment)) {
      *result = eval_on_segment(ts, frame, throwflag, h, segment);
      return true;
    }
  }
  if (kTracerSwitchesOnDeepStacks && remaining > kHardReserve && hook_records_frames() &&
      tracer_switch_to_fallback("deep recursion beyond the stack segment budget")) {
    return false;
  }
  if (remaining > kHardReserve) return false;
  *result = refuse_frame(ts, frame,
                         "maximum recursion depth exceeded (framescope: the C stack is nearly "
                         "exhausted by frames evaluated through the PEP 523 hook)");
  return true;
}

// The hook for a frame that starts below the thread's check line (or a thread's first frame):
// deep_stack_eval(), then the usual dispatch. Out of line and reached by a tail call (see
// record_or_chain() for why nothing on the hot path calls out and comes back).
template <bool kMemory, bool kTsc>
FRAMESCOPE_NOINLINE PyObject* framescope_eval_deep_frame(PyThreadState* ts, FsFrame* frame,
                                                         int throwflag, uintptr_t here) {
  PyObject* result;
  if (deep_stack_eval(ts, frame, throwflag, here, &result)) return result;
  return dispatch_frame<kMemory, kTsc>(ts, frame, throwflag, hook_thread());
}

template <bool kMemory, bool kTsc>
PyObject* framescope_eval_frame(PyThreadState* ts, FsFrame* frame, int throwflag) {
  HookThread& h = hook_thread();
  const uintptr_t here = current_stack_address();
  if (FRAMESCOPE_UNLIKELY(here < h.stack_check_below)) {
    return framescope_eval_deep_frame<kMemory, kTsc>(ts, frame, throwflag, here);
  }
  return dispatch_frame<kMemory, kTsc>(ts, frame, throwflag, h);
}

}  // namespace

void record_anchor(PyThreadState* ts, HookThread& h, internal::ThreadBuffer* buffer,
                   uint64_t ticks) {
  const void* caller = current_frame_address(ts);
  // Per session: the thread state outlives sessions, and a caller at the same address in a
  // later session may be another frame, or the same one with other frames above it.
  if (caller != h.last_anchor || h.anchor_epoch != buffer->epoch) {
    h.last_anchor = caller;
    h.anchor_epoch = buffer->epoch;
    buffer->append(ticks, internal::pack_word(internal::EventKind::kPyAnchor,
                                              reinterpret_cast<uint64_t>(caller)));
  }
}

void anchor_outermost_range() {
  HookThread& h = hook_thread();
  if (h.depth != 0 || !hook_records_frames()) return;
  if (internal::ThreadBuffer* buffer = internal::current_buffer()) {
    record_anchor(PyThreadState_Get(), h, buffer, now_ticks());
  }
}

bool c_stack_nearly_exhausted() {
  HookThread& h = hook_thread();
  char marker;
  uintptr_t here = reinterpret_cast<uintptr_t>(&marker);
  if (FRAMESCOPE_LIKELY(here >= h.stack_check_below)) return false;
  return below_check_line(h, here) && here - h.stack_low <= kHardReserve;
}

PyObject* run_traced_frame(PyThreadState* ts, FsFrame* frame, int throwflag) {
  if (internal::g_use_tsc) {
    return g_memory_tracking ? record_or_chain<true, true>(ts, frame, throwflag, hook_thread())
                             : record_or_chain<false, true>(ts, frame, throwflag, hook_thread());
  }
  return g_memory_tracking ? record_or_chain<true, false>(ts, frame, throwflag, hook_thread())
                           : record_or_chain<false, false>(ts, frame, throwflag, hook_thread());
}

PyObject* refuse_frame(PyThreadState* ts, FsFrame* frame, const char* why) {
  // Returning null without evaluating would leave the frame to us to clear and pop, which needs
  // CPython internals that are not exported. Evaluating it with throwflag=1 and the exception
  // set makes the default evaluation unwind it at once, cleaning up like any raising frame.
  PyErr_SetString(PyExc_RecursionError, why);
  return g_previous_eval(ts, frame, 1);
}

void prepare_hook_thread() {
  if (hook_thread().stack_check_below == UINTPTR_MAX) learn_stack(hook_thread());
}

void hook_acquire(HookUser user) {
  prepare_hook_thread();
#if !FS_PY311
  g_recursion_limit = framescope_recursion_limit_address(interp());
#endif
  if (g_hook_users == 0) {
    EvalFrameFunction current = _PyInterpreterState_GetEvalFrameFunc(interp());
    if (!is_our_eval(current)) {
      g_previous_eval = current;
      _PyInterpreterState_SetEvalFrameFunc(interp(), installed_eval());
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

bool hook_is_current() { return is_our_eval(_PyInterpreterState_GetEvalFrameFunc(interp())); }

std::string foreign_frame_hook() {
  EvalFrameFunction current = _PyInterpreterState_GetEvalFrameFunc(interp());
  if (current == _PyEval_EvalFrameDefault || is_our_eval(current)) return {};
  // The eval function is a C function pointer; dladdr names it for the message when it can.
  Dl_info info{};
  char address[32];
  std::snprintf(address, sizeof address, "%p", reinterpret_cast<void*>(current));
  if (dladdr(reinterpret_cast<void*>(current), &info) == 0 || !info.dli_fname) return address;
  return std::string(info.dli_sname ? info.dli_sname : address) + " in " + info.dli_fname;
}

void hook_set_memory_variant(bool memory) {
  g_memory_variant = memory;
  if (hook_is_current()) _PyInterpreterState_SetEvalFrameFunc(interp(), installed_eval());
}

bool hook_detach_for_tracer() {
  if (g_hook_users != kHookUserTracer) return false;
  g_hook_users = 0;
  if (hook_is_current()) _PyInterpreterState_SetEvalFrameFunc(interp(), g_previous_eval);
  return true;
}

}  // namespace framescope::py
