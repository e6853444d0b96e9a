"""framescope.eval_frame: the API (callbacks, caches, hooks, the Frame), Cache Lookup events, the
example, threads and the tracer."""

from __future__ import annotations

import inspect
import sys
import threading
from types import CodeType
from typing import Any, Callable, Iterator

import pytest

import framescope
from framescope import _core
from framescope import eval_frame as ef
from tests.support.eval_frame_support import clean_eval_frame_state, codes_to_reset, run_with
from tests.support.subprocesses import run_example





class Cacher:
    """A callback caching the given functions' codes (or replacements) under `guard`; every other
    code is skipped. Records the names of the codes it is offered."""

    def __init__(
        self,
        *fns: Callable[..., Any],
        guard: Callable[[dict[str, Any]], Any] | None = None,
        replace: dict[CodeType, CodeType] | None = None,
    ) -> None:
        self.targets = {fn.__code__ for fn in fns}
        codes_to_reset.extend(self.targets)
        self.replace = replace or {}
        self.guard = guard or (lambda f_locals: True)
        self.offers: list[str] = []

    def __call__(self, frame: ef.Frame, entry: ef.CacheEntry | None, frame_state: dict[str, Any]) -> Any:
        code = frame.f_code
        if code not in self.targets:
            return None
        self.offers.append(code.co_name)
        return ef.GuardedCode(code=self.replace.get(code, code), check_fn=self.guard)


@pytest.fixture(autouse=True)
def clean_thread() -> Iterator[None]:
    yield from clean_eval_frame_state()


def entries(fn: Callable[..., Any]) -> list[ef.CacheEntry]:
    return ef.cache_entries(fn.__code__)


# -- set_eval_frame and bad input ---------------------------------------------------------------


def test_set_eval_frame_returns_the_previous_callback() -> None:
    def cb(frame: Any, entry: Any, state: Any) -> None:
        return None

    assert ef.set_eval_frame(cb) is None
    assert _core._eval_frame_debug()["hook_installed"]
    assert ef.set_eval_frame(False) is cb
    assert ef.set_eval_frame(cb) is False
    assert ef.set_eval_frame(None) is cb
    assert ef.set_eval_frame(None) is None
    debug = _core._eval_frame_debug()
    assert debug["enabled_threads"] == 0 and not debug["hook_installed"]


@pytest.mark.parametrize("bad", [1, "callback", True, 2.5, object()])
def test_set_eval_frame_rejects_what_is_not_none_false_or_callable(bad: Any) -> None:
    with pytest.raises(TypeError, match="expected None, False or a callable"):
        ef.set_eval_frame(bad)
    assert ef.set_eval_frame(None) is None  # unchanged


