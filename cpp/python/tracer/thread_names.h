// cpp/python/tracer/thread_names.h: names of the threads of a session, including those that exited.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

struct _object;  // PyObject (no Python.h here: included by translation units of both kinds)

namespace framescope::py {

/// threading.Thread._bootstrap_inner's code object while a session runs, else null. The tracer
/// registers every call of it (register_code) and hands the Thread object to
/// thread_names_note_started(): that is how threads started during the session keep their
/// names after they exit.
extern _object* g_thread_bootstrap_code;

/// At session start (GIL held): remembers the threads threading knows now, and marks
/// threading's bootstrap code for the tracer. Runs no Python code. Never fails (names are
/// best effort: without threading imported, there are none).
void thread_names_start() noexcept;
/// The tracer saw `thread` (a threading.Thread, borrowed, may be null) start running.
void thread_names_note_started(_object* thread) noexcept;
/// The same for the calling thread, as threading._active knows it (the setprofile backend on
/// 3.10/3.11, which first sees a thread after _bootstrap_inner started).
void thread_names_note_current() noexcept;
/// At stop (GIL held): OS thread id -> name of every thread threading knew during the session
/// (alive ones with their current name). Names are valid UTF-8 (U+FFFD for lone surrogates).
/// Runs no Python code; never raises (out of memory: fewer names).
std::unordered_map<uint64_t, std::string> thread_names_collect() noexcept;
/// Drops what thread_names_start() and _note_started() held (GIL held).
void thread_names_release() noexcept;
/// In a forked child (os.register_at_fork, GIL held): the other threads are gone.
void thread_names_after_fork_child() noexcept;

}  // namespace framescope::py
