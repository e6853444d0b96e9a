"""framescope attach's agent in the target: records one window at the command's request and
leaves the process as it found it.

Called with the control connection (framescope.attach._bootstrap) on a thread of its own: the
injected thread, or the listener's (framescope run --listen). That thread starts the session
holding the GIL, so every other thread is between bytecodes or in a call that released the GIL;
the frame hook is the interpreter's, not the thread's, so it covers every thread from the next
call on, and the frames already running on every thread are read by the core at start and
recorded as open slices (as for any session started mid-program; thread names come from
threading). The window ends when the command says stop, when it goes away (its end of the
connection closes: the session is never left running), or at the program's exit (an atexit
function records up to there; the caller's ExitGuard, an earlier one, then waits for this
thread to end). The
trace is saved as .fstrace into the command's private directory; the command converts it to
the format asked for, with its own permissions.

Nothing is printed on the program's stdout or stderr, no signal handler is touched, and at the
end no hook, thread of framescope's, atexit function or open file of the session remains (the
framescope modules stay imported).
"""

from __future__ import annotations

import atexit
import os
import select
import socket
import threading
import time
from typing import Any

from framescope import _core
from framescope.attach._bootstrap import ExitGuard, receive, send
from framescope.profiler import _session
from framescope.profiler._profile import profile


class _Window:
    """One recorded window: its session and how it ends (once, from whichever thread ends it:
    the agent's, or the main thread at the program's exit)."""

    def __init__(self, sock: socket.socket, request: dict[str, Any], guard: ExitGuard) -> None:
        self.sock = sock
        self.guard = guard
        self.trace_path = str(request["trace"])
        self.stream_path = self.trace_path + ".stream.fstrace" if request.get("stream") else None
        self.prof = profile(**request["profile"], stream_to=self.stream_path)
        self.lock = threading.Lock()
        self.done = False

    def finish(self, exited: bool) -> None:
        with self.lock:
            if self.done:
                return
            self.done = True
            message: dict[str, Any]
            try:
                # stop_quietly, not prof.stop(): the latter prints the warnings on the program's
                # stderr; they go to the command instead.
                if _session.stop_quietly(self.prof) is not None:
                    self.prof.save(self.trace_path)
                    message = {"saved": self.trace_path, "warnings": self.prof.warnings,
                               "backend": self.prof.backend}
                else:
                    message = {"error": "the session recorded nothing"}
            except BaseException as exc:  # noqa: BLE001 - reported to the command
                message = {"error": f"could not save the trace: {type(exc).__name__}: {exc}"}
            finally:
                if self.stream_path is not None:
                    try:
                        os.unlink(self.stream_path)  # the saved copy is complete
                    except OSError:
                        pass
            message["exited"] = exited
            try:
                send(self.sock, message)
            except OSError:
                pass

    def at_exit(self) -> None:
        """The program is exiting during the window: the trace covers it up to here."""
        self.guard.exiting = True
        self.finish(exited=True)


def _wait_for_stop(sock: socket.socket, buffered: bytearray, deadline: float | None) -> None:
    """Returns when the command says stop or goes away, or at the deadline.

    The wait itself (select) runs in this module's frames, which are never recorded, and not
    inside _core._call_unrecorded: if the program exits meanwhile, this thread is ended by
    CPython when it next asks for the GIL (PyThread_exit_thread, a forced unwind of its stack),
    and that unwind must not cross a C++ frame of the extension's. Only the reading of a message
    that arrived (json: library code that would be recorded) is unrecorded."""
    while True:
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        if timeout == 0.0:
            return
        readable, _, _ = select.select([sock], [], [], timeout)
        if not readable:
            continue
        try:
            message = _core._call_unrecorded(receive, sock, buffered)
        except (OSError, ValueError):
            return
        if message is None or "stop" in message:
            return


def serve(sock: socket.socket, buffered: bytearray, request: dict[str, Any],
          guard: ExitGuard) -> None:
    """Records one window as ``request`` asks (profile arguments, trace path, duration), then
    reports the saved trace (or the error) to the command. ``guard`` is the caller's exit guard
    (registered with atexit before framescope was imported)."""
    sock.settimeout(None)
    try:
        window = _Window(sock, request, guard)
        window.prof.start()
    except BaseException as exc:
        guard.interval.restore()  # noqa: BLE001 - bad options, torch missing, stream file...
        send(sock, {"error": f"{type(exc).__name__}: {exc}" if not isinstance(
            exc, (ValueError, RuntimeError, OSError, TypeError)) else str(exc)})
        return
    # From here on this thread's calls into library code (json) are not the program's: they
    # run unrecorded; its own frames (this module's) are never recorded.
    guard.interval.restore()  # the window runs at the program's own switch interval
    # Registered after framescope's own exit functions (imported before it): runs before them.
    atexit.register(window.at_exit)
    try:
        _core._call_unrecorded(send, sock, {"started": time.time()})
        duration = request.get("duration")
        deadline = None if duration is None else time.monotonic() + float(duration)
        _wait_for_stop(sock, buffered, deadline)
    except OSError:
        pass  # the command went away: stop all the same
    finally:
        if not guard.exiting:  # else atexit is calling its functions: left to it
            atexit.unregister(window.at_exit)
        window.finish(exited=False)
