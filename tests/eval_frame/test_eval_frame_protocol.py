"""framescope.eval_frame: the rest of Dynamo's frame-evaluation protocol, on every Python version:
exec strategies (FrameAction / FrameExecStrategy / set_code_exec_strategy), isolation, guard
errors, get_eval_frame_callback, reset(), skip_guard_eval_unsafe, the guard complete hook, the
frame's closure and torch-style f_locals. test_eval_frame_torch_diff.py checks the same behaviour
against torch's own layer where torch is installed."""

from __future__ import annotations

import sys
import threading
from types import CodeType
from typing import Any, Callable, Iterator

import pytest

import framescope
from framescope import _core
from framescope import eval_frame as ef
from tests.support.eval_frame_support import clean_eval_frame_state, codes_to_reset, run_with

A = ef.FrameAction
S = ef.FrameExecStrategy


@pytest.fixture(autouse=True)
def clean_thread() -> Iterator[None]:
    yield from clean_eval_frame_state()


class Recorder:
    """A callback that logs the targets it is offered and answers with decide(name, frame);
    anything else is skipped. Target codes are reset after the test."""

    def __init__(self, decide: Callable[[str, ef.Frame], Any], *fns: Callable[..., Any]) -> None:
        self.names = {fn.__code__: fn.__name__ for fn in fns}
        codes_to_reset.extend(self.names)
        self.decide = decide
        self.offers: list[str] = []

    def __call__(self, frame: ef.Frame, entry: Any, state: Any) -> Any:
        codes_to_reset.append(frame.f_code)
        name = self.names.get(frame.f_code)
        if name is None:
            return None
        self.offers.append(name)
        return self.decide(name, frame)


def always(f_locals: Any) -> bool:
    return True


def own(frame: ef.Frame, check: Callable[[Any], Any] = always, strategy: Any = None) -> Any:
    return ef.GuardedCode(frame.f_code, check, strategy)


calls: list[str] = []


def leaf(x: int) -> int:
    calls.append("leaf")
    return x + 1


def middle(x: int) -> int:
    calls.append("middle")
    return leaf(x) * 2


def top(x: int) -> int:
    calls.append("top")
    return middle(x) + 1


# -- FrameAction, FrameExecStrategy ------------------------------------------------------------------


def test_frame_action_and_exec_strategy_types() -> None:
    assert [(a.name, int(a)) for a in A] == [("DEFAULT", 0), ("SKIP", 1), ("RUN_ONLY", 2)]
    s = S(A.SKIP, A.RUN_ONLY)
    assert s.cur_action is A.SKIP and s.recursive_action is A.RUN_ONLY and s.apply_to_code is True
    assert S() == S(A.DEFAULT, A.DEFAULT, apply_to_code=True) == S(0, 0)
    assert S(A.SKIP, apply_to_code=False) != S(A.SKIP)
    assert hash(S(1, 2)) == hash(S(A.SKIP, A.RUN_ONLY))
    assert repr(s) == "FrameExecStrategy(FrameAction.SKIP, FrameAction.RUN_ONLY)"
    with pytest.raises(ValueError, match="must be FrameAction.DEFAULT"):
        S(3)
    with pytest.raises(TypeError, match="recursive_action must be a FrameAction"):
        S(A.SKIP, "SKIP")
    with pytest.raises(TypeError, match="cur_action must be a FrameAction, not bool"):
        S(True)
    with pytest.raises(TypeError, match="strategy must be None or a FrameExecStrategy"):
        ef.GuardedCode(leaf.__code__, always, 3)
    assert ef.GuardedCode(leaf.__code__, always).strategy is None
    assert ef.GuardedCode(leaf.__code__, always, s).strategy == s


def test_set_code_exec_strategy_validates_and_reads_back() -> None:
    codes_to_reset.append(leaf.__code__)
    assert ef.get_code_exec_strategy(leaf.__code__) == S()
    ef.set_code_exec_strategy(leaf.__code__, S(A.RUN_ONLY, A.SKIP))
    assert ef.get_code_exec_strategy(leaf.__code__) == S(A.RUN_ONLY, A.SKIP)
    assert not ef.is_skipped(leaf.__code__)
    ef.skip_code(leaf.__code__)  # torch's skip_code: (SKIP, DEFAULT)
    assert ef.get_code_exec_strategy(leaf.__code__) == S(A.SKIP, A.DEFAULT)
    assert ef.is_skipped(leaf.__code__)
    with pytest.raises(TypeError, match="expected a code object"):
        ef.set_code_exec_strategy(leaf, S())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected a FrameExecStrategy"):
        ef.set_code_exec_strategy(leaf.__code__, A.SKIP)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="apply_to_code=False"):
        ef.set_code_exec_strategy(leaf.__code__, S(A.SKIP, apply_to_code=False))
    ef.reset_code(leaf.__code__)
    assert ef.get_code_exec_strategy(leaf.__code__) == S()


