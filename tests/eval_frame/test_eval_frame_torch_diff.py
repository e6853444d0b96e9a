"""Differential test: torch's raw frame-evaluation layer (torch._C._dynamo.eval_frame) and
framescope.eval_frame, driven by the same hand-written callbacks, must behave the same: the same
callback calls (with the same f_locals and cache_entry), guard calls, hits, misses, skips and
run-only runs, in the same order.

torch keys entries by backend (a hand-written callback is its own backend) and counts a guard that
raises as a failed guard: framescope is driven with the matching settings, set_eval_frame(callback,
isolate=True) and, where guards raise, guard_errors="fail". Needs torch (installed in the 3.11 test
venv only); skipped elsewhere. Where framescope differs from torch on purpose (docs/eval_frame.md,
"Differences from torch"), the scenario is not here.
"""

from __future__ import annotations

import itertools
from types import CodeType
from typing import Any, Callable, Iterator

import pytest

from framescope import eval_frame as ef
from tests.support.eval_frame_support import clean_eval_frame_state

torch = pytest.importorskip("torch")
pytest.importorskip("torch._C._dynamo.eval_frame")

from tests.support.eval_frame_raw_apis import FramescopeAPI, Strategy, TorchAPI  # noqa: E402

LOG: list[tuple[Any, ...]] = []


@pytest.fixture(autouse=True)
def clean_thread() -> Iterator[None]:
    yield from clean_eval_frame_state()


# -- the functions the scenarios call --------------------------------------------------------------


def g(x: int) -> int:
    LOG.append(("run", "g", x))
    return x


def f(x: int) -> int:
    LOG.append(("run", "f", x))
    return g(x) + 1


def h(x: int) -> int:
    LOG.append(("run", "h", x))
    return f(x) * 2


def f_v1(x: int) -> int:  # replacement codes for f: same arguments
    LOG.append(("run", "f_v1", x))
    return g(x) + 1


def f_v2(x: int) -> int:
    LOG.append(("run", "f_v2", x))
    return g(x) + 1


CURRENT_API: list[Any] = []


def seen_callback(api: Any) -> str:
    cb = api.get_eval_frame_callback()
    return "None" if cb is None else "False" if cb is False else "callback"


def probe(x: int) -> int:
    LOG.append(("probe sees", x, seen_callback(CURRENT_API[0])))
    return x


def calls_probe(x: int) -> int:
    LOG.append(("run", "calls_probe", x))
    return probe(x)


def make_shapes() -> tuple[Callable[..., Any], Callable[..., Any]]:
    outside = 10
    unused = 11

    def shaped(a: int, b: int = 2, /, c: int = 3, *rest: int, d: int, e: int = 5, **kw: int) -> int:
        def uses_a() -> int:
            return a  # a is a cell argument

        LOG.append(("run", "shaped", a))
        return a + outside + uses_a()

    def plain_closure(x: int) -> int:
        LOG.append(("run", "plain_closure", x))
        return x + outside + unused

    return shaped, plain_closure


shaped, plain_closure = make_shapes()

NAMED = (f, g, h, f_v1, f_v2, shaped, plain_closure, probe, calls_probe)
NAMES = {fn.__code__: fn.__name__ for fn in NAMED}
TARGETS = [fn.__code__ for fn in NAMED]


def label(entry: Any) -> str | None:
    """A cache entry as the code it runs (the scenarios cache distinct codes)."""
    return None if entry is None else NAMES.get(entry.code, "?")


def guard(name: str, cond: Callable[[Any], bool] = lambda f_locals: True) -> Callable[[Any], bool]:
    def check(f_locals: Any) -> bool:
        LOG.append(("guard", name, f_locals["x"] if "x" in f_locals else None))
        return cond(f_locals)

    return check


Decide = Callable[[Any, str, Any, Any, dict[str, Any]], Any]