def test_bad_arguments_raise_clear_errors() -> None:
    def f(x: int) -> int:
        return x

    with pytest.raises(TypeError, match="code must be a code object"):
        ef.GuardedCode(code=f, check_fn=bool)
    with pytest.raises(TypeError, match="check_fn must be callable"):
        ef.GuardedCode(code=f.__code__, check_fn=1)
    with pytest.raises(TypeError):
        ef.GuardedCode(f.__code__)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        ef.CacheEntry()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        ef.Frame()  # type: ignore[call-arg]
    for fn in (ef.skip_code, ef.reset_code, ef.cache_entries, ef.is_skipped):
        with pytest.raises(TypeError, match="expected a code object"):
            fn(f)  # type: ignore[arg-type]
    for hook_setter in (ef.set_guard_fail_hook, ef.set_guard_error_hook):
        with pytest.raises(TypeError, match="expected None or a callable"):
            hook_setter(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ef.FrameLocals()  # type: ignore[call-arg]
    gc = ef.GuardedCode(check_fn=bool, code=f.__code__)
    assert gc.code is f.__code__ and gc.check_fn is bool
    # A GuardedCode whose __init__ never ran is refused when returned, not dereferenced.
    blank = ef.GuardedCode.__new__(ef.GuardedCode)
    assert blank.code is None and "uninitialised" in repr(blank)
    codes_to_reset.append(f.__code__)
    with pytest.raises(TypeError, match="needs a code object"):
        run_with(lambda frame, entry, state: blank if frame.f_code is f.__code__ else None, f, 1)
    assert entries(f) == []


def test_callback_returning_something_else_raises_and_installs_nothing() -> None:
    def f(x: int) -> int:
        return x + 1

    def cb(frame: Any, entry: Any, state: Any) -> Any:
        return 42 if frame.f_code is f.__code__ else None

    codes_to_reset.append(f.__code__)
    with pytest.raises(TypeError, match="must return None, a GuardedCode or a FrameExecStrategy, not int"):
        run_with(cb, f, 1)
    assert entries(f) == [] and not ef.is_skipped(f.__code__)


# -- skip / hit / miss (seed 002) ----------------------------------------------------------------


def f_seed(x: int) -> int:
    return x + 1


def g_seed(x: int) -> int:
    return x + 2


def five_calls() -> int:
    x = 1
    x = f_seed(x)
    x = g_seed(x)
    x = f_seed(x)
    x = g_seed(x)
    x = f_seed(x)
    return x


def test_always_skip() -> None:
    offered: list[str] = []

    def skip(frame: Any, entry: Any, state: Any) -> None:
        offered.append(frame.f_code.co_name)
        return None

    assert run_with(skip, five_calls) == 8
    assert offered == ["five_calls", "f_seed", "g_seed"]
    assert ef.is_skipped(f_seed.__code__) and entries(f_seed) == []
    for fn in (five_calls, f_seed, g_seed):
        ef.reset_code(fn.__code__)


def test_always_hit() -> None:
    guard_calls: list[int] = []
    cb = Cacher(f_seed, g_seed, guard=lambda f_locals: guard_calls.append(len(f_locals)) or True)
    assert run_with(cb, five_calls) == 8
    assert cb.offers == ["f_seed", "g_seed"]
    assert guard_calls == [1, 1, 1]
    assert len(entries(f_seed)) == 1 and len(entries(g_seed)) == 1
    ef.reset_code(five_calls.__code__)


def test_always_miss() -> None:
    guard_calls: list[int] = []
    cb = Cacher(f_seed, g_seed, guard=lambda f_locals: guard_calls.append(len(f_locals)) and False)
    assert run_with(cb, five_calls) == 8
    assert cb.offers == ["f_seed", "g_seed", "f_seed", "g_seed", "f_seed"]
    assert guard_calls == [1, 1, 1, 1]  # f: 1 entry, g: 1 entry, then f: 2 entries
    assert len(entries(f_seed)) == 3 and len(entries(g_seed)) == 2
    ef.reset_code(five_calls.__code__)


EXPECTED_EXAMPLE = """\
== always skip
calling the 1-th function: __main__.f
the function has 0 cache entries now.
calling the 2-th function: __main__.g
the function has 0 cache entries now.
== always hit
calling the 1-th function: __main__.f
the function has 0 cache entries now.
calling the 2-th function: __main__.g
the function has 0 cache entries now.
guard called with 1 args.
guard called with 1 args.
guard called with 1 args.
== always miss
calling the 1-th function: __main__.f
the function has 0 cache entries now.
calling the 2-th function: __main__.g
the function has 0 cache entries now.
guard called with 1 args.
calling the 3-th function: __main__.f
the function has 1 cache entries now.
number of caches in the last call: 0
guard called with 1 args.
calling the 4-th function: __main__.g
the function has 1 cache entries now.
number of caches in the last call: 0
guard called with 1 args.
guard called with 1 args.
calling the 5-th function: __main__.f
the function has 2 cache entries now.
number of caches in the last call: 0
"""


def test_example_prints_what_seed_002_shows() -> None:
    result = run_example("eval_frame_mwe.py")
    assert result.returncode == 0, result.stderr
    assert result.stdout == EXPECTED_EXAMPLE


# -- cache entries, MRU, hooks, frame_state -------------------------------------------------------


def test_hit_moves_the_entry_to_the_head_and_fail_hook_sees_index_and_is_last() -> None:
    def f(x: int) -> int:
        return x * 10

    def make_guard(value: int) -> Callable[[dict[str, Any]], bool]:
        def guard(f_locals: dict[str, Any]) -> bool:
            return f_locals["x"] == value

        guard.value = value  # type: ignore[attr-defined]
        return guard

    def cb(frame: Any, entry: Any, state: Any) -> Any:
        if frame.f_code is not f.__code__:
            return None
        return ef.GuardedCode(code=f.__code__, check_fn=make_guard(frame.f_locals["x"]))

    codes_to_reset.append(f.__code__)
    failed: list[tuple[Any, ...]] = []
    ef.set_guard_fail_hook(lambda check_fn, code, f_locals, index, is_last: failed.append(
        (check_fn.value, code, dict(f_locals), index, is_last)))
    try:
        assert run_with(cb, f, 1) == 10
        assert run_with(cb, f, 2) == 20
        assert [e.check_fn.value for e in entries(f)] == [2, 1]
        assert failed == [(1, f.__code__, {"x": 2}, 0, True)]
        failed.clear()
        assert run_with(cb, f, 1) == 10  # hit on the second entry: it becomes the head
        assert [e.check_fn.value for e in entries(f)] == [1, 2]
        assert failed == [(2, f.__code__, {"x": 1}, 0, False)]
        failed.clear()
        assert run_with(cb, f, 3) == 30  # a miss after both guards failed
        assert failed == [(1, f.__code__, {"x": 3}, 0, False), (2, f.__code__, {"x": 3}, 1, True)]
        head = entries(f)[0]
        assert head.check_fn.value == 3 and head.next is not None and head.next.next.next is None
    finally:
        ef.set_guard_fail_hook(None)


def test_frame_state_is_one_dict_per_code_object_until_reset() -> None:
    def f(x: int) -> int:
        return x

    states: list[dict[str, Any]] = []

    def cb(frame: Any, entry: Any, state: dict[str, Any]) -> Any:
        if frame.f_code is not f.__code__:
            return None
        states.append(state)
        state["calls"] = state.get("calls", 0) + 1
        return ef.GuardedCode(code=f.__code__, check_fn=lambda f_locals: False)

    codes_to_reset.append(f.__code__)
    for i in range(3):
        run_with(cb, f, i)
    assert states[0] is states[1] is states[2] and states[0]["calls"] == 3
    ef.reset_code(f.__code__)
    run_with(cb, f, 0)
    assert states[3] is not states[0] and states[3] == {"calls": 1}


def test_run_only_mode_runs_cached_code_and_never_calls_back() -> None:
    def f(x: int) -> int:
        return x + 1

    def f_plus_100(x: int) -> int:
        return x + 100

    def uncached(x: int) -> int:
        return x - 1

    cb = Cacher(f, guard=lambda f_locals: f_locals["x"] > 0, replace={f.__code__: f_plus_100.__code__})
    assert run_with(cb, f, 1) == 101
    live = _core._eval_frame_debug()["live_states"]
    assert run_with(False, f, 5) == 105  # hit
    assert run_with(False, f, -5) == -4  # miss: the original runs
    assert run_with(False, uncached, 3) == 2
    assert cb.offers == ["f"]
    assert ef.cache_entries(uncached.__code__) == [] and not ef.is_skipped(uncached.__code__)
    assert _core._eval_frame_debug()["live_states"] == live  # run-only creates no state


def test_skip_code_is_per_code_object_and_not_recursive() -> None:
    def inner(x: int) -> int:
        return x + 1

    def outer(x: int) -> int:
        return inner(x) * 2

    cb = Cacher(outer, inner)
    ef.skip_code(outer.__code__)
    assert ef.is_skipped(outer.__code__)
    assert run_with(cb, outer, 1) == 4
    assert cb.offers == ["inner"]  # outer runs as usual, its callee is still offered
    ef.reset_code(outer.__code__)
    assert not ef.is_skipped(outer.__code__)
    assert run_with(cb, outer, 1) == 4
    assert cb.offers == ["inner", "outer"]


def test_reset_code_drops_entries_frame_state_and_skip_mark() -> None:
    def f(x: int) -> int:
        return x

    cb = Cacher(f)
    run_with(cb, f, 1)
    kept = entries(f)[0]
    assert kept.code is f.__code__ and kept.check_fn is cb.guard
    ef.skip_code(f.__code__)
    ef.reset_code(f.__code__)
    assert entries(f) == [] and not ef.is_skipped(f.__code__)
    # An entry kept by the user no longer holds anything.
    assert kept.code is None and kept.check_fn is None and kept.next is None
    assert "dropped" in repr(kept)
    run_with(cb, f, 1)
    assert cb.offers == ["f", "f"]


# -- the Frame -----------------------------------------------------------------------------------


def test_frame_exposes_code_locals_globals_builtins_lasti_lineno_back() -> None:
    seen: dict[str, Any] = {}
    captured: list[Any] = []
    outside = 10

    def f(a: int, b: int = 2, *rest: int, c: int, **kw: int) -> int:
        def use_a() -> int:
            return a  # a is a cell argument

        return a + b + c + outside + use_a()

    def cb(frame: ef.Frame, entry: Any, state: Any) -> Any:
        if frame.f_code is not f.__code__:
            return None
        captured.append(frame)
        seen.update(
            code=frame.f_code,
            locals=frame.f_locals,
            same_locals=frame.f_locals is frame.f_locals,
            globals=frame.f_globals,
            builtins=frame.f_builtins,
            lasti=frame.f_lasti,
            lineno=frame.f_lineno,
            back=frame.f_back,
            module=inspect.getmodule(frame),
            repr=repr(frame),
        )
        return None

    codes_to_reset.append(f.__code__)
    assert run_with(cb, f, 1, 5, 6, c=3, d=4) == 1 + 5 + 3 + 10 + 1
    assert seen["code"] is f.__code__
    assert seen["locals"] == {"a": 1, "b": 5, "c": 3, "rest": (6,), "kw": {"d": 4}, "outside": 10}
    assert seen["same_locals"]
    assert seen["globals"] is globals()
    assert seen["builtins"]["len"] is len
    assert seen["lasti"] == -1
    assert seen["lineno"] == f.__code__.co_firstlineno
    assert seen["back"].f_code is run_with.__code__
    assert seen["module"] is sys.modules[__name__]
    assert "Frame of f" in seen["repr"]
    # Kept after the callback returned: every attribute fails cleanly.
    frame = captured[0]
    for name in ("f_code", "f_locals", "f_globals", "f_builtins", "f_lasti", "f_lineno", "f_back"):
        with pytest.raises(RuntimeError, match="used after the eval_frame callback"):
            getattr(frame, name)
    with pytest.raises(RuntimeError):
        inspect.getmodule(frame)
    assert "expired" in repr(frame)


def test_guards_get_a_mapping_that_stays_readable_when_kept() -> None:
    from collections.abc import Mapping, MutableMapping

    seen: list[Any] = []
    z = 7

    def f(x: int, *, y: int = 2) -> int:
        return x + y + z

    def guard(f_locals: Any) -> bool:
        seen.append(f_locals)
        if f_locals["y"] != 2:
            return True
        assert isinstance(f_locals, Mapping) and isinstance(f_locals, ef.FrameLocals)
        assert isinstance(f_locals, MutableMapping)
        assert f_locals["x"] == 1 and f_locals.get("y") == 2 and f_locals["z"] == 7
        assert f_locals.get("missing") is None and f_locals.get("missing", 5) == 5
        assert "x" in f_locals and "missing" not in f_locals and len(f_locals) == 3
        assert sorted(f_locals) == ["x", "y", "z"] and sorted(f_locals.keys()) == ["x", "y", "z"]
        assert dict(f_locals.items()) == {"x": 1, "y": 2, "z": 7} == f_locals
        assert sorted(f_locals.values()) == [1, 2, 7] and f_locals.copy() == dict(f_locals)
        name = "".join(["x"])  # an equal string that is not the interned name
        assert f_locals[name] == 1
        with pytest.raises(KeyError):
            f_locals["missing"]
        with pytest.raises(TypeError):
            f_locals[["unhashable"]]
        return True

    cb = Cacher(f, guard=guard)
    run_with(cb, f, 1)  # cached
    assert run_with(cb, f, 1) == 10
    assert run_with(cb, f, 1, y=5) == 13
    # Kept past their lookup, the views kept the values they showed.
    assert [dict(v) for v in seen] == [{"x": 1, "y": 2, "z": 7}, {"x": 1, "y": 5, "z": 7}]
    assert seen[0] is not seen[1] and "FrameLocals({" in repr(seen[0])


def test_frame_of_a_call_from_c_has_no_back_frame_of_its_own() -> None:
    backs: list[Any] = []

    def f(x: int) -> int:
        return x

    def cb(frame: ef.Frame, entry: Any, state: Any) -> None:
        if frame.f_code is f.__code__:
            backs.append(frame.f_back)
        return None

    codes_to_reset.append(f.__code__)

    def via_map() -> list[int]:
        return list(map(f, [1]))  # called from C (map), whose caller is via_map

    codes_to_reset.append(via_map.__code__)
    assert run_with(cb, via_map) == [1]
    assert backs[0].f_code is via_map.__code__


# -- Cache Lookup events (seed 000) --------------------------------------------------------------


def lookup_events(prof: framescope.profile) -> list[framescope.Event]:
    return [e for e in prof.events() if e.name == "Cache Lookup"]


@pytest.mark.parametrize("with_stack", [True, False], ids=["tracer", "ranges_only"])
def test_profiler_cache_lookup(with_stack: bool) -> None:
    """Seed 000's test: exactly one Cache Lookup event for one call of a cached function."""

    def fn(x: int) -> int:
        y = x**2
        y = y + 2
        z = y**3
        return z

    cb = Cacher(fn)
    ref = fn(3)
    run_with(cb, fn, 3)  # warm-up: compiles (here: caches) fn
    with framescope.profile(with_stack=with_stack) as prof:
        res = run_with(cb, fn, 3)
    events = lookup_events(prof)
    assert res == ref
    assert len(events) == 1, "Expected one lookup profiler event for one fn run"
    assert events[0].duration_ns >= 0 and events[0].category == "cpu_op"

    with framescope.profile(with_stack=with_stack) as prof:
        for _ in range(5):
            run_with(cb, fn, 3)
        run_with(False, fn, 3)  # run-only mode looks up too
        run_with(None, fn, 3)  # no callback: no lookup
    assert len(lookup_events(prof)) == 6
    assert cb.offers == ["fn"]


def test_no_cache_lookup_event_without_session_or_callback() -> None:
    def fn(x: int) -> int:
        return x

    cb = Cacher(fn)
    for _ in range(3):
        run_with(cb, fn, 1)  # lookups outside any session record nothing
    with framescope.profile() as prof:
        fn(1)
        ef.skip_code(fn.__code__)
        run_with(cb, fn, 1)  # skipped code: no lookup
    assert lookup_events(prof) == []


def test_tracer_keeps_recording_while_callbacks_are_set() -> None:
    def target(x: int) -> int:
        return x + 1

    def target_transformed(x: int) -> int:
        return x + 1000

    def plain(x: int) -> int:
        return x - 1

    def guard_of_target(f_locals: dict[str, Any]) -> bool:
        return True

    def outer() -> int:
        return target(1) + target(2) + plain(3)

    cb = Cacher(target, guard=guard_of_target, replace={target.__code__: target_transformed.__code__})
    codes_to_reset.extend([outer.__code__, plain.__code__])
    with framescope.profile(with_stack=True) as prof:
        assert run_with(cb, outer) == 1001 + 1002 + 2
    names = [e.name for e in prof.events()]

    def count(suffix: str) -> int:
        return sum(1 for n in names if n.endswith(suffix))

    assert count("outer") == 1
    assert count("target_transformed") == 2  # the cached code ran, twice, as a traced frame
    assert count("guard_of_target") == 1  # the second call's guard
    assert count("__call__") >= 1  # the callback (Cacher.__call__) ran traced too
    assert count("plain") == 1
    assert len(lookup_events(prof)) == 4  # outer, target x2, plain
    by_index = list(prof.events())
    for e in lookup_events(prof):
        assert e.parent is not None
        assert by_index[e.parent].name.endswith(("outer", "run_with"))


# -- threads -------------------------------------------------------------------------------------


def test_a_callback_set_on_one_thread_never_intercepts_another() -> None:
    def f(x: int) -> int:
        return x + 1

    cb = Cacher(f)
    results: list[int] = []
    ready = threading.Event()
    go = threading.Event()

    def other() -> None:
        ready.set()
        go.wait()
        results.extend(f(i) for i in range(3))

    t = threading.Thread(target=other)
    t.start()
    ready.wait()
    prior = ef.set_eval_frame(cb)
    try:
        go.set()
        t.join()
        f(0)
    finally:
        ef.set_eval_frame(prior)
    assert results == [1, 2, 3]
    assert cb.offers == ["f"]  # only this thread's call


def test_a_thread_that_exits_with_a_callback_set_gives_the_hook_back() -> None:
    def f(x: int) -> int:
        return x * 3

    cb = Cacher(f)
    out: list[Any] = []

    def worker() -> None:
        ef.set_eval_frame(cb)
        out.append(f(2))
        out.append(_core._eval_frame_debug()["enabled_threads"])

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert out == [6, 1] and cb.offers == ["f"]
    debug = _core._eval_frame_debug()
    assert debug["enabled_threads"] == 0 and not debug["hook_installed"]