# -- exec strategies ----------------------------------------------------------------------------------


def test_recursive_skip_covers_everything_the_frame_calls_now_and_later() -> None:
    cb = Recorder(lambda name, frame: S(A.SKIP, A.SKIP) if name == "middle" else own(frame),
                  top, middle, leaf)
    calls.clear()
    assert run_with(cb, top, 1) == 5
    assert cb.offers == ["top", "middle"]  # leaf, called under middle, is never offered
    assert run_with(cb, top, 1) == 5 and cb.offers == ["top", "middle"]
    assert run_with(cb, leaf, 1) == 2 and cb.offers == ["top", "middle", "leaf"]
    assert ef.get_code_exec_strategy(middle.__code__) == S(A.SKIP, A.SKIP)
    assert calls == ["top", "middle", "leaf"] * 2 + ["leaf"]


def test_skip_of_this_call_only_is_offered_again_next_call() -> None:
    cb = Recorder(lambda name, frame: S(A.SKIP, A.DEFAULT, apply_to_code=False), middle, leaf)
    assert run_with(cb, middle, 1) == 4
    assert run_with(cb, middle, 2) == 6
    assert cb.offers == ["middle", "leaf", "middle", "leaf"]
    assert ef.get_code_exec_strategy(middle.__code__) == S()
    assert ef.cache_entries(middle.__code__) == []


def test_recursive_skip_of_this_call_only() -> None:
    cb = Recorder(lambda name, frame: S(A.DEFAULT, A.SKIP, apply_to_code=False) if name == "middle"
                  else own(frame), middle, leaf)
    assert run_with(cb, middle, 1) == 4
    assert cb.offers == ["middle"]  # leaf not offered under middle
    assert run_with(cb, middle, 1) == 4
    assert cb.offers == ["middle", "middle"]  # offered again (nothing stored), leaf still not
    assert run_with(cb, leaf, 1) == 2 and cb.offers[-1] == "leaf"


def test_run_only_for_callees_hits_run_cached_code_misses_run_the_original() -> None:
    def leaf_plus_100(x: int) -> int:
        return x + 100

    codes_to_reset.append(leaf_plus_100.__code__)

    def decide(name: str, frame: ef.Frame) -> Any:
        if name == "leaf":
            x = frame.f_locals["x"]
            return ef.GuardedCode(leaf_plus_100.__code__, lambda f_locals: f_locals["x"] == x)
        return own(frame, strategy=S(A.DEFAULT, A.RUN_ONLY))

    cb = Recorder(decide, middle, leaf)
    assert run_with(cb, leaf, 1) == 101  # leaf cached for x == 1
    assert run_with(cb, middle, 1) == 202  # hit: leaf's cached code runs under middle
    assert run_with(cb, middle, 2) == 6  # miss: the original leaf runs, no callback
    assert cb.offers == ["leaf", "middle"]
    assert len(ef.cache_entries(leaf.__code__)) == 1
    assert run_with(cb, leaf, 2) == 102 and cb.offers[-1] == "leaf"  # offered outside middle


def test_skip_with_run_only_callees_and_a_run_only_code() -> None:
    def decide(name: str, frame: ef.Frame) -> Any:
        if name == "middle":
            return S(A.SKIP, A.RUN_ONLY)
        x = frame.f_locals["x"]
        return own(frame, lambda f_locals: f_locals["x"] == x, S(A.RUN_ONLY, A.DEFAULT))

    cb = Recorder(decide, middle, leaf)
    guards: list[int] = []
    ef.set_guard_fail_hook(lambda check_fn, code, f_locals, index, is_last: guards.append(
        f_locals["x"]))
    assert run_with(cb, leaf, 1) == 2  # leaf: cached for x == 1, RUN_ONLY from now on
    assert run_with(cb, leaf, 2) == 3  # a miss: the original, no callback
    assert run_with(cb, middle, 3) == 8
    assert cb.offers == ["leaf", "middle"] and guards == [2, 3]
    assert len(ef.cache_entries(leaf.__code__)) == 1