def run(api: Any, decide: Decide, calls: list[Callable[[], Any]], offered: set[CodeType]) -> None:
    """Sets a callback that logs each offer of a target and returns decide(api, name, frame, ...)
    (anything else is skipped), makes the calls, logs exceptions, and restores the callback."""

    def callback(frame: Any, cache_entry: Any, frame_state: dict[str, Any]) -> Any:
        offered.add(frame.f_code)
        name = NAMES.get(frame.f_code)
        if name is None:
            return api.skip()
        LOG.append(("cb", name, tuple(frame.f_locals.items()), label(cache_entry)))
        return decide(api, name, frame, cache_entry, frame_state)

    prior = api.set_eval_frame(callback)
    try:
        for call in calls:
            try:
                LOG.append(("result", call()))
            except Exception as e:  # noqa: BLE001 - the exception's type is what is compared
                LOG.append(("exc", type(e).__name__))
    finally:
        api.set_eval_frame(prior)


def run_only(api: Any, calls: list[Callable[[], Any]]) -> None:
    prior = api.set_eval_frame(False)
    try:
        for call in calls:
            LOG.append(("result", call()))
    finally:
        api.set_eval_frame(prior)


Scenario = Callable[[Any, set[CodeType]], None]
SCENARIOS: dict[str, Scenario] = {}


def scenario(fn: Scenario) -> Scenario:
    SCENARIOS[fn.__name__] = fn
    return fn


def cache_own(api: Any, name: str, frame: Any, *rest: Any) -> Any:
    return api.cache(frame.f_code, guard(name))


def cache_for_x(api: Any, name: str, frame: Any, *rest: Any) -> Any:
    x = frame.f_locals["x"]
    return api.cache(frame.f_code, guard(name, lambda f_locals: f_locals["x"] == x))


# -- seed 002: always skip / hit / miss --------------------------------------------------------------


def five_calls() -> int:
    x = 1
    x = f(x)
    x = g(x)
    x = f(x)
    x = g(x)
    x = f(x)
    return x


@scenario
def seed_always_skip(api: Any, offered: set[CodeType]) -> None:
    run(api, lambda api, *a: api.skip(), [five_calls], offered)


@scenario
def seed_always_hit(api: Any, offered: set[CodeType]) -> None:
    run(api, cache_own, [five_calls], offered)


@scenario
def seed_always_miss(api: Any, offered: set[CodeType]) -> None:
    def decide(api: Any, name: str, frame: Any, *rest: Any) -> Any:
        return api.cache(frame.f_code, guard(name, lambda f_locals: False))

    run(api, decide, [five_calls], offered)


# -- exec strategies -----------------------------------------------------------------------------


@scenario
def skip_recursive_applied_to_code(api: Any, offered: set[CodeType]) -> None:
    """torch._dynamo.disable(recursive=True): f and everything it calls run as usual, now and
    on later calls; g called directly is still offered."""

    def decide(api: Any, name: str, frame: Any, *rest: Any) -> Any:
        if name == "f":
            return api.strategy(api.A.SKIP, api.A.SKIP)
        return cache_own(api, name, frame)

    run(api, decide, [lambda: g(0), lambda: f(1), lambda: f(2), lambda: h(3), lambda: g(4)], offered)


@scenario
def skip_this_call_only(api: Any, offered: set[CodeType]) -> None:
    """SKIP with apply_to_code=False: f runs as usual this once and is offered again next call."""

    def decide(api: Any, name: str, frame: Any, *rest: Any) -> Any:
        if name == "f":
            return api.strategy(api.A.SKIP, api.A.DEFAULT, apply_to_code=False)
        return cache_for_x(api, name, frame)

    run(api, decide, [lambda: f(1), lambda: f(2), lambda: f(1)], offered)


@scenario
def skip_recursive_this_call_only(api: Any, offered: set[CodeType]) -> None:
    def decide(api: Any, name: str, frame: Any, *rest: Any) -> Any:
        if name == "f":
            return api.strategy(api.A.SKIP, api.A.SKIP, apply_to_code=False)
        return cache_own(api, name, frame)

    run(api, decide, [lambda: f(1), lambda: f(2), lambda: g(3)], offered)


