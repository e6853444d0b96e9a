"""framescope.eval_frame: entries guarded by ``bool`` on the frame's own code, whose hits the API
decides by reading the frame (the guard runs no code): the same results, hooks and Cache Lookup
events as any guard's."""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest

import framescope
from framescope import eval_frame as ef
from tests.support.eval_frame_support import clean_eval_frame_state, codes_to_reset, run_with


@pytest.fixture(autouse=True)
def clean_thread() -> Iterator[None]:
    yield from clean_eval_frame_state()


class BoolCacher:
    """Caches each offered target's own code under `bool` (or `guard`); records the offers."""

    def __init__(self, *fns: Callable[..., Any], guard: Any = bool) -> None:
        self.targets = {fn.__code__ for fn in fns}
        codes_to_reset.extend(self.targets)
        self.guard = guard
        self.offers: list[str] = []

    def __call__(self, frame: ef.Frame, entry: Any, frame_state: Any) -> Any:
        if frame.f_code not in self.targets:
            return None
        self.offers.append(frame.f_code.co_name)
        return ef.GuardedCode(code=frame.f_code, check_fn=self.guard)


def lookups(prof: framescope.profile) -> list[framescope.Event]:
    return [e for e in prof.events() if e.name == "Cache Lookup"]


def test_bool_guard_holds_while_a_value_is_bound() -> None:
    def one(x: int) -> int:
        return x + 1

    def none_bound() -> int:  # f_locals is empty: bool() is false, every call misses
        return 7

    k = 3

    def closure_only() -> int:  # a bound free variable makes f_locals true
        return k

    def later_arg(*args: int, y: int = 0) -> int:  # the first slot (*args) is bound anyway
        return y

    cb = BoolCacher(one, none_bound, closure_only, later_arg)
    for _ in range(3):
        assert run_with(cb, one, 1) == 2
        assert run_with(cb, none_bound) == 7
        assert run_with(cb, closure_only) == 3
        assert run_with(cb, later_arg, y=4) == 4
    assert cb.offers.count("one") == 1
    assert cb.offers.count("closure_only") == 1
    assert cb.offers.count("later_arg") == 1
    assert cb.offers.count("none_bound") == 3  # a miss each time: a new entry each time
    assert len(ef.cache_entries(none_bound.__code__)) == 3


def test_a_failing_bool_guard_reports_once_per_entry() -> None:
    def none_bound() -> int:
        return 7

    failed: list[tuple[int, bool]] = []
    ef.set_guard_fail_hook(
        lambda check_fn, code, f_locals, index, is_last: failed.append((index, is_last))
    )
    cb = BoolCacher(none_bound)
    assert run_with(cb, none_bound) == 7  # no entry yet: the callback caches one
    assert failed == []
    assert run_with(cb, none_bound) == 7  # the entry's guard fails once, then the callback
    assert failed == [(0, True)]
    assert run_with(cb, none_bound) == 7
    assert failed == [(0, True), (0, False), (1, True)]


def test_bool_guard_hits_in_run_only_mode_and_isolated() -> None:
    def one(x: int) -> int:
        return x + 1

    cb = BoolCacher(one)
    assert run_with(cb, one, 1) == 2
    assert run_with(False, one, 1) == 2  # run-only: the hit runs, no callback
    assert cb.offers == ["one"]
    with ef.use_callback(cb, isolate="a"):
        assert one(1) == 2  # the shared entry is not visible: cached again under "a"
        assert one(1) == 2
    assert cb.offers == ["one", "one"]


@pytest.mark.parametrize("with_stack", [True, False], ids=["tracer", "ranges_only"])
def test_bool_guard_hits_record_one_cache_lookup_each(with_stack: bool) -> None:
    def one(x: int) -> int:
        return x + 1

    def none_bound() -> int:
        return 7

    cb = BoolCacher(one, none_bound)
    run_with(cb, one, 1)
    run_with(cb, none_bound)
    with framescope.profile(with_stack=with_stack) as prof:
        for _ in range(4):
            assert run_with(cb, one, 1) == 2
        assert run_with(cb, none_bound) == 7  # a miss: still one lookup
    events = lookups(prof)
    assert len(events) == 5
    assert all(e.duration_ns >= 0 and e.category == "cpu_op" for e in events)
    assert cb.offers == ["one", "none_bound", "none_bound"]
    if with_stack:
        by_index = list(prof.events())
        for e in events:
            assert e.parent is not None and by_index[e.parent].name.endswith("run_with")


def test_bool_guard_on_another_code_still_calls_it() -> None:
    def f(x: int) -> int:
        return x + 1

    def g(x: int) -> int:
        return x + 100

    codes_to_reset.append(f.__code__)
    offers: list[str] = []

    def cb(frame: ef.Frame, entry: Any, state: Any) -> Any:
        if frame.f_code is not f.__code__:
            return None
        offers.append("f")
        return ef.GuardedCode(code=g.__code__, check_fn=bool)

    assert [run_with(cb, f, 1) for _ in range(3)] == [101, 101, 101]
    assert offers == ["f"]