def test_a_stored_recursive_action_wins_for_the_call_then_the_callbacks_is_stored() -> None:
    ef.set_code_exec_strategy(middle.__code__, S(A.DEFAULT, A.SKIP))
    cb = Recorder(lambda name, frame: own(frame, strategy=S(A.DEFAULT, A.RUN_ONLY))
                  if name == "middle" else None, middle, leaf)
    assert run_with(cb, middle, 1) == 4
    assert cb.offers == ["middle"]  # leaf under the stored SKIP: not offered
    assert ef.get_code_exec_strategy(middle.__code__) == S(A.DEFAULT, A.RUN_ONLY)
    assert run_with(cb, middle, 1) == 4 and cb.offers == ["middle"]  # a hit, leaf run-only


def test_a_returned_none_stores_skip_and_clears_a_stored_recursive_action() -> None:
    ef.set_code_exec_strategy(middle.__code__, S(A.DEFAULT, A.SKIP))
    cb = Recorder(lambda name, frame: None, middle, leaf)
    assert run_with(cb, middle, 1) == 4
    assert ef.get_code_exec_strategy(middle.__code__) == S(A.SKIP, A.DEFAULT)
    assert cb.offers == ["middle"]
    assert run_with(cb, middle, 1) == 4
    assert cb.offers == ["middle", "leaf"]  # the stored SKIP is no longer recursive


def test_set_eval_frame_inside_a_recursively_skipped_frame_stands() -> None:
    seen: list[Any] = []
    other = Recorder(lambda name, frame: None, leaf)

    def inner_switch(x: int) -> int:
        seen.append(ef.get_eval_frame_callback())
        ef.set_eval_frame(other)  # the frame's own choice: kept after it returns
        return leaf(x)

    cb = Recorder(lambda name, frame: S(A.DEFAULT, A.SKIP), inner_switch)
    prior = ef.set_eval_frame(cb)
    try:
        assert inner_switch(1) == 2
        assert ef.get_eval_frame_callback() is other
    finally:
        ef.set_eval_frame(prior)
    assert seen == [None] and other.offers == ["leaf"]


def test_recursive_actions_cover_generator_resumes() -> None:
    def gen(n: int) -> Iterator[int]:
        for i in range(n):
            yield leaf(i)

    def consume(n: int) -> list[int]:
        return list(gen(n))

    codes_to_reset.append(consume.__code__)
    cb = Recorder(lambda name, frame: S(A.SKIP, A.SKIP) if name == "gen" else own(frame),
                  gen, leaf)
    assert run_with(cb, consume, 3) == [1, 2, 3]
    assert run_with(cb, consume, 2) == [1, 2]
    # On 3.11+ the offer is at the call that makes the generator; 3.10 offers the first resume.
    assert cb.offers == ["gen"]  # leaf, called while the generator runs, is never offered


def test_recursive_run_only_applies_to_every_call_of_a_recursive_cached_code() -> None:
    def fib(n: int) -> int:
        return n if n < 2 else fib(n - 1) + fib(n - 2)

    def fib_fast(n: int) -> int:
        return n if n < 2 else fib(n - 1) + fib(n - 2)

    codes_to_reset.append(fib_fast.__code__)
    cb = Recorder(lambda name, frame: ef.GuardedCode(fib_fast.__code__, always,
                                                     S(A.DEFAULT, A.RUN_ONLY)), fib)
    with framescope.profile() as prof:
        assert run_with(cb, fib, 15) == 610
    lookups = sum(1 for e in prof.events() if e.name == "Cache Lookup")
    assert cb.offers == ["fib"]
    assert lookups == 1973  # every fib call is looked up once: the first by the callback's lookup


def test_recursive_actions_in_deep_recursion() -> None:
    """20,000 levels, each a run-only hit under an isolated callback's RUN_ONLY recursive action
    (the isolation is swapped out at the top): no C stack trouble on any version."""

    def down(n: int) -> int:
        return 0 if n == 0 else 1 + down(n - 1)

    cb = Recorder(lambda name, frame: own(frame, strategy=S(A.DEFAULT, A.RUN_ONLY)), down)
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(40_000)
    try:
        with ef.use_callback(cb, isolate=True):
            assert down(20_000) == 20_000
            assert ef.get_eval_frame_callback() is cb
            assert _core._eval_frame_setting() == (cb, cb, "raise")
    finally:
        sys.setrecursionlimit(old)
    assert cb.offers == ["down"]


def test_cache_lookup_events_stay_one_per_lookup_under_strategies() -> None:
    cb = Recorder(lambda name, frame: S(A.SKIP, A.SKIP) if name == "middle" else own(frame),
                  top, middle, leaf)
    run_with(cb, top, 1)
    with framescope.profile() as prof:
        run_with(cb, top, 1)  # top: a lookup (hit); middle: skipped, leaf under it: no lookup
        run_with(cb, leaf, 1)  # leaf: a lookup (miss, then cached)
    assert sum(1 for e in prof.events() if e.name == "Cache Lookup") == 2


