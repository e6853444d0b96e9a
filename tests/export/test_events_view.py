"""events() as a thin view: iteration, slices, named() and children() replay the stored trace as
they go; they agree with random access (the materialized index) event for event."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

import framescope
from framescope import _core


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def worker() -> None:
    with framescope.record_function("worker-range"):
        fib(9)
    framescope.mark("worker-mark")


@pytest.fixture(scope="module")
def prof() -> framescope.profile:
    with framescope.profile() as p:
        with framescope.record_function("outer"):
            fib(12)
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        framescope.mark("main-mark")
    return p


FIELDS = ("index", "name", "category", "thread", "start_ns", "duration_ns", "end_ns", "parent",
          "depth", "open_at_stop")


def values(e: _core.Event) -> tuple[object, ...]:
    return tuple(getattr(e, f) for f in FIELDS)


def test_iteration_equals_random_access(prof: framescope.profile) -> None:
    events = prof.events()
    iterated = list(events)
    assert len(iterated) == len(events)
    assert [e.index for e in iterated] == list(range(len(events)))
    for i in range(len(events)):
        assert values(iterated[i]) == values(events[i])
        assert iterated[i] == events[i] and hash(iterated[i]) == hash(events[i])
    # Twice: the second iteration reads the durations kept by the first.
    assert [values(e) for e in events] == [values(e) for e in iterated]
    marks = [e for e in iterated if e.category == "cpu_instant_event"]
    assert {e.name for e in marks} >= {"worker-mark", "main-mark"}
    assert all(e.duration_ns == -1 and e.end_ns == e.start_ns for e in marks)


def test_slices_and_ranges(prof: framescope.profile) -> None:
    events = prof.events()
    n = len(events)
    every = [values(e) for e in events]
    assert [values(e) for e in events[5:17]] == every[5:17]
    assert [values(e) for e in events[-3:]] == every[-3:]
    assert [values(e) for e in events[n - 2 : n + 5]] == every[n - 2 :]
    assert events[10:10] == [] and events[20:10] == []
    assert [values(e) for e in events[::7]] == every[::7]
    assert [values(e) for e in prof.trace.iter_events(3, 9)] == every[3:9]
    assert list(prof.trace.iter_events(n, n + 10)) == []


def test_named_and_children(prof: framescope.profile) -> None:
    events = prof.events()
    every = list(events)
    fib_name = next(e.name for e in every if e.name.endswith(": fib"))
    assert [values(e) for e in events.named(fib_name)] == [
        values(e) for e in every if e.name == fib_name]
    assert events.named("no such event") == []
    for parent in every[:40] + events.named("worker-range"):
        expected = [values(e) for e in every if e.parent == parent.index]
        assert [values(e) for e in events.children(parent)] == expected
    assert prof.trace.find("outer") == [e.index for e in every if e.name == "outer"]


def test_event_objects(prof: framescope.profile) -> None:
    e = prof.events()[0]
    assert repr(e).startswith("Event(index=0, name=")
    with pytest.raises(TypeError):
        _core.Event()  # type: ignore[call-arg]
    with pytest.raises(AttributeError):
        e.start_ns = 5  # type: ignore[misc]
    assert e != 0 and e == prof.events()[0] and e != prof.events()[1]
    assert {e, prof.events()[0]} == {e}
    with pytest.raises(IndexError):
        prof.events()[len(prof.events())]


def test_iteration_while_merging(prof: framescope.profile) -> None:
    with framescope.profile() as p:
        fib(10)
    n = len(p.events())
    seen: list[int] = []
    it = iter(p.events())
    seen.append(next(it).index)
    p.merge(prof)  # the iterator keeps reading the trace as it was
    seen.extend(e.index for e in it)
    assert seen == list(range(n))
    assert len(p.events()) == n + len(prof.events())
    errors: list[BaseException] = []

    def read() -> None:
        try:
            for _ in range(3):
                assert sum(1 for _ in p.events()) == len(p.events())
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


THIN = r"""
import resource, sys, framescope
def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)
def peak(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
with framescope.profile() as prof:
    fib(27)
n = len(prof.events())
before = peak()
count = sum(1 for e in prof.events() if e.duration_ns >= 0)
print(n, count, peak() - before)
"""


def test_iteration_does_not_materialize_the_trace() -> None:
    # 635,621 events: an index would take 48 bytes each (30 MB); iteration keeps 8 per event.
    out = subprocess.run([sys.executable, "-c", THIN], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    n, count, grown = map(int, out.stdout.split())
    assert n == count + 2  # the session's start and stop marks
    assert grown < 24 * n, out.stdout
