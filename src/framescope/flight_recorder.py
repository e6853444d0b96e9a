"""``framescope run --dump-on SIGNAL``: write the recorded window while the program runs.

With a bounded session (``on_limit="keep_newest"``), a dump is the newest events that fit the
memory limit. Dumps are written on the signal, and when an exception goes unhandled in any
thread of the program (``threading.excepthook``) or in its main module; the run goes on (or
ends, for the main module) as it would have without framescope.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from framescope.profiler import profile

_SUFFIXES = (".speedscope.json", ".json", ".pftrace", ".perfetto-trace", ".prof", ".pstats",
             ".collapsed", ".folded", ".fstrace", ".html")


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
    for suffix in _SUFFIXES:
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
        self._lock = threading.Lock()
        self._dumping_thread: int | None = None  # threading.get_ident() of the dump in progress
        self._previous_handler: Any = None
        self._previous_excepthook: Callable[[threading.ExceptHookArgs], Any] | None = None

    def install(self) -> None:
        """Installs the signal handler and the thread excepthook (before the session starts:
        signal.signal is Python code)."""
        self._previous_handler = signal.signal(self._signal, self._on_signal)
        self._previous_excepthook = threading.excepthook
        threading.excepthook = self._on_thread_exception

    def uninstall(self) -> None:
        """Restores them (after the session stopped)."""
        if self._previous_excepthook is not None:
            threading.excepthook = self._previous_excepthook
            self._previous_excepthook = None
        if self._previous_handler is not None:
            signal.signal(self._signal, self._previous_handler)
            self._previous_handler = None

    def dump(self, why: str) -> str | None:
        """Writes a dump now; returns its path (None when the session is not recording, or when
        a dump is being written already)."""
        # A signal that arrives while a dump is being written runs its handler on the same
        # thread, inside that dump (between two of its bytecodes), and would wait for the lock
        # forever: that request is dropped (the dump in progress covers it). Other threads wait.
        me = threading.get_ident()
        if self._dumping_thread == me:
            print(f"framescope: {why} while a dump is being written: no second dump",
                  file=sys.stderr)
            return None
        self._lock.acquire()
        self._dumping_thread = me
        try:
            if not self._prof._running:
                return None
            self._count += 1
            path = dump_path(self._output, self._count)
            try:
                self._prof.dump(path, format=self._format)
            except (OSError, RuntimeError, ValueError) as exc:
                print(f"framescope: dump on {why} failed: {exc}", file=sys.stderr)
                return None
        finally:
            self._dumping_thread = None
            self._lock.release()
        print(f"framescope: {why}: recorded window written to {path}", file=sys.stderr)
        return path

    # The handlers run inside the recording session: no Python code but framescope's (no enum
    # or property access), so that nothing of theirs is recorded as the program's.
    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.dump(self._signal_name)

    def _on_thread_exception(self, args: threading.ExceptHookArgs) -> None:
        if not issubclass(args.exc_type, SystemExit):  # which threading ignores as well
            name = getattr(args.thread, "_name", None) or "a thread"
            self.dump(f"unhandled {args.exc_type.__name__} in {name}")
        if self._previous_excepthook is not None:
            self._previous_excepthook(args)