# -- isolation -------------------------------------------------------------------------------------


def test_isolated_callbacks_hit_only_their_own_entries() -> None:
    def f(x: int) -> int:
        return x

    def f_a(x: int) -> int:
        return x + 100

    def f_b(x: int) -> int:
        return x + 200

    codes_to_reset.extend([f.__code__, f_a.__code__, f_b.__code__])
    made: list[str] = []

    def caching(tag: str, code: CodeType) -> Any:
        def cb(frame: ef.Frame, entry: Any, state: Any) -> Any:
            if frame.f_code is not f.__code__:
                return None
            made.append(tag)
            return ef.GuardedCode(code, always)

        return cb

    a, b, shared = caching("a", f_a.__code__), caching("b", f_b.__code__), caching("s", f.__code__)

    def call_with(cb: Any, **setting: Any) -> int:
        prior = ef.set_eval_frame(cb, **setting)
        try:
            return f(1)
        finally:
            ef.set_eval_frame(prior)

    assert call_with(a, isolate=True) == 101
    assert call_with(b, isolate=True) == 201  # a's entry is not hit under b
    assert call_with(a, isolate=True) == 101 and call_with(b, isolate=True) == 201
    assert made == ["a", "b"]
    assert call_with(shared) == 1  # a shared callback sees no isolated entry
    assert call_with(a) == 1  # neither does a, set without isolation: it sees the shared one
    assert made == ["a", "b", "s"]
    assert [e.isolation for e in ef.cache_entries(f.__code__)] == [None, b, a]
    assert call_with(False) == 1  # run-only sees every entry: the head (shared) is hit
    # An isolation id: equal ids share entries, whatever the callback.
    assert call_with(a, isolate=("jit", 1)) == 101
    assert call_with(b, isolate=("jit", 1)) == 101
    assert call_with(False, isolate=("jit", 1)) == 101  # run-only restricted to the id
    assert call_with(False, isolate=("jit", 2)) == 1
    assert made == ["a", "b", "s", "a"]
    assert ef.cache_entries(f.__code__)[0].isolation == ("jit", 1)


def test_isolation_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="isolate=True keys the entries by the callback"):
        ef.set_eval_frame(False, isolate=True)
    with pytest.raises(ValueError, match="needs a callback"):
        ef.set_eval_frame(None, isolate="id")
    with pytest.raises(ValueError, match="guard_errors must be 'raise' or 'fail', not 'ignore'"):
        ef.set_eval_frame(always, guard_errors="ignore")
    with pytest.raises(TypeError):
        ef.set_eval_frame(always, True)  # type: ignore[misc]  # keyword-only
    assert ef.get_eval_frame_callback() is None  # nothing was set


def test_an_isolation_id_whose_eq_raises_propagates_from_the_call() -> None:
    class Key:
        def __eq__(self, other: object) -> bool:
            raise RuntimeError("no comparing")

        __hash__ = object.__hash__

    def f(x: int) -> int:
        return x

    cb = Recorder(lambda name, frame: own(frame), f)
    prior = ef.set_eval_frame(cb, isolate=Key())
    try:
        assert f(1) == 1  # cached under the first key
    finally:
        ef.set_eval_frame(prior)
    prior = ef.set_eval_frame(cb, isolate=Key())
    try:
        with pytest.raises(RuntimeError, match="no comparing"):
            f(1)
    finally:
        ef.set_eval_frame(prior)


def test_use_callback_restores_the_whole_previous_setting() -> None:
    def f(x: int) -> int:
        return x

    cb = Recorder(lambda name, frame: own(frame), f)
    other = Recorder(lambda name, frame: None, f)
    with ef.use_callback(cb, isolate="outer", guard_errors="fail"):
        with ef.use_callback(other):
            assert _core._eval_frame_setting() == (other, None, "raise")
        assert _core._eval_frame_setting() == (cb, "outer", "fail")
        with ef.use_callback(None):
            assert ef.get_eval_frame_callback() is None
        assert f(1) == 1
    assert _core._eval_frame_setting() == (None, None, "raise")
    assert [e.isolation for e in ef.cache_entries(f.__code__)] == ["outer"]
    with ef.use_callback(cb, isolate=True):
        assert _core._eval_frame_setting() == (cb, cb, "raise")


# -- guard errors --------------------------------------------------------------------------------


def make_raising(fn: Callable[..., Any]) -> Recorder:
    def decide(name: str, frame: ef.Frame) -> Any:
        x = frame.f_locals["x"]

        def check(f_locals: Any) -> bool:
            if f_locals["x"] < 0:
                raise ValueError("negative")
            return bool(f_locals["x"] == x)

        return own(frame, check)

    return Recorder(decide, fn)


