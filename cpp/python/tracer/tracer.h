// cpp/python/tracer/tracer.h: the Python tracer: which frames it records, how they get names.
#pragma once

#include <atomic>
#include <climits>
#include <string>
#include <vector>

#include "code_extra.h"
#include "framescope/internal/thread_buffer.h"
#include "framescope/session.h"
#include "py_compat.h"
#include "tracer/tracer_api.h"

namespace framescope::py {

/// Tracer state read by the hook. Written only with the GIL held.
/// hook_epoch while the frame hook records nothing: names no session, and no CodeExtra's
/// compact_epoch (kNoCompactEpoch or a session's epoch) ever equals it.
constexpr uint64_t kNoHookEpoch = ~uint64_t(0);

struct TracerState {
  /// The session the frame hook records calls and returns for (== epoch), or kNoHookEpoch
  /// (another backend, switched to the fallback, stopped). One value rather than a flag, so
  /// that the hook's one compare of a code's compact_epoch against it also says the hook
  /// records at all (frame_hook.cpp).
  uint64_t hook_epoch = kNoHookEpoch;
  uint64_t epoch = 0;  ///< session epoch codes are registered for
  TracerBackend backend = TracerBackend::kNone;
  /// The session moved from the frame hook to the fallback (tracer_switch_to_fallback): frames
  /// the hook recorded end through the fallback.
  bool switched_to_fallback = false;
};
extern FRAMESCOPE_HIDDEN TracerState g_tracer;

/// True while the frame hook records calls and returns (the frame-hook backend, not switched).
FRAMESCOPE_ALWAYS_INLINE bool hook_records_frames() { return g_tracer.hook_epoch != kNoHookEpoch; }

/// CodeExtra::traced_epoch of a code object whose frames this session does not record
/// (code_filter.h): the session's epoch with this bit, so that registered_fast_code() fails for
/// it, left_out_code() holds, and register_code() answers 0 (record nothing, chain) at once.
constexpr uint64_t kSkippedEpochBit = uint64_t(1) << 63;

/// skipped_code() of a code object not registered in this session yet (a frame that was running
/// before the session started): decides it now.
bool skipped_code_slow(PyCodeObject* code);

/// True when this session does not record frames of `code` (nor its C calls). Needs the GIL.
FRAMESCOPE_ALWAYS_INLINE bool skipped_code(PyCodeObject* code) {
  const CodeExtra* extra = find_code_extra(code);
  if (FRAMESCOPE_LIKELY(extra && extra->traced_epoch == g_tracer.epoch)) return false;
  return skipped_code_slow(code);
}

/// True when this session has left `code` out (include/exclude files, framescope's own code):
/// the hook then chains its frames without reading the clock or registering anything, so a
/// left-out frame costs about what the hook alone costs. False for code not decided yet (its
/// first call goes through register_code(), which decides). Needs the GIL.
FRAMESCOPE_ALWAYS_INLINE bool left_out_code(PyCodeObject* code) {
  const CodeExtra* extra = find_code_extra(code);
  return extra && extra->traced_epoch == (g_tracer.epoch | kSkippedEpochBit);
}

/// Slow path of frame_key(): registers `code` in this session. Null key (0) on failure, and for
/// code the session does not record (skipped_code()): the caller then records nothing.
/// `hook_throwflag`: the frame hook's throwflag for `frame` (3.11 tells resumes that CPython
/// does not report by it), -1 elsewhere.
uint64_t register_code(PyCodeObject* code, FsFrame* frame, int hook_throwflag = -1);

/// The CodeExtra of `code` when its calls need no register_code() in this session (it is
/// registered, unlabelled, and no generator code on 3.11+); null otherwise. Needs the GIL.
FRAMESCOPE_ALWAYS_INLINE CodeExtra* registered_fast_code(PyCodeObject* code) {
  CodeExtra* extra = find_code_extra(code);
  if (FRAMESCOPE_LIKELY(extra && extra->traced_epoch == g_tracer.epoch &&
                        !extra->tracer_slow_path)) {
    return extra;
  }
  return nullptr;
}

/// The key recorded for a frame: its code object, or a labelled-call key. Needs the GIL.
FRAMESCOPE_ALWAYS_INLINE uint64_t frame_key(PyCodeObject* code, FsFrame* frame) {
  if (FRAMESCOPE_LIKELY(registered_fast_code(code))) return reinterpret_cast<uint64_t>(code);
  return register_code(code, frame);
}

/// What the hook records for a call of `code` on its fast path: the code's compact call bits
/// (an 8-byte event, see raw_event.h), or 0 when the call must go through register_code()
/// (the code's first call in this session, labelled calls, generator code on 3.11+, a full
/// compact key table). Needs the GIL.
FRAMESCOPE_ALWAYS_INLINE uint64_t fast_compact_call(PyCodeObject* code) {
  const CodeExtra* extra = find_code_extra(code);
  return FRAMESCOPE_LIKELY(extra && extra->compact_epoch == g_tracer.epoch)
             ? extra->compact_call_bits
             : 0;
}

/// Called by the hook when the C stack gets deep and the tracer is the only hook user: moves
/// recording of new frames to sys.monitoring / setprofile for the rest of the session. Frames
/// already open keep their events. Returns false if it could not (then nothing changed).
bool tracer_switch_to_fallback(const char* reason);

// ---- fallback backends (fallback_tracer.cpp) ----
/// Starts recording Python frames (and C calls when asked) with sys.monitoring or setprofile.
bool fallback_start(bool python_frames, bool c_calls);
/// Stops whatever fallback_start started. Needs the GIL.
void fallback_stop();
/// Resolver for C-function keys recorded by the fallback.
bool resolve_c_function(uint64_t key, Symbol& out);
void fallback_release();

#if FS_PY312
// ---- sys.monitoring for the frame-hook backend (fallback_tracer.cpp) ----
// What the frame hook cannot see, asked of sys.monitoring for a few code objects only: the ends
// of frames running at start (initial_frames.cpp) and, on 3.13, __init__ frames that a
// specialized `Cls(...)` pushes without the hook (inline_frames.cpp).
/// Local events for monitoring_watch_code().
enum WatchEvents : int {
  kWatchEnds = 1,    ///< PY_RETURN and PY_YIELD (PY_UNWIND is global while watching)
  kWatchStarts = 2,  ///< PY_START
};
/// Takes framescope's tool (if the fallback does not hold it yet) with the Python-frame
/// callbacks and a global PY_UNWIND. Needs the GIL. False with a Python exception set.
bool monitoring_watch_start();
/// Adds `events` (WatchEvents) to the local events of `code` (kept alive until stop). Needs the
/// GIL. False with a Python exception set.
bool monitoring_watch_code(PyCodeObject* code, int events);
#endif

}  // namespace framescope::py
