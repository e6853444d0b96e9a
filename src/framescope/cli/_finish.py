"""The end of a ``framescope run``: the session stopped at interpreter exit (or on a signal),
the trace written, the summary printed, once."""

from __future__ import annotations

import argparse
import atexit
import os
import signal
import sys
import types
from typing import Callable

from framescope.cli._output import error_text
from framescope.profiler import _session
from framescope.profiler._profile import profile


def say(text: str) -> None:
    """Prints to stderr, even when the program closed or replaced it; never raises."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None and not stream.closed:
                print(text, file=stream, flush=True)
                return
        except (OSError, ValueError, AttributeError):
            continue


#: The profile's arguments a warning names, as framescope run's flags.
_CLI_FLAGS = (("raise memory_limit or use on_limit=\"keep_newest\"",
               "raise --memory-limit or use --on-limit keep_newest"),)


def cli_wording(warning: str) -> str:
    """A session's warning as framescope run says it: its flags for the profile's arguments."""
    for api, flags in _CLI_FLAGS:
        warning = warning.replace(api, flags)
    return warning


class Finisher:
    """Ends a ``framescope run``: stops the session, writes the trace, prints the summary. Once.

    The session ends at interpreter exit, after threading joins the non-daemon threads and the
    program's own atexit functions ran (this one is registered before the program runs, so it
    runs after them). SIGTERM, SIGHUP, SIGQUIT and a second Ctrl-C end it at once instead: the
    trace is written, then the process dies of the signal as it would have without framescope
    (SIGQUIT: with a core dump, where the limits allow one). Signals the program or the shell
    set a handler for (or ignore) are left alone."""

    _SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")

    def __init__(self, prof: profile, opts: argparse.Namespace) -> None:
        self.prof = prof
        self.opts = opts
        self.after_stop: list[Callable[[], None]] = []  # run once the session stopped
        self.finished = False
        self.interrupts = 0
        self.deferred: int | None = None  # a signal that came while the trace was written
        self.pid = os.getpid()
        self.stop_error: BaseException | None = None  # why stopping the session failed

    def _stop(self) -> None:
        """Stops the session (framescope's frames are not recorded: this one is not). A
        streamed session whose file could not be written to (the disk filled up) fails here:
        said once by finish(), not as a traceback."""
        try:
            _session.stop_quietly(self.prof)
        except (OSError, RuntimeError, ValueError) as e:
            self.stop_error = e

    def install(self) -> None:
        # A trace lost at exit (the disk filled, the directory went away) is said on stderr; the
        # exit status stays the program's: it is fixed before atexit functions run, and only
        # os._exit() could change it, skipping the rest of the program's own shutdown (atexit
        # functions registered before this one, such as logging's and multiprocessing's, and
        # the flushing of its open files). A profiler must never cost the program its data.
        atexit.register(self.finish)
        # Runs first (atexit is last-in, first-out): stops the session, so that none of the
        # finishing code shows in the trace.
        atexit.register(self._stop)
        for name in self._SIGNALS:
            signum = getattr(signal, name, None)
            if signum is None:
                continue
            current = signal.getsignal(signum)
            default = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
            if current is default:  # leave handlers the program or the shell (nohup) set alone
                signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: types.FrameType | None) -> None:
        if signum == signal.SIGINT and self.interrupts == 0 and not self.finished:
            self.interrupts += 1
            raise KeyboardInterrupt  # the first Ctrl-C: as python, the program may handle it
        self.finish()
        self._die(signum)

    def _while_finishing(self, signum: int, frame: types.FrameType | None) -> None:
        if self.deferred is None:
            self.deferred = signum
            say("framescope: writing the trace, the run ends when it is written")

    @staticmethod
    def _die(signum: int) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)  # (not reached: the signal ends the process)

    def finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        if os.getpid() != self.pid:
            # A child the program forked (os.fork) and that exits through python's exit path:
            # the trace file is the parent's, which must not be overwritten by the child's.
            _session.stop_quietly(self.prof, keep=False)
            return
        self._stop()  # first: none of the finishing shows in the trace
        for hook in self.after_stop:
            hook()
        opts = self.opts
        if _session.recorded_trace(self.prof) is None:
            why = error_text(self.stop_error) if self.stop_error is not None else "no trace"
            say(f"framescope: could not write the trace to {opts.output}: {why}")
            return self._end()
        for name in self._SIGNALS:
            if (signum := getattr(signal, name, None)) is not None:
                if signal.getsignal(signum) == self._on_signal:
                    signal.signal(signum, self._while_finishing)
        for warning in self.prof.warnings:
            say(cli_wording(warning))
        try:
            if opts.stream_to != opts.output:
                self.prof.export(opts.output, format=opts.format)
            else:
                # The streamed .fstrace is the output, but it was completed at stop: what came
                # after (this process's description, its followed children's traces) is only in
                # the trace in memory. Written again in full (atomically; the trace keeps mapping
                # the streamed file) so that none of it is lost.
                self.prof.save(opts.output)
        except (OSError, RuntimeError, ValueError) as e:
            say(f"framescope: could not write the trace to {opts.output}: {error_text(e)}")
            return self._end()
        finally:
            if opts.stream_to is not None and opts.stream_to != opts.output:
                try:
                    os.unlink(opts.stream_to)  # the trace maps it: readable until the exit
                except OSError:
                    pass
        if opts.limit != 0:
            try:
                say(self.prof.summary(limit=opts.limit, sort_by=opts.sort,
                                       by_thread=opts.by_thread,
                                       show_host=getattr(opts, "show_host", False),
                                       by_task=getattr(opts, "by_task", False)))
            except ValueError as e:  # e.g. no CPU times: the sampler thread could not start
                say(f"framescope: no summary: {e}")
        say(f"framescope: trace written to {opts.output} (backend: {self.prof.backend})")
        return self._end()

    def _end(self) -> None:
        if self.deferred is not None:
            self._die(self.deferred)


SIGINT_HANDLER_CODE = Finisher._on_signal.__code__