def test_guard_errors_raise_by_default_and_fail_when_asked() -> None:
    def f(x: int) -> int:
        return x * 10

    reports: list[tuple[int, bool]] = []
    ef.set_guard_error_hook(lambda check_fn, code, f_locals, index, is_last: reports.append(
        (index, is_last)))
    failed: list[int] = []
    ef.set_guard_fail_hook(lambda check_fn, code, f_locals, index, is_last: failed.append(index))
    cb = make_raising(f)
    assert run_with(cb, f, 1) == 10
    with pytest.raises(ValueError, match="negative"):
        run_with(cb, f, -1)  # default "raise": the body does not run
    assert reports == [(0, True)] and cb.offers == ["f"]
    with ef.use_callback(cb, guard_errors="fail"):
        assert f(-1) == -10  # a failed guard: a miss, the callback caches an entry for -1
        assert f(-1) == -10  # both guards raise: a miss again
        assert f(1) == 10  # the two entries for -1 return false, the one for 1 holds
    assert cb.offers == ["f", "f", "f"]
    assert reports == [(0, True), (0, True), (0, False), (1, True)]
    assert failed == [0, 1]  # only guards that returned false report a failure
    with ef.use_callback(False, guard_errors="fail"):
        assert f(-5) == -50  # run-only: every guard raises or fails, the original runs


def test_an_error_hook_that_raises_wins_in_both_modes() -> None:
    def f(x: int) -> int:
        return x

    def hook(*args: Any) -> None:
        raise KeyError("from the hook")

    cb = make_raising(f)
    run_with(cb, f, 1)
    ef.set_guard_error_hook(hook)
    for mode in ("raise", "fail"):
        with ef.use_callback(cb, guard_errors=mode):
            with pytest.raises(KeyError, match="from the hook") as info:
                f(-1)
        assert isinstance(info.value.__context__, ValueError)
    assert cb.offers == ["f"]


# -- get_eval_frame_callback, reset ------------------------------------------------------------------


def test_get_eval_frame_callback_inside_callbacks_guards_and_callees() -> None:
    seen: list[tuple[str, Any]] = []

    def probe(x: int) -> int:
        seen.append(("probe", ef.get_eval_frame_callback()))
        return x

    def caller(x: int) -> int:
        return probe(x)

    def decide(name: str, frame: ef.Frame) -> Any:
        seen.append(("callback", ef.get_eval_frame_callback()))

        def check(f_locals: Any) -> bool:
            seen.append(("guard", ef.get_eval_frame_callback()))
            return True

        return own(frame, check, S(A.DEFAULT, A.RUN_ONLY))

    cb = Recorder(decide, caller)
    codes_to_reset.append(probe.__code__)
    assert ef.get_eval_frame_callback() is None
    run_with(cb, caller, 1)
    run_with(cb, caller, 1)
    run_with(False, caller, 1)
    assert seen == [("callback", None), ("probe", False), ("guard", None), ("probe", False),
                    ("guard", None), ("probe", False)]


def test_reset_drops_every_entry_frame_state_and_strategy() -> None:
    def f(x: int) -> int:
        return x

    states: list[dict[str, Any]] = []

    def decide(name: str, frame: ef.Frame) -> Any:
        return own(frame) if name == "f" else S(A.SKIP, A.SKIP)

    cb = Recorder(decide, f, middle)

    def record_state(frame: ef.Frame, entry: Any, state: dict[str, Any]) -> Any:
        states.append(state)
        return cb(frame, entry, state)

    run_with(record_state, f, 1)
    run_with(record_state, middle, 1)
    kept = ef.cache_entries(f.__code__)[0]
    entries_before = _core._eval_frame_debug()["live_entries"]
    assert ef.get_code_exec_strategy(middle.__code__) == S(A.SKIP, A.SKIP)
    ef.reset()
    assert ef.cache_entries(f.__code__) == [] and kept.code is None
    assert ef.get_code_exec_strategy(middle.__code__) == S()
    assert _core._eval_frame_debug()["live_states"] == 0
    del kept
    assert _core._eval_frame_debug()["live_entries"] < entries_before
    run_with(record_state, f, 1)
    assert states[-1] is not states[0] and cb.offers == ["f", "middle", "f"]


def test_reset_from_a_guard_or_a_callback_is_safe() -> None:
    def f(x: int) -> int:
        return x + 1

    def check(f_locals: Any) -> bool:
        ef.reset()
        return True

    def decide(name: str, frame: ef.Frame) -> Any:
        ef.reset()
        return own(frame, check)

    cb = Recorder(decide, f)
    assert run_with(cb, f, 1) == 2
    assert len(ef.cache_entries(f.__code__)) == 1
    assert run_with(cb, f, 1) == 2  # the guard resets: a miss on a fresh state
    assert cb.offers == ["f", "f"]


