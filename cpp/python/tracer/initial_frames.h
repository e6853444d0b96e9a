// cpp/python/tracer/initial_frames.h: frames already running when a session starts, and their ends.
#pragma once

#include <string>

#include "py_compat.h"

namespace framescope::py {

/// Adds the frames running on every thread now to the active session as open slices, outermost
/// first (the replay opens them at the session's start). On the calling thread, when
/// `skip_prefix` is not empty, the innermost frames whose file starts with it are left out
/// (framescope's own start frames, which return unseen by the frame hook). `native_ids` maps
/// thread idents to OS thread ids (a dict, or None): threads are matched by OS id at replay.
///
/// With `watch` (the frame-hook backend, which cannot see these frames return), their ends are
/// recorded when they happen as kPyInitialExit events, at no cost to the hook's hot path:
/// sys.monitoring PY_RETURN/PY_YIELD events on their code objects only, and PY_UNWIND (3.12+);
/// on 3.10/3.11 a profile function on their threads, paused while a hooked frame runs there
/// (see initial_watch_pause). Where that is not possible (no free sys.monitoring tool, another
/// tool's profile function on the thread), replay closes them at their thread's next call.
/// Needs the GIL. Returns false with a Python exception set.
bool initial_frames_start(PyObject* native_ids, const std::string& skip_prefix, bool watch);

/// Stops watching and forgets the frames. Needs the GIL. Never fails.
void initial_frames_stop();

/// A frame of thread `ts` ended (returned, yielded or unwound): records kPyInitialExit when it
/// is the innermost frame still open from the session's start on that thread. Needs the GIL;
/// cheap when it is not.
void initial_frame_ended(PyThreadState* ts, const void* frame);

/// The setprofile backend: frame `frame` of thread `ts` returned. True when it is one of the
/// thread's frames running since the session's start (then it and the frames above it are
/// forgotten). Needs the GIL.
bool initial_frame_returned(PyThreadState* ts, const void* frame);

/// True while some thread still has frames open from the session's start that are watched.
bool initial_frames_watched();

/// For the sys.monitoring fallback, at a thread's first Python event of the session (the
/// caller makes sure of that): true when it is the PY_START or PY_RESUME of the thread's
/// innermost frame from the start, which is then already open. A thread can stop at a frame's
/// RESUME (3.13 checks the eval breaker before it reports the start when another sys.monitoring
/// tool instrumented the code), so the frame is on its stack before the event. Needs the GIL.
bool initial_frame_restarted(PyThreadState* ts, const void* frame);
/// The thread had its first Python event of the session. Needs the GIL.
void initial_frames_first_event(PyThreadState* ts);

#if !FS_PY312
/// 3.10/3.11, frame-hook backend: called by the hook before a call at depth 0 on thread `ts`
/// (no hooked frame open there). While hooked frames run, the frames from the start cannot end,
/// so the watch's profile function is taken off the thread (it would see every call); returns
/// true when it did, and the caller calls initial_watch_resume() once the call returned.
bool initial_watch_pause(PyThreadState* ts);
/// Puts the watch back on `ts` after initial_watch_pause() returned true, unless the session
/// stopped or the thread's frames from the start all ended meanwhile.
void initial_watch_resume(PyThreadState* ts);
/// True for the watch's profile function. The fallback's function replaces it (rather than
/// chaining to it) and reports the ends itself through initial_frame_ended().
bool is_initial_watch_function(Py_tracefunc func);
#endif

}  // namespace framescope::py
