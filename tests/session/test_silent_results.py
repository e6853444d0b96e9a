"""Results that used to come out wrong without a word: memory counting lost to
``tracemalloc.stop()`` during a session, and a schedule whose ``on_trace_ready`` raised once
(the next cycle never recorded, the old trace handed over again)."""

from __future__ import annotations

import sys
import tracemalloc
import warnings
from typing import Any

import pytest

import framescope
from framescope import _core

MB = 1_000_000


def one_mb() -> list[bytearray]:
    return [bytearray(1000) for _ in range(1000)]


def _self_bytes(prof: framescope.profile, name: str) -> tuple[int, int]:
    """Calls of ``name`` and the bytes allocated in it and its callees (3.10/3.11 run the list
    comprehension as a frame of its own)."""
    (row,) = [e for e in prof.key_averages() if e.key.endswith(name)]
    return row.count, row.cpu_memory_usage


def test_tracemalloc_stopped_during_the_session_keeps_counting() -> None:
    # tracemalloc started before the session: its wrappers are under framescope's, and its
    # stop() puts back the allocators from before both, which unlinked framescope's: the second
    # half of the allocations went uncounted and no warning said so.
    tracemalloc.start()
    try:
        with framescope.profile(profile_memory=True) as prof:
            first = one_mb()
            tracemalloc.stop()
            assert _core._allocators_wrapped() == (True, True)  # counting again
            second = one_mb()
    finally:
        tracemalloc.stop()
    calls, allocated = _self_bytes(prof, "one_mb")
    assert calls == 2
    assert allocated >= 2 * MB, allocated
    assert not any("allocators" in w for w in prof.warnings), prof.warnings
    assert _core._allocators_wrapped() == (False, False)  # restored at the stop
    del first, second


def test_allocators_unlinked_another_way_are_said(tmp_path: Any) -> None:
    # _tracemalloc.stop() (the C module, under the tracemalloc module) is not re-armed: the
    # session says at its stop that its memory figures are too low.
    import _tracemalloc  # type: ignore[import-not-found]

    tracemalloc.start()
    try:
        with framescope.profile(profile_memory=True) as prof:
            one_mb()
            _tracemalloc.stop()
            one_mb()
    finally:
        tracemalloc.stop()
    assert any("were not counted" in w and "too low" in w for w in prof.warnings), prof.warnings
    assert _core._allocators_wrapped() == (False, False)
    with framescope.profile(profile_memory=True) as again:  # the next session counts
        one_mb()
    assert _self_bytes(again, "one_mb")[1] >= MB


def step_work(k: int) -> int:
    return k


@pytest.mark.parametrize("warmup", [0, 1])
def test_on_trace_ready_raising_once_does_not_break_the_schedule(warmup: int) -> None:
    seen: list[list[str]] = []

    def ready(p: framescope.profile) -> None:
        seen.append(sorted(e.name for e in p.events() if e.name.startswith("ProfilerStep#")))
        if len(seen) == 1:
            raise OSError("disk full")

    caught = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "won't be using warmup"
        sched = framescope.schedule(wait=0, warmup=warmup, active=1)
    with framescope.profile(schedule=sched, on_trace_ready=ready) as prof:
        for k in range(4 * (1 + warmup)):
            step_work(k)
            try:
                prof.step()
            except OSError as exc:
                caught.append(exc)
    # the exception reached the caller of step(), once, with a note saying what happened
    assert len(caught) == 1 and str(caught[0]) == "disk full"
    if sys.version_info >= (3, 11):
        assert any("on_trace_ready" in n for n in getattr(caught[0], "__notes__", []))
    # every cycle after it recorded its own step, into a fresh trace
    stride = 1 + warmup
    expected = [[f"ProfilerStep#{s}"] for s in range(warmup, 4 * stride + 1, stride)]
    assert seen == expected, seen


def test_on_trace_ready_raising_at_stop_surfaces() -> None:
    def ready(p: framescope.profile) -> None:
        raise ValueError("handler failed")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "won't be using warmup"
        sched = framescope.schedule(wait=0, warmup=0, active=2)
    prof = framescope.profile(schedule=sched, on_trace_ready=ready)
    prof.start()
    step_work(1)
    with pytest.raises(ValueError, match="handler failed"):
        prof.stop()
    assert not framescope.is_enabled()