@pytest.mark.parametrize("outcome", ["raise", "false", "true"])
def test_a_guard_that_resets_its_code_drops_its_entry_whatever_it_returns(outcome: str) -> None:
    """The head entry's guard resets the code (dropping that entry and its guard) and then raises,
    returns false or returns true: the lookup is a miss on the fresh state; the error hook sees
    the dropped entry (code None, the last one) and the fail hook is not told."""

    def f(x: int) -> int:
        return x + 1

    def check(f_locals: Any) -> bool:
        ef.reset_code(f.__code__)
        if outcome == "raise":
            raise ValueError("guard after reset")
        return outcome == "true"

    errors: list[tuple[Any, int, bool]] = []
    failed: list[int] = []
    ef.set_guard_error_hook(lambda check_fn, code, f_locals, index, is_last: errors.append(
        (code, index, is_last)))
    ef.set_guard_fail_hook(lambda check_fn, code, f_locals, index, is_last: failed.append(index))
    calls = [0]

    def decide(name: str, frame: ef.Frame) -> Any:
        calls[0] += 1
        return own(frame, check if calls[0] == 1 else always)

    cb = Recorder(decide, f)
    assert run_with(cb, f, 1) == 2  # caches f under `check`
    with ef.use_callback(cb, guard_errors="fail"):
        assert f(1) == 2  # check resets the code: a miss, the callback caches `always`
    assert cb.offers == ["f", "f"]
    assert errors == ([(None, 0, True)] if outcome == "raise" else [])
    assert failed == []
    assert len(ef.cache_entries(f.__code__)) == 1


# -- skip_guard_eval_unsafe ------------------------------------------------------------------------


def test_skip_guard_eval_unsafe_hits_the_last_hit_entry_without_guards() -> None:
    def f(x: int) -> int:
        return x

    def f_one(x: int) -> int:
        return 1000 + x

    def f_two(x: int) -> int:
        return 2000 + x

    codes_to_reset.extend([f_one.__code__, f_two.__code__])
    guards: list[int] = []

    def decide(name: str, frame: ef.Frame) -> Any:
        x = frame.f_locals["x"]
        code = f_one.__code__ if x == 1 else f_two.__code__
        return ef.GuardedCode(code, lambda f_locals: guards.append(x) or f_locals["x"] == x)

    cb = Recorder(decide, f)
    assert run_with(cb, f, 1) == 1001 and run_with(cb, f, 2) == 2002
    assert run_with(cb, f, 1) == 1001  # f_one's entry is the last hit now
    guards.clear()
    assert ef.set_skip_guard_eval_unsafe(True) is False
    try:
        with framescope.profile() as prof:
            assert run_with(cb, f, 2) == 1002  # no guard runs: the last-hit entry runs
        assert guards == [] and cb.offers == ["f", "f"]
        assert sum(1 for e in prof.events() if e.name == "Cache Lookup") == 1
        assert run_with(False, f, 7) == 1007
        with pytest.raises(RuntimeError, match="skip_guard_eval_unsafe"):
            run_with(cb, middle, 1)  # nothing cached: a miss raises instead of calling back
    finally:
        assert ef.set_skip_guard_eval_unsafe(False) is True
    assert run_with(cb, f, 2) == 2002 and guards == [1, 2]
    assert ef.cache_entries(middle.__code__) == []


def test_skip_guard_eval_unsafe_respects_isolation() -> None:
    def f(x: int) -> int:
        return x

    def f_a(x: int) -> int:
        return -x

    codes_to_reset.append(f_a.__code__)
    iso = Recorder(lambda name, frame: ef.GuardedCode(f_a.__code__, always), f)
    with ef.use_callback(iso, isolate=True):
        assert f(3) == -3
    shared = Recorder(lambda name, frame: own(frame), f)
    ef.set_skip_guard_eval_unsafe(True)
    try:
        with pytest.raises(RuntimeError, match="skip_guard_eval_unsafe"):
            run_with(shared, f, 3)  # the only entry is isolated: not for this callback
        with ef.use_callback(iso, isolate=True):
            assert f(4) == -4
    finally:
        ef.set_skip_guard_eval_unsafe(False)


# -- guard complete hook ---------------------------------------------------------------------------