@scenario
def run_only_for_callees_with_cached_code(api: Any, offered: set[CodeType]) -> None:
    """f caches its code with recursive RUN_ONLY: g's hits run its cached code, g's misses run
    the original, and g is never offered under f."""

    def decide(api: Any, name: str, frame: Any, *rest: Any) -> Any:
        if name == "g":
            return cache_for_x(api, name, frame)
        return api.cache(frame.f_code, guard(name), Strategy(api.A.DEFAULT, api.A.RUN_ONLY))

    run(api, decide, [lambda: g(1), lambda: f(1), lambda: f(2), lambda: f(2), lambda: g(2)], offered)


@scenario
def skip_with_run_only_callees(api: Any, offered: set[CodeType]) -> None:
    def decide(api: Any, name: str, frame: Any, *rest: Any) -> Any:
        if name == "g":
            return cache_for_x(api, name, frame)
        if name == "f":
            return api.strategy(api.A.SKIP, api.A.RUN_ONLY)
        return api.skip()

    run(api, decide, [lambda: g(1), lambda: f(1), lambda: f(2), lambda: h(1), lambda: h(3)], offered)


@scenario
def run_only_code_with_cached_code(api: Any, offered: set[CodeType]) -> None:
    """(RUN_ONLY, DEFAULT) with code: later calls of f hit or run the original, never call back."""

    def decide(api: Any, name: str, frame: Any, *rest: Any) -> Any:
        if name == "f":
            x = frame.f_locals["x"]
            return api.cache(
                f_v1.__code__,
                guard(name, lambda f_locals: f_locals["x"] == x),
                Strategy(api.A.RUN_ONLY, api.A.DEFAULT),
            )
        return api.skip()

    run(api, decide, [lambda: f(1), lambda: f(2), lambda: f(1)], offered)


@scenario
def stored_recursive_action_wins_over_the_callbacks(api: Any, offered: set[CodeType]) -> None:
    """A stored recursive action overrides the callback's for this call; the callback's decision
    is then stored for the next calls."""
    api.set_code_exec_strategy(f.__code__, api.A.DEFAULT, api.A.SKIP)
    offered.add(f.__code__)

    def decide(api: Any, name: str, frame: Any, *rest: Any) -> Any:
        if name == "f":
            x = frame.f_locals["x"]
            return api.cache(
                frame.f_code,
                guard(name, lambda f_locals: f_locals["x"] == x),
                Strategy(api.A.DEFAULT, api.A.RUN_ONLY),
            )
        return cache_for_x(api, name, frame)

    run(api, decide, [lambda: f(1), lambda: g(2), lambda: f(2), lambda: f(3)], offered)


@scenario
def set_code_exec_strategy_before_calls(api: Any, offered: set[CodeType]) -> None:
    offered.update(TARGETS)
    run(api, cache_for_x, [lambda: g(1)], offered)
    api.set_code_exec_strategy(f.__code__, api.A.SKIP, api.A.SKIP)
    run(api, cache_for_x, [lambda: f(1), lambda: h(1)], offered)
    api.set_code_exec_strategy(f.__code__, api.A.DEFAULT, api.A.RUN_ONLY)
    run(api, cache_for_x, [lambda: f(1), lambda: f(2)], offered)
    api.set_code_exec_strategy(f.__code__, api.A.RUN_ONLY, api.A.DEFAULT)
    run(api, cache_for_x, [lambda: f(1), lambda: f(5), lambda: f(2)], offered)
    api.reset_code(f.__code__)
    run(api, cache_for_x, [lambda: f(5)], offered)


