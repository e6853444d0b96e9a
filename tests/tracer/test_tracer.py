"""The Python tracer: every Python call on every thread, nested with ranges, one tree per thread."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from typing import Any, Iterator

import pytest

import framescope
from framescope import Event

BACKENDS = ["frame_hook", "fallback"]


def qual(qualname: str) -> str:
    """The name a frame of ``qualname`` shows: 3.10 code objects know only the last part."""
    return qualname if sys.version_info >= (3, 11) else qualname.rsplit(".", 1)[-1]


def py_calls(prof: framescope.profile, suffix: str) -> list[Event]:
    return [e for e in prof.events() if e.category == "python_function" and e.name.endswith(suffix)]


def parent_of(prof: framescope.profile, e: Event) -> Event | None:
    return None if e.parent is None else prof.events()[e.parent]


def ancestors(prof: framescope.profile, e: Event) -> list[str]:
    out = []
    p = parent_of(prof, e)
    while p is not None:
        out.append(p.name)
        p = parent_of(prof, p)
    return out


# -- seed 001's test plan: a module called 4 times, with_stack=True ------------------------------


class Module:
    """A stand-in for torch.nn.Module: __call__ runs forward."""

    def __call__(self, *args: Any) -> Any:
        return self.forward(*args)

    def forward(self, *args: Any) -> Any:
        raise NotImplementedError


class Linear(Module):
    def forward(self, x: list[float]) -> list[float]:
        return [2 * v + 1 for v in x]


class ReLU(Module):
    def forward(self, x: list[float]) -> list[float]:
        return [max(v, 0.0) for v in x]


class MyModule(Module):
    def __init__(self) -> None:
        self.linear = Linear()
        self.relu = ReLU()

    def forward(self, x: list[float]) -> list[float]:
        x = self.linear(x)
        return self.relu(x)


def call_module() -> None:
    m = MyModule()
    for _ in range(4):
        m([1.0, -2.0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_seed_001_module_calls_without_torch(backend: str, checked_trace) -> None:
    framescope.label_calls(Module, "nn.Module")
    with framescope.profile(with_stack=True, backend=backend) as prof:  # type: ignore[arg-type]
        call_module()
    data = checked_trace(prof)
    top = py_calls(prof, ": call_module")
    assert len(top) == 1
    mods = [e for e in prof.events() if e.name == "nn.Module: MyModule"]
    assert len(mods) == 4
    for m in mods:
        assert prof.events()[m.parent].name.endswith(": call_module")
        kids = [c.name for c in prof.events().children(m)]
        assert len(kids) == 1 and kids[0].endswith(qual("MyModule.forward")), kids
        (fwd,) = prof.events().children(m)
        grandkids = [c.name for c in prof.events().children(fwd)]
        assert grandkids == ["nn.Module: Linear", "nn.Module: ReLU"], grandkids
    # The test function itself was running when the session started: an open slice above all.
    assert "test_seed_001_module_calls_without_torch" in " ".join(ancestors(prof, top[0]))
    names = {e["name"] for e in data["traceEvents"] if e.get("cat") == "python_function"}
    assert "nn.Module: Linear" in names


def test_seed_001_with_torch(checked_trace) -> None:
    torch = pytest.importorskip("torch")

    class TorchModule(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(2, 2)
            self.relu = torch.nn.ReLU()

        def forward(self, x: Any) -> Any:
            x = self.linear(x)
            return self.relu(x)

    def call_torch_module() -> None:
        m = TorchModule()
        for _ in range(4):
            m(torch.ones((2, 2)))

    with framescope.profile(with_stack=True) as prof:
        call_torch_module()
    checked_trace(prof)
    # torch's modules are named per instance, as torch names them
    mods = [e for e in prof.events() if e.name == "nn.Module: TorchModule_0"]
    assert len(mods) == 4
    for m in mods:
        below = [e.name for e in prof.events() if e.thread == m.thread and m.start_ns <= e.start_ns <= m.end_ns]
        assert "nn.Module: Linear_0" in below and "nn.Module: ReLU_0" in below
        assert any(n.endswith(qual("TorchModule.forward")) for n in below)


def test_label_calls_rejects_non_python_call() -> None:
    with pytest.raises(TypeError):
        framescope.label_calls(int)


# -- names ---------------------------------------------------------------------------------------


def named_function() -> int:
    return 1


def test_names_are_file_line_qualname_with_pruned_prefixes() -> None:
    import json  # the standard library: its prefix is pruned

    with framescope.profile() as prof:
        named_function()
        json.dumps({"a": 1})
    (e,) = py_calls(prof, ": named_function")
    line = named_function.__code__.co_firstlineno
    assert e.name == f"tests/tracer/test_tracer.py({line}): named_function"
    dumps = py_calls(prof, ": dumps")
    assert dumps and dumps[0].name.startswith("json/__init__.py(")


# -- generators, coroutines, exceptions ----------------------------------------------------------


def gen(n: int) -> Iterator[int]:
    try:
        for i in range(n):
            yield i
    finally:
        cleanup()


def cleanup() -> None:
    pass


@pytest.mark.parametrize("backend", BACKENDS)
def test_generator_resumes_are_slices(backend: str, checked_trace) -> None:
    with framescope.profile(backend=backend) as prof:  # type: ignore[arg-type]
        assert list(gen(3)) == [0, 1, 2]
        g = gen(10)
        next(g)
        g.close()  # runs finally
        g2 = gen(10)
        next(g2)
        with pytest.raises(ValueError):
            g2.throw(ValueError("boom"))
    checked_trace(prof)
    # list(gen(3)): 4 resumes (3 yields + the final StopIteration), close: 2, throw: 2.
    assert len(py_calls(prof, ": gen")) == 4 + 2 + 2
    assert len(py_calls(prof, ": cleanup")) == 3
    for c in py_calls(prof, ": cleanup"):
        assert prof.events()[c.parent].name.endswith(": gen")


async def leaf(i: int) -> int:
    await asyncio.sleep(0)
    return i


async def main_coro() -> int:
    return sum(await asyncio.gather(*(leaf(i) for i in range(5))))


@pytest.mark.parametrize("backend", BACKENDS)
def test_coroutines(backend: str, checked_trace) -> None:
    with framescope.profile(backend=backend) as prof:  # type: ignore[arg-type]
        assert asyncio.run(main_coro()) == 10
    checked_trace(prof)
    leaves = py_calls(prof, ": leaf")
    assert len(leaves) == 10  # each coroutine: started, then resumed once after sleep(0)
    assert len(py_calls(prof, ": main_coro")) >= 2


def raiser(n: int) -> None:
    if n == 0:
        raise RuntimeError("bottom")
    raiser(n - 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_exits_by_exception(backend: str, checked_trace) -> None:
    with framescope.profile(backend=backend) as prof:  # type: ignore[arg-type]
        with pytest.raises(RuntimeError):
            raiser(5)
        named_function()
    checked_trace(prof)
    calls = py_calls(prof, ": raiser")
    assert len(calls) == 6
    assert [e.depth for e in calls] == [calls[0].depth + i for i in range(6)]
    (after,) = py_calls(prof, ": named_function")
    assert after.depth == calls[0].depth, "frames unwound by the exception were closed"


# -- threads -------------------------------------------------------------------------------------


def spin(n: int) -> int:
    return sum(named_function() for _ in range(n))


@pytest.mark.parametrize("backend", BACKENDS)
def test_threads_including_ones_started_mid_session(backend: str, checked_trace) -> None:
    started = threading.Event()
    release = threading.Event()

    def early_worker() -> None:  # runs before the session starts
        started.set()
        release.wait()
        spin(50)

    early = threading.Thread(target=early_worker, name="early")
    early.start()
    started.wait()
    with framescope.profile(backend=backend) as prof:  # type: ignore[arg-type]
        release.set()
        late = [threading.Thread(target=spin, args=(30,), name=f"late{i}") for i in range(3)]
        for t in late:
            t.start()
        for t in late:
            t.join()
        early.join()
    checked_trace(prof)
    spins = py_calls(prof, ": spin")
    assert len(spins) == 4
    threads = {e.thread for e in spins}
    assert len(threads) == 4
    assert len(py_calls(prof, ": named_function")) == 50 + 3 * 30
    # The early thread's frame was open when the session began: its spin nests under it.
    early_spin = [e for e in spins if any(a.endswith("early_worker") for a in ancestors(prof, e))]
    assert len(early_spin) == 1


def test_open_frames_closed_at_stop() -> None:
    prof = framescope.profile()
    holder: dict[str, Any] = {}

    def inner() -> None:
        prof.start()
        holder["x"] = 1

    def outer() -> None:
        inner()  # starts the session and returns: the session sees its return
        named_function()
        prof.stop()  # outer is still open at stop

    outer()
    (o,) = py_calls(prof, qual(".outer") if sys.version_info >= (3, 11) else ": outer")
    (i,) = py_calls(prof, qual(".inner") if sys.version_info >= (3, 11) else ": inner")
    assert o.duration_ns >= 0 and i.duration_ns >= 0
    (n,) = py_calls(prof, ": named_function")
    assert n.parent == o.index
    assert i.end_ns <= n.start_ns



def superinstructions(function: Any) -> list[str]:
    """The superinstructions in ``function``'s quickened bytecode (3.12 names them A__B; 3.11
    forms them when the code warms up, 3.10/3.13 have none of this kind)."""
    import dis

    if sys.version_info < (3, 11):
        return []
    return [i.opname for i in dis.get_instructions(function, adaptive=True) if "__" in i.opname]


def test_running_code_keeps_its_bytecode_after_the_session() -> None:
    # A session started in the middle of a loop watches the loop's frame until it returns (3.12:
    # sys.monitoring events on its code); once the session is over the code must run as fast as
    # before: on 3.12 removing the events took the superinstructions out for good.
    prof = framescope.profile()
    seen: dict[str, list[str]] = {}

    def hot_loop(n: int) -> int:
        x = 0
        for i in range(n):
            y = i
            x = (x * 3 + y) & 0xFFFF
            if i == n // 2:
                seen["before"] = superinstructions(hot_loop)
                prof.start()
                named_function()
                prof.stop()
        return x

    for _ in range(3):  # warm up (3.11 quickens here)
        hot_loop(100)
    hot_loop(100)
    assert superinstructions(hot_loop) == seen["before"]
    if sys.version_info[:2] == (3, 12):
        assert seen["before"], "the test's loop has no superinstruction to lose"
    assert prof.events()  # (the session did record)

# -- ranges and frames in one tree --------------------------------------------------------------


@framescope.record_function("decorated-range")
def annotated() -> int:
    return named_function()


def test_record_function_and_frames_nest() -> None:
    with framescope.profile() as prof:
        with framescope.record_function("block"):
            annotated()
    (block,) = prof.events().named("block")
    (rng,) = prof.events().named("decorated-range")
    (leaf_call,) = py_calls(prof, ": named_function")
    assert block.category == "user_annotation"
    assert rng.parent == block.index, "no wrapper frame between the block and the range"
    (frame,) = py_calls(prof, ": annotated")
    assert frame.parent == rng.index, "the decorated function's frame sits right in its range"
    assert "decorated-range" in ancestors(prof, leaf_call)


# -- C calls -------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_c_calls_on_request(backend: str) -> None:
    def uses_builtins() -> int:
        return len(sorted([3, 1, 2]))

    with framescope.profile(backend=backend) as prof:  # type: ignore[arg-type]
        uses_builtins()
    assert not [e for e in prof.events() if "built-in" in e.name and "sorted" in e.name]
    with framescope.profile(backend=backend, c_calls=True) as prof:  # type: ignore[arg-type]
        uses_builtins()
    (fn,) = py_calls(prof, "uses_builtins")
    kids = [e.name for e in prof.events().children(fn)]
    assert "<built-in method builtins.sorted>" in kids and "<built-in method builtins.len>" in kids


# -- backends ------------------------------------------------------------------------------------


def test_backend_reported() -> None:
    with framescope.profile() as prof:
        pass
    assert prof.backend == "frame_hook"
    with framescope.profile(backend="fallback") as prof:
        pass
    assert prof.backend == ("sys.monitoring" if sys.version_info >= (3, 12) else "setprofile")
    with pytest.raises(ValueError):
        framescope.profile(backend="sys.monitoring" if sys.version_info < (3, 12) else "setprofile").start()


def test_with_stack_false_records_no_frames() -> None:
    with framescope.profile(with_stack=False) as prof:
        named_function()
    assert not [e for e in prof.events() if e.category == "python_function"]


# -- memory ----------------------------------------------------------------------------------------


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def test_python_calls_and_returns_take_eight_bytes_each(checked_trace) -> None:
    # fib(22): 57,313 calls = 114,626 events, 917 KB at 8 bytes (1.8 MB at 16): all fit in 1 MiB
    with framescope.profile(memory_limit="1MiB") as prof:
        assert fib(22) == 17711
    assert prof.trace.dropped_events == 0
    assert len(py_calls(prof, ": fib")) == 57313
    checked_trace(prof)


@pytest.mark.parametrize("on_limit", ["stop", "keep_newest"])
def test_memory_limit_with_python_frames(on_limit: str, checked_trace) -> None:
    # fib(23) makes 92,735 calls: 185,470 events of 8 bytes, beyond 1 MiB
    with framescope.profile(memory_limit="1MiB", on_limit=on_limit) as prof:  # type: ignore[arg-type]
        assert fib(23) == 28657
    assert prof.trace.dropped_events > 0
    assert any("dropped" in w for w in prof.warnings)
    calls = py_calls(prof, ": fib")
    assert 0 < len(calls) < 92735
    checked_trace(prof)  # what was kept still nests


def test_frames_open_at_the_limit_end_where_recording_stopped() -> None:
    """With the stop policy, a thread records nothing after the limit: the frames open then end
    at its last recorded event (truncated), not at the session's stop. Before, the innermost
    open call, a trivial one, held all the time the program ran unrecorded (one _work call of
    20+ ms in a loop of 300,000)."""
    with framescope.profile(memory_limit="1MiB", cpu_time=False) as prof:
        for i in range(300_000):
            _work(i)
        time.sleep(0.3)  # unrecorded time after the limit: nobody's
    events = list(prof.events())
    work = [e for e in events if e.name.endswith("_work")]
    assert prof.trace.dropped_events > 0 and work
    # Before, one _work call held the 300 ms sleep (and the rest of the loop). The bound is far
    # from both: a trivial call preempted on a loaded machine still takes well under 100 ms.
    assert max(e.duration_ns for e in work) < 100_000_000, max(work, key=lambda e: e.duration_ns)
    last_end = max(e.start_ns + e.duration_ns for e in work)
    # (this thread's: threads an earlier test left idle are recorded too, open until the stop)
    open_at_stop = [e for e in events if e.open_at_stop and e.thread == work[0].thread]
    assert open_at_stop and all(e.start_ns + e.duration_ns <= last_end + 1_000 for e in open_at_stop)
    # The recorded time is the recorded window: the 300 ms sleep after the limit is not in it.
    mine = [e for e in events if e.thread == work[0].thread]
    total_s = sum(e.duration_ns for e in mine if e.parent is None) / 1e9
    assert total_s < (last_end - min(e.start_ns for e in mine)) / 1e9 + 0.001


def _lengths() -> int:
    with framescope.record_function("counted"):
        return len([1, 2]) + len("ab")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", ["with", "start_stop"])
def test_c_calls_into_framescope_are_not_the_programs(backend: str, how: str) -> None:
    # profile's start/stop/__exit__ are written in C and record_function is a C type: with
    # c_calls they were recorded as the program's builtins ("method.__call__",
    # "framescope._core.stop", "framescope._core.record_function").
    prof = framescope.profile(c_calls=True, backend=backend)
    if how == "with":
        with prof:
            _lengths()
    else:
        prof.start()
        _lengths()
        prof.stop()
    builtins = [e.name for e in prof.events() if e.name.startswith("<built-in")]
    assert sum(1 for n in builtins if n.endswith("len>")) == 2, builtins
    assert not [n for n in builtins if "framescope" in n or "method.__call__" in n], builtins
    events = list(prof.events())
    assert len([e for e in events if e.name.endswith("_lengths")]) == 1
    (counted,) = [e for e in events if e.name == "counted"]
    lens = [e for e in events if e.name.endswith("len>")]
    assert all(e.parent is not None and events[e.parent].name == "counted" for e in lens)
    assert counted.parent is not None and events[counted.parent].name.endswith("_lengths")


def _work(i: int) -> int:
    return i


@pytest.mark.parametrize("on_limit", ["stop", "keep_newest"])
@pytest.mark.parametrize("workload", ["python_calls", "ranges", "mixed"])
def test_dropped_events_count_events_like_recorded_events(on_limit: str, workload: str) -> None:
    """recorded_events + dropped_events is every event produced, in every mode. Before, the stop
    policy counted a range whose begin was dropped as one event (its end was not counted), and
    keep_newest counted the 16-byte slots of a recycled chunk, each holding two 8-byte Python
    events: both about half the events dropped."""
    n = 150_000
    per_iteration = {"python_calls": 2, "ranges": 2, "mixed": 4}[workload]
    with framescope.profile(memory_limit="1MiB", on_limit=on_limit) as prof:  # type: ignore[arg-type]
        if workload == "python_calls":
            for i in range(n):
                _work(i)
        elif workload == "ranges":
            for i in range(n):
                with framescope.record_function("r"):
                    pass
        else:
            for i in range(n):
                with framescope.record_function("r"):
                    _work(i)
    t = prof.trace
    produced = per_iteration * n
    assert t.dropped_events > produced // 2  # 1 MiB holds well under half of them
    # The session's own few events (its start and stop, the marks) come on top.
    assert produced <= t.recorded_events + t.dropped_events <= produced + 16, (
        t.recorded_events, t.dropped_events)
    # The texts that report drops say the same number.
    dropped_warnings = [w for w in prof.warnings if "events dropped" in w]
    assert len(dropped_warnings) == 1 and f" {t.dropped_events} events dropped" in dropped_warnings[0]
    assert f"{t.dropped_events} dropped" in prof.summary(limit=1).splitlines()[-1]