def test_guard_complete_hook_can_turn_a_hit_into_a_miss() -> None:
    def f(x: int) -> int:
        return x

    answers = [True, False, 0, "yes"]
    told: list[bool] = []

    def hook(cache_hit: bool) -> Any:
        told.append(cache_hit)
        return answers.pop(0)

    cb = Recorder(lambda name, frame: own(frame), f)
    run_with(cb, f, 1)  # no entries yet: the hook is not called
    assert ef.set_guard_complete_hook(hook) is None
    with framescope.profile() as prof:
        run_with(cb, f, 1)  # hit, kept
        run_with(cb, f, 1)  # hit, turned into a miss: the callback is called
        run_with(cb, f, 1)  # 0: falsy, a miss again
        run_with(False, f, 1)  # run-only: "yes" keeps the hit
    assert told == [True, True, True, True]
    assert cb.offers == ["f", "f", "f"] and len(ef.cache_entries(f.__code__)) == 3
    lookups = [e for e in prof.events() if e.name == "Cache Lookup"]
    assert len(lookups) == 4  # the hook runs after the range: still one event per lookup
    assert ef.set_guard_complete_hook(None) is hook


def test_guard_complete_hook_that_raises_propagates_and_the_callback_stays() -> None:
    # torch 2.13 aborts the process here (an uncaught C++ exception).
    def f(x: int) -> int:
        return x

    def hook(cache_hit: bool) -> bool:
        raise RuntimeError("collective failed")

    cb = Recorder(lambda name, frame: own(frame), f)
    run_with(cb, f, 1)
    ef.set_guard_complete_hook(hook)
    prior = ef.set_eval_frame(cb)
    try:
        with pytest.raises(RuntimeError, match="collective failed"):
            f(1)
        assert ef.get_eval_frame_callback() is cb
    finally:
        ef.set_eval_frame(prior)
        ef.set_guard_complete_hook(None)
    with pytest.raises(TypeError, match="expected None or a callable"):
        ef.set_guard_complete_hook(3)  # type: ignore[arg-type]


# -- the frame: closure, f_locals -------------------------------------------------------------------


def make_closures() -> tuple[Callable[..., Any], Callable[..., Any]]:
    outer_value = 10
    later = None

    def shaped(a: int, b: int = 2, /, c: int = 3, *rest: int, d: int, e: int = 5, **kw: int) -> int:
        def uses_a() -> Any:
            return a, later  # a: a cell argument

        return a + outer_value

    def no_closure(x: int) -> int:
        return x

    later = "bound after"
    return shaped, no_closure


def test_frame_closure_and_f_locals_follow_torchs_frame_locals() -> None:
    shaped, no_closure = make_closures()
    seen: dict[str, Any] = {}

    def decide(name: str, frame: ef.Frame) -> Any:
        seen[name] = (list(frame.f_locals.items()), [c.cell_contents for c in frame.closure])
        return None

    cb = Recorder(decide, shaped, no_closure)
    run_with(cb, shaped, 1, 2, 3, 4, 5, d=6, z=7)
    run_with(cb, no_closure, 1)
    items, cells = seen["shaped"]
    expected = [("a", 1), ("b", 2), ("c", 3), ("d", 6), ("e", 5), ("rest", (4, 5)),
                ("kw", {"z": 7}), ("later", "bound after"), ("outer_value", 10)]
    if sys.version_info < (3, 11):
        # torch's order on 3.10 (that of f_localsplus): a cell argument comes after the others.
        expected = expected[1:7] + expected[:1] + expected[7:]
    assert items == expected
    assert cells == ["bound after", 10]
    assert seen["no_closure"] == ([("x", 1)], [])


def test_f_locals_of_module_and_class_bodies_is_empty() -> None:
    seen: list[tuple[str, Any]] = []

    def cb(frame: ef.Frame, entry: Any, state: Any) -> Any:
        if frame.f_code.co_filename == "<eval_frame body>":
            seen.append((frame.f_code.co_name, dict(frame.f_locals)))
        codes_to_reset.append(frame.f_code)
        return None

    source = "y = 1\ndef outer():\n    v = 2\n    class C:\n        w = v\n    return C\nouter()\n"
    run_with(cb, exec, compile(source, "<eval_frame body>", "exec"), {"__name__": "m"})
    assert seen == [("<module>", {}), ("outer", {}), ("C", {})]