@scenario
def nested_strategies(api: Any, offered: set[CodeType]) -> None:
    def decide(api: Any, name: str, frame: Any, *rest: Any) -> Any:
        if name == "h":
            return api.cache(frame.f_code, guard(name), Strategy(api.A.DEFAULT, api.A.RUN_ONLY))
        if name == "f":
            return api.strategy(api.A.DEFAULT, api.A.SKIP)
        return cache_for_x(api, name, frame)

    run(api, decide, [lambda: f(1), lambda: g(1), lambda: h(1), lambda: f(2), lambda: h(2)], offered)


# -- run-only mode, MRU order, cache_entry, frame_state ---------------------------------------------


@scenario
def run_only_mode(api: Any, offered: set[CodeType]) -> None:
    def decide(api: Any, name: str, frame: Any, *rest: Any) -> Any:
        if name == "f":
            x = frame.f_locals["x"]
            return api.cache(f_v1.__code__, guard(name, lambda f_locals: f_locals["x"] == x))
        return api.skip()

    run(api, decide, [lambda: f(1)], offered)
    run_only(api, [lambda: f(1), lambda: f(2), lambda: h(1)])
    LOG.append(("entries", [NAMES[c] for c in api.entry_codes(f.__code__)]))


@scenario
def hit_moves_to_front_and_callback_gets_the_head(api: Any, offered: set[CodeType]) -> None:
    replacements = {1: f_v1.__code__, 2: f_v2.__code__, 3: f.__code__}

    def decide(api: Any, name: str, frame: Any, *rest: Any) -> Any:
        if name != "f":
            return api.skip()
        x = frame.f_locals["x"]
        return api.cache(replacements[x], guard(name, lambda f_locals: f_locals["x"] == x))

    calls: list[Callable[[], Any]] = [lambda: f(1), lambda: f(2), lambda: f(1), lambda: f(3)]
    calls += [lambda: f(2), lambda: f(1)]
    run(api, decide, calls, offered)
    LOG.append(("entries", [NAMES[c] for c in api.entry_codes(f.__code__)]))


@scenario
def frame_state_persists_per_code(api: Any, offered: set[CodeType]) -> None:
    def decide(api: Any, name: str, frame: Any, entry: Any, state: dict[str, Any]) -> Any:
        state["n"] = state.get("n", 0) + 1
        LOG.append(("frame_state", name, state["n"]))
        return api.cache(frame.f_code, guard(name, lambda f_locals: False))

    run(api, decide, [lambda: f(1), lambda: f(2), lambda: g(3)], offered)


@scenario
def reset_code_between_calls(api: Any, offered: set[CodeType]) -> None:
    run(api, cache_own, [lambda: f(1), lambda: f(1)], offered)
    api.reset_code(f.__code__)
    run(api, cache_own, [lambda: f(1), lambda: f(1)], offered)


# -- f_locals, closure ------------------------------------------------------------------------------


@scenario
def frame_locals_and_closure(api: Any, offered: set[CodeType]) -> None:
    def decide(api: Any, name: str, frame: Any, *rest: Any) -> Any:
        LOG.append(("closure", name, tuple(c.cell_contents for c in frame.closure)))
        LOG.append(("locals_order", name, list(frame.f_locals)))
        return api.skip()

    run(api, decide, [lambda: shaped(1, 2, 3, 4, 5, d=6, z=7), lambda: shaped(1, d=0)], offered)
    api.reset_code(shaped.__code__)
    run(api, decide, [lambda: plain_closure(2), lambda: f(3)], offered)


# -- process-wide hooks, get_eval_frame_callback ----------------------------------------------------


@scenario
def guard_complete_hook(api: Any, offered: set[CodeType]) -> None:
    # Booleans only: torch aborts the process when the hook returns anything else (or raises).
    answers = itertools.cycle([True, False, True, True, False])

    def complete(cache_hit: bool) -> Any:
        answer = next(answers)
        LOG.append(("complete", cache_hit, answer))
        return answer

    prior = api.set_guard_complete_hook(complete)
    try:
        run(api, cache_for_x, [lambda: f(1), lambda: f(1), lambda: f(1), lambda: f(2)], offered)
        run_only(api, [lambda: f(1), lambda: f(9)])
    finally:
        LOG.append(("prior hook", api.set_guard_complete_hook(prior) is complete))


