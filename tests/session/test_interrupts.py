"""A KeyboardInterrupt landing anywhere in start() or stop() never orphans a session or loses a
stopped trace: after it, either the session runs and stop() works, or nothing runs."""

from __future__ import annotations

import os
import sys
import threading
from types import FrameType
from typing import Any, Callable

import pytest

import framescope
from framescope import _core

PACKAGE_DIR = os.path.dirname(os.path.abspath(framescope.__file__)) + os.sep


class Injector:
    """A trace function that raises KeyboardInterrupt at the ``n``-th opcode (or line) executed
    in framescope's own Python code, as a signal handler would at that bytecode boundary."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.seen = 0
        self.fired = False

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Any:
        if not frame.f_code.co_filename.startswith(PACKAGE_DIR):
            return self  # trace deeper: framescope code may be called from here
        frame.f_trace_opcodes = True
        if event in ("opcode", "line", "return"):
            self.seen += 1
            if self.seen == self.n and not self.fired:
                self.fired = True
                raise KeyboardInterrupt(f"injected at step {self.n}")
        return self


def inject(n: int, fn: Callable[[], None]) -> bool:
    """Runs ``fn`` with an interrupt at framescope's ``n``-th step; True when it fired."""
    injector = Injector(n)
    sys.settrace(injector)
    try:
        fn()
    except KeyboardInterrupt as e:
        assert injector.fired, e
    finally:
        sys.settrace(None)
    return injector.fired


def work() -> int:
    return sum(range(10))


def assert_clean() -> None:
    assert not _core.is_enabled(), "a session was left running"


def each_step(scenario: Callable[[int], bool]) -> int:
    """Runs scenario(n) for n = 1, 2, ... until the interrupt no longer fires; returns n."""
    n = 1
    while scenario(n):
        n += 1
        assert n < 20000, "the scenario never completes"
    return n


def test_with_statement_is_atomic() -> None:
    def scenario(n: int) -> bool:
        holder: list[framescope.profile] = []

        def body() -> None:
            with framescope.profile() as prof:
                holder.append(prof)
                work()

        fired = inject(n, body)
        # Whatever the step: nothing runs afterwards, and a profile that got as far as running
        # the block has its trace (the interrupt in __exit__ cannot lose it).
        assert_clean()
        if holder:
            assert len(holder[0].events()) > 0
        return fired

    steps = each_step(scenario)
    assert steps > 50, "the injection covered start and stop"


def test_start_then_stop_calls() -> None:
    def scenario(n: int) -> bool:
        prof = framescope.profile()
        fired = inject(n, prof.start)
        if _core.is_enabled():
            # The interrupt came after the session started: the profile knows it runs.
            assert prof._running
            prof.stop()
        else:
            assert not prof._running
        assert_clean()
        return fired

    each_step(scenario)

    def stop_scenario(n: int) -> bool:
        prof = framescope.profile().start()
        work()
        fired = inject(n, prof.stop)
        if prof._running:
            assert _core.is_enabled()
            prof.stop()  # the interrupt came before the stop: stopping again works
        # Never a stopped session without its trace.
        assert len(prof.events()) > 0
        assert_clean()
        return fired

    each_step(stop_scenario)


@pytest.mark.parametrize("backend", ["fallback", "frame_hook"])
def test_interrupted_sessions_leave_the_next_one_intact(backend: str) -> None:
    for n in (1, 5, 40, 200):
        inject(n, lambda: framescope.profile(backend=backend).start().stop())  # type: ignore[arg-type]
        assert_clean()
    with framescope.profile(backend=backend) as prof:  # type: ignore[arg-type]
        work()
    assert any(e.name.endswith(": work") for e in prof.events())


def test_real_sigint_during_sessions() -> None:
    """SIGINT delivered by the OS at arbitrary moments while sessions start and stop in a
    loop: every KeyboardInterrupt leaves a consistent state."""
    import signal

    interrupts = 0
    armed = False
    stop_firing = threading.Event()

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        nonlocal armed
        if armed:  # one KeyboardInterrupt per session, so that the checks below run in peace
            armed = False
            raise KeyboardInterrupt

    def fire() -> None:
        while not stop_firing.wait(0.0005):
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    previous = signal.signal(signal.SIGINT, on_sigint)
    t = threading.Thread(target=fire, daemon=True)
    t.start()
    try:
        for _ in range(400):
            prof = framescope.profile()
            try:
                armed = True
                with prof:
                    work()
                armed = False
            except KeyboardInterrupt:
                interrupts += 1
            # Either the with statement ran to its end, or the interrupt left nothing running.
            assert not _core.is_enabled(), "an interrupt left the session running"
            assert not prof._running
    finally:
        armed = False
        stop_firing.set()
        t.join()
        signal.signal(signal.SIGINT, previous)
    assert interrupts > 0