def test_writes_to_f_locals_are_seen_by_the_rest_of_the_lookup_never_by_the_frame() -> None:
    def f(x: int, y: int = 1) -> int:
        return x + y

    seen: list[Any] = []

    def first(f_locals: Any) -> bool:
        f_locals["x"] = 100
        del f_locals["y"]
        f_locals.setdefault("z", 3)
        return False

    def second(f_locals: Any) -> bool:
        seen.append(dict(f_locals))
        return False

    entries = iter([second, first])

    def decide(name: str, frame: ef.Frame) -> Any:
        seen.append(("callback", dict(frame.f_locals)))
        frame.f_locals.update(w=4)
        assert frame.f_locals.pop("w") == 4
        return own(frame, next(entries, always))

    cb = Recorder(decide, f)
    assert run_with(cb, f, 1) == 2
    assert run_with(cb, f, 2) == 3  # entries: [first(second made)...]
    seen.clear()
    assert run_with(cb, f, 5) == 6  # first writes, second sees it, the callback too; f does not
    assert seen == [{"x": 100, "z": 3}, ("callback", {"x": 100, "z": 3})]
    assert run_with(cb, f, 5) == 6  # the next lookup reads the frame again


def test_a_kept_f_locals_is_a_dict_of_its_own() -> None:
    kept: list[Any] = []

    def grab(f_locals: Any) -> bool:
        kept.append(f_locals)
        return True

    cb = Recorder(lambda name, frame: own(frame, grab), leaf)
    run_with(cb, leaf, 1)
    run_with(cb, leaf, 2)  # the guard keeps the view of this lookup
    view = kept[0]
    assert view == {"x": 2} and isinstance(view, ef.FrameLocals)
    view["x"] = 5
    assert view == {"x": 5} and view.pop("x") == 5 and len(view) == 0
    run_with(cb, leaf, 3)
    assert kept[1] == {"x": 3} and kept[1] is not view


# -- threads -------------------------------------------------------------------------------------


def test_strategies_and_settings_are_per_thread_where_torchs_are() -> None:
    ready = threading.Event()
    results: list[Any] = []

    def worker() -> None:
        results.append(ef.get_eval_frame_callback())
        results.append(_core._eval_frame_setting())
        results.append(middle(1))
        ready.set()

    cb = Recorder(lambda name, frame: S(A.DEFAULT, A.SKIP), middle, leaf)
    with ef.use_callback(cb, isolate="main", guard_errors="fail"):
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        assert ready.is_set()
        middle(1)
    assert results == [None, (None, None, "raise"), 4]
    assert cb.offers == ["middle"]  # the worker was never intercepted; leaf under middle skipped


def test_isolation_keys_and_strategies_leave_nothing_behind() -> None:
    import gc
    import weakref

    class Key:
        pass

    def f(x: int) -> int:
        return x

    key = Key()
    key_ref = weakref.ref(key)
    cb = Recorder(lambda name, frame: own(frame, strategy=S(A.DEFAULT, A.SKIP)), f)
    cb_ref = weakref.ref(cb)
    live = _core._eval_frame_debug()
    with ef.use_callback(cb, isolate=key):
        assert f(1) == 1
    with ef.use_callback(cb, isolate=True):
        assert f(2) == 2  # a second entry, keyed by the callback
    assert [e.isolation for e in ef.cache_entries(f.__code__)] == [cb, key]
    ef.reset_code(f.__code__)
    del key, cb
    gc.collect()
    assert key_ref() is None and cb_ref() is None
    after = _core._eval_frame_debug()
    assert after["live_entries"] == live["live_entries"]

    # A thread that exits with an isolated callback set gives the key back.
    thread_key = Key()
    thread_key_ref = weakref.ref(thread_key)

    def worker() -> None:
        # Frames the thread runs on its way out are offered: skipped this once, nothing stored.
        once = S(A.SKIP, A.DEFAULT, apply_to_code=False)
        ef.set_eval_frame(lambda frame, entry, state: once, isolate=thread_key)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    del thread_key
    gc.collect()
    assert thread_key_ref() is None
    assert _core._eval_frame_debug()["enabled_threads"] == 0


def test_callback_gets_the_head_of_the_codes_whole_list_as_torch() -> None:
    def f(x: int) -> int:
        return x

    got: list[Any] = []

    def make(tag: str) -> Callable[..., Any]:
        def cb(frame: ef.Frame, entry: Any, state: Any) -> Any:
            if frame.f_code is not f.__code__:
                return None
            got.append((tag, entry.isolation if entry is not None else None))
            x = frame.f_locals["x"]
            return ef.GuardedCode(f.__code__, lambda f_locals: f_locals["x"] == x)

        return cb

    a, b = make("a"), make("b")
    codes_to_reset.append(f.__code__)
    for cb, x in ((a, 1), (b, 1), (a, 2), (a, 1), (b, 3)):
        with ef.use_callback(cb, isolate=True):
            f(x)
    # a(1): empty; b(1): a's entry is the head (not b's to hit); a(2): b's is the head; a(1): hit;
    # b(3): a's entry for 1, just hit, is the head again.
    assert got == [("a", None), ("b", a), ("a", b), ("b", a)]
