"""``framescope run --dump-on SIGNAL``: write the recorded window while the program runs.

With a bounded session (``on_limit="keep_newest"``), a dump is the newest events that fit the
memory limit. Dumps are written on the signal, and when an exception goes unhandled in any
thread of the program (``threading.excepthook``) or in its main module; the run goes on (or
ends, for the main module) as it would have without framescope.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable

from framescope.export._formats import SUFFIXES
from framescope.profiler import _session

if TYPE_CHECKING:
    from framescope.profiler._profile import profile



def parse_signal(text: str) -> signal.Signals:
    """``SIGUSR1``, ``USR1`` or a number, as a signal; ValueError otherwise (and for signals a
    program cannot catch)."""
    name = text.strip().upper()
    try:
        sig = signal.Signals(int(name)) if name.isdigit() else signal.Signals[
            name if name.startswith("SIG") else "SIG" + name]
    except (KeyError, ValueError):
        raise ValueError(f"unknown signal {text!r} (e.g. SIGUSR1, USR2 or a number)") from None
    if sig in (signal.SIGKILL, signal.SIGSTOP):
        raise ValueError(f"{sig.name} cannot be caught")
    if sig in _ENDING_SIGNALS:
        # framescope run already writes the trace on these and then lets them end the program;
        # taking one for dumps would leave the program running where the user meant to stop it.
        raise ValueError(f"{sig.name} already ends the program with its trace written; dump on a "
                         f"signal the program does not otherwise get, e.g. SIGUSR1 or SIGUSR2")
    if sig in _FAULT_SIGNALS:
        raise ValueError(f"{sig.name} reports a fault in the process, not a request: dump on "
                         f"e.g. SIGUSR1 or SIGUSR2")
    return sig


# Signals `framescope run` handles itself: the trace is written, then they end the program.
_ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Synchronous faults: a Python handler runs only after the faulting instruction is retried.
_FAULT_SIGNALS = (signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGABRT)


def dump_path(output: str, n: int) -> str:
    """The n-th dump's file beside ``output``: ``trace.json`` -> ``trace.dump1.json`` (same
    format, ``.gz`` kept)."""
    gz = output.endswith(".gz")
    base = output[:-3] if gz else output
    for suffix, _name in SUFFIXES:
        if base.endswith(suffix):
            return f"{base[: -len(suffix)]}.dump{n}{suffix}" + (".gz" if gz else "")
    return f"{base}.dump{n}" + (".gz" if gz else "")


class FlightRecorder:
    """Dumps ``prof``'s running session to numbered files beside ``output``."""

    def __init__(self, prof: profile, output: str, output_format: str, sig: signal.Signals):
        self._prof = prof
        self._output = output
        self._format = output_format
        self._signal = int(sig)
        self._signal_name = sig.name  # read now: Enum attributes are Python code
        self._count = 0
        self._busy = threading.Lock()  # held while a dump is written (see _on_signal)
        self._absorbed = 0  # signals that came during the dump being written
        self._tickets = threading.Lock()  # guards the two counts below (never in a handler)
        self._requested = 0  # dump() calls so far
        self._covered = 0  # dump() calls answered by the dumps begun so far
        self._last_path: str | None = None
        self._previous_handler: Any = None
        self._previous_excepthook: Callable[[threading.ExceptHookArgs], Any] | None = None

    def install(self) -> None:
        """Installs the signal handler and the thread excepthook (before the session starts:
        signal.signal is Python code)."""
        self._previous_handler = signal.signal(self._signal, self._on_signal)
        self._previous_excepthook = threading.excepthook
        threading.excepthook = self._on_thread_exception
        # Registered before framescope run's finisher, so it runs after it (atexit is last in,
        # first out): the handler stays installed until the final trace is on disk.
        atexit.register(self._ignore_late_signals)

    def _ignore_late_signals(self) -> None:
        """Once the final trace is written: the signal is ignored from then on, rather than
        left to python's finalization, which puts back the default action (for SIGUSR1, ending
        the process) while the program's last moments run: a late request must not kill a
        program that finished. A handler the program installed itself is left alone."""
        if signal.getsignal(self._signal) == self._on_signal:
            signal.signal(self._signal, signal.SIG_IGN)

    def uninstall(self) -> None:
        """Restores them (after the session stopped)."""
        if self._previous_excepthook is not None:
            threading.excepthook = self._previous_excepthook
            self._previous_excepthook = None
        if self._previous_handler is not None:
            signal.signal(self._signal, self._previous_handler)
            self._previous_handler = None

    def dump(self, why: str) -> str | None:
        """Writes a dump now, after one in progress on another thread; returns its path (None
        when the session is not recording, or when the dump failed). Requests that waited
        for the same dump in progress are answered by one dump after it (many threads failing
        at once make one dump, not one each). Not from a signal handler (see _on_signal)."""
        with self._tickets:
            self._requested += 1
            ticket = self._requested
        with self._busy:
            if self._covered >= ticket:  # a dump begun after this request answered it
                return self._last_path
            with self._tickets:
                self._covered = self._requested
            self._last_path = self._write(why)
            return self._last_path

    def _write(self, why: str) -> str | None:
        if not _session.is_running(self._prof):
            return None
        self._count += 1
        path = dump_path(self._output, self._count)
        try:
            self._prof.dump(path, format=self._format)
        except (OSError, RuntimeError, ValueError) as exc:
            print(f"framescope: dump on {why} failed: {exc}", file=sys.stderr)
            return None
        finally:
            covered, self._absorbed = self._absorbed, 0
        more = (f" (it also answers {covered} more {self._signal_name} that came while it was "
                "written)") if covered else ""
        print(f"framescope: {why}: recorded window written to {path}{more}", file=sys.stderr)
        return path

    # The handlers run inside the recording session: no Python code but framescope's (no enum
    # or property access), so that nothing of theirs is recorded as the program's.
    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # A signal's handler runs on the main thread between two bytecodes of whatever runs
        # there, a dump in progress included: one that waited for that dump would wait forever,
        # one that wrote its own inside it would nest (a signal every 0.5 ms nested until
        # RecursionError). So the lock is taken without waiting (one C call, which no handler
        # splits): when a dump is being written, on this thread or another, the request is
        # answered by it and the handler returns at once. Nesting stays at one level however
        # fast the signals come, and the program runs between two dumps.
        if not self._busy.acquire(False):
            self._absorbed += 1
            return
        try:
            self._write(self._signal_name)
        finally:
            self._busy.release()

    def _on_thread_exception(self, args: threading.ExceptHookArgs) -> None:
        if not issubclass(args.exc_type, SystemExit):  # which threading ignores as well
            name = getattr(args.thread, "_name", None) or "a thread"
            self.dump(f"unhandled {args.exc_type.__name__} in {name}")
        if self._previous_excepthook is not None:
            self._previous_excepthook(args)
