// cpp/python/tracer/inline_frames.h: Python frames the interpreter pushes without the PEP 523 hook.
#pragma once

#include "py_compat.h"

namespace framescope::py {

// On 3.13 a call site specialized as CALL_ALLOC_AND_ENTER_INIT (`Cls(...)` of a class with a
// plain Python __init__) pushes the __init__ frame in the caller's evaluation loop without
// checking the PEP 523 function (every other specialized push checks it and deoptimizes; see
// docs/tracing.md), so the hook never sees those calls. They are recorded through
// sys.monitoring PY_START/PY_RETURN local events on the __init__ code objects only, for frames
// that were not entered through the hook. Does nothing before 3.13.

/// Watches the __init__ of every class a specialized site could enter (sites that warmed up
/// before the session may specialize at their first call in it), and of every function made
/// during the session that is named __init__ (a function watcher). Needs the GIL and
/// monitoring_watch_start(). Returns false with a Python exception set.
bool inline_frames_start();
/// Forgets the frames entered so far. Needs the GIL.
void inline_frames_stop();
/// Called once per code object and session (register_code): watches it when it is the __init__
/// a specialized site can enter for the class of the frame's first argument, or a function named
/// __init__ that a class made later could inherit (not when the class defining it has __slots__
/// fields: no class deriving from it is inlined). `frame`, when not null, is a frame about to run
/// the code.
void inline_frames_code_registered(PyCodeObject* code, FsFrame* frame);
/// A frame running a class statement's body (a code without CO_OPTIMIZED, called through the
/// hook at each run) is starting: watches its namespace, where an `__init__` stored may be one
/// a site inlines (a function made before, shared with another class). Needs the GIL.
void inline_frames_class_body_started(FsFrame* frame);
/// sys.monitoring PY_START of a watched code: records the call when `frame` was entered inline.
void inline_frame_started(PyCodeObject* code, FsFrame* frame);
/// sys.monitoring PY_RETURN / PY_UNWIND: records the return of an inline frame recorded above.
void inline_frame_ended(FsFrame* frame);

}  // namespace framescope::py