@scenario
def callback_seen_inside_callbacks_guards_and_callees(api: Any, offered: set[CodeType]) -> None:
    CURRENT_API[:] = [api]

    def decide(api: Any, name: str, frame: Any, *rest: Any) -> Any:
        LOG.append(("in callback", seen_callback(api)))

        def check(f_locals: Any) -> bool:
            LOG.append(("in guard", seen_callback(api)))
            return True

        if name == "calls_probe":
            x = frame.f_locals["x"]
            if x == 1:
                return api.cache(frame.f_code, check, Strategy(api.A.DEFAULT, api.A.RUN_ONLY))
            if x == 2:
                return api.strategy(api.A.DEFAULT, api.A.SKIP, apply_to_code=False)
            return api.strategy(api.A.DEFAULT, api.A.DEFAULT, apply_to_code=False)
        return api.skip()

    calls: list[Callable[[], Any]] = [lambda: calls_probe(1), lambda: calls_probe(1)]
    run(api, decide, calls, offered)
    api.reset_code(calls_probe.__code__)
    run(api, decide, [lambda: calls_probe(2), lambda: calls_probe(3), lambda: probe(4)], offered)
    LOG.append(("after", seen_callback(api)))


# -- settings that torch has implicitly: isolation per backend, guard errors as failures ----------


@scenario
def isolation_per_callback(api: Any, offered: set[CodeType]) -> None:
    """torch keys entries by backend (the callback): entries made under one callback are not hit
    under another. framescope: set_eval_frame(callback, isolate=True) (as every scenario here)."""

    def make(tag: str) -> Decide:
        def decide(api: Any, name: str, frame: Any, *rest: Any) -> Any:
            LOG.append(("decided by", tag))
            code = f_v1.__code__ if tag == "one" else f_v2.__code__
            return api.cache(code, guard(name)) if name == "f" else api.skip()

        return decide

    one, two = make("one"), make("two")
    run(api, one, [lambda: f(1)], offered)
    run(api, two, [lambda: f(2)], offered)
    run(api, one, [lambda: f(3)], offered)
    run(api, two, [lambda: f(4)], offered)
    run_only(api, [lambda: f(5)])
    LOG.append(("entries", [NAMES[c] for c in api.entry_codes(f.__code__)]))


@scenario
def guard_errors_count_as_failures(api: Any, offered: set[CodeType]) -> None:
    """torch: a guard that raises is a guard that failed. framescope: guard_errors="fail"."""
    if isinstance(api, FramescopeAPI):
        api.guard_errors = "fail"

    def decide(api: Any, name: str, frame: Any, *rest: Any) -> Any:
        x = frame.f_locals["x"]

        def check(f_locals: Any) -> bool:
            LOG.append(("guard", name, f_locals["x"]))
            if f_locals["x"] < 0:
                raise ValueError("negative")
            return bool(f_locals["x"] == x)

        return api.cache(frame.f_code, check) if name == "f" else api.skip()

    run(api, decide, [lambda: f(1), lambda: f(-1), lambda: f(1), lambda: f(-1)], offered)


# -- the test -----------------------------------------------------------------------------------------


def behaviour(api: Any, name: str) -> list[tuple[Any, ...]]:
    LOG.clear()
    offered: set[CodeType] = set()
    try:
        SCENARIOS[name](api, offered)
        return list(LOG)
    finally:
        for code in offered | set(TARGETS):
            api.reset_code(code)
        LOG.clear()


@pytest.fixture(scope="module")
def torch_api() -> TorchAPI:
    return TorchAPI()


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_framescope_behaves_as_torchs_raw_layer(torch_api: TorchAPI, name: str) -> None:
    expected = behaviour(torch_api, name)
    got = behaviour(FramescopeAPI(), name)
    assert got == expected
    assert any(event[0] == "cb" for event in expected)  # the scenario did reach the callback
