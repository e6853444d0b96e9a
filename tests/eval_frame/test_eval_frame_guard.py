"""framescope.eval_frame.Guard: a guard of declared checks on f_locals. Called on a mapping it
answers as its checks say; cached on a code object, an entry whose Guard runs no code decides its
hits from the frame (a program compiled for the code), which must agree with the Guard called on
f_locals for every kind of check, local and frame layout."""

from __future__ import annotations

import gc
import weakref
from typing import Any, Callable, Iterator

import pytest

import framescope
from framescope import _core
from framescope import eval_frame as ef
from tests.support.eval_frame_support import clean_eval_frame_state, codes_to_reset, run_with
from tests.support.subprocesses import run_example


@pytest.fixture(autouse=True)
def clean_thread() -> Iterator[None]:
    yield from clean_eval_frame_state()


class GuardCacher:
    """Caches each offered target's own code under a Guard that `make_guard` builds for the
    frame; records the f_locals of each offer (each miss)."""

    def __init__(self, fn: Callable[..., Any], make_guard: Callable[[ef.Frame], Any]) -> None:
        self.code = fn.__code__
        codes_to_reset.append(self.code)
        self.make_guard = make_guard
        self.offers: list[dict[str, Any]] = []

    def __call__(self, frame: ef.Frame, entry: Any, frame_state: Any) -> Any:
        if frame.f_code is not self.code:
            return None
        self.offers.append(dict(frame.f_locals))
        return ef.GuardedCode(code=frame.f_code, check_fn=self.make_guard(frame))


def int_guard(name: str = "x", value: Any = 1) -> ef.Guard:
    g = ef.Guard()
    g.local(name).type_is(type(value)).equals(value)
    return g


# ---- building and reading a Guard ----------------------------------------------------------------


def test_checks_read_as_python_in_the_order_they_run() -> None:
    g = ef.Guard()
    x = g.local("x").type_is(int).equals(3)
    assert g.local("x") is x  # the same name gives the same value
    g.local("y").is_none()
    cfg = g.local("cfg")
    cfg.attr("mode").equals("fast")
    cfg.item(0).len_is(2)
    g.local("z")
    assert g.checks == (
        "type(L['x']) is int",
        "L['x'] == 3",
        "L['y'] is None",
        "L['cfg'].mode == 'fast'",
        "len(L['cfg'][0]) == 2",
        "L['z'] exists",
    )
    assert repr(g).startswith("<Guard type(L['x']) is int, L['x'] == 3, ")
    assert cfg.attr("mode").source == "L['cfg'].mode"
    assert repr(cfg.item(0)) == "<GuardValue L['cfg'][0]>"


def test_a_guard_holds_when_every_check_holds() -> None:
    class Cfg:
        mode = "fast"

    g = ef.Guard()
    g.local("x").type_is(int).equals(3)
    g.local("cfg").attr("mode").equals("fast")
    g.local("xs").type_is(list).len_is(2).item(1).is_(None)
    good = {"x": 3, "cfg": Cfg(), "xs": [0, None]}
    assert g(good) is True and g.failure(good) is None
    cases = {
        "type(L['x']) is int: it is a float": {"x": 3.0},
        "L['x'] == 3: it is 4": {"x": 4},
        "L['x'] exists: not bound": {"x": None},
        "L['cfg'].mode exists: no such attribute": {"cfg": object()},
        "len(L['xs']) == 2: its length is 3": {"xs": [0, None, 1]},
        "L['xs'][1] is None: it is 5": {"xs": [0, 5]},
        "type(L['xs']) is list: it is a tuple": {"xs": (0, None)},
    }
    for why, change in cases.items():
        f_locals = {**good, **change}
        if change.get("x", 0) is None:
            del f_locals["x"]
        assert g(f_locals) is False
        assert g.failure(f_locals) == why


def test_equals_needs_the_constants_exact_type() -> None:
    g = ef.Guard()
    g.local("x").equals(1)
    assert g({"x": 1}) and not g({"x": 1.0}) and not g({"x": True})
    assert g.failure({"x": 1.0}) == "L['x'] == 1: it is 1.0, a float"


def test_missing_items_fail_and_other_errors_propagate() -> None:
    class Boom:
        @property
        def mode(self) -> str:
            raise ValueError("no mode here")

    g = ef.Guard()
    g.local("d").item("k").equals(1)
    assert g({"d": {"k": 1}}) and not g({"d": {}})  # KeyError
    g0 = ef.Guard()
    g0.local("d").item(0).equals(1)
    assert g0({"d": [1]}) and not g0({"d": []})  # IndexError
    with pytest.raises(TypeError, match="not subscriptable"):
        g({"d": 5})
    g2 = ef.Guard()
    g2.local("o").attr("mode").equals("x")
    with pytest.raises(ValueError, match="no mode here"):
        g2({"o": Boom()})


def test_satisfies_calls_its_predicate_with_the_value() -> None:
    seen: list[Any] = []

    def small(v: Any) -> bool:
        seen.append(v)
        return bool(v < 10)

    g = ef.Guard()
    g.local("n").type_is(int).satisfies(small)
    assert g({"n": 3}) and not g({"n": 30}) and seen == [3, 30]
    assert not g({"n": "a"}) and seen == [3, 30]  # the type check runs first
    assert g.checks[-1].endswith("small(L['n'])")
    assert not g.runs_no_code


@pytest.mark.parametrize(
    "build, no_code",
    [
        (lambda g: g.local("x").type_is(int).equals(7), True),
        (lambda g: g.local("x").is_(None), True),
        (lambda g: g.local("x").is_not_none().is_none(), True),
        (lambda g: g.local("x").equals("s").equals(b"b").equals(1.5).equals(2j), True),
        (lambda g: g.local("x").type_is(tuple).len_is(2), True),
        (lambda g: g.local("x"), True),
        (lambda g: g.local("x").len_is(2), False),  # len() of an unknown type may run code
        (lambda g: g.local("x").type_is(object).len_is(2), False),
        (lambda g: g.local("x").equals((1, 2)), False),  # a tuple compares its items
        (lambda g: g.local("x").attr("real"), False),  # attribute reads may run code
        (lambda g: g.local("x").item(0), False),
        (lambda g: g.local("x").satisfies(callable), False),
    ],
)
def test_runs_no_code(build: Callable[[ef.Guard], Any], no_code: bool) -> None:
    g = ef.Guard()
    build(g)
    assert g.runs_no_code is no_code


def test_bad_arguments_raise_clear_errors() -> None:
    g = ef.Guard()
    x = g.local("x")
    for call, exc, match in [
        (lambda: ef.Guard(1), TypeError, "takes no arguments"),  # type: ignore[call-arg]
        (lambda: g.local(3), TypeError, "local\\(\\) name must be a str, not int"),
        (lambda: x.type_is(3), TypeError, "type_is\\(\\) needs a type, not int"),
        (lambda: x.len_is(-1), ValueError, "needs a length >= 0"),
        (lambda: x.len_is("2"), TypeError, "len_is\\(\\) needs an int, not str"),
        (lambda: x.len_is(True), TypeError, "len_is\\(\\) needs an int, not bool"),
        (lambda: x.satisfies(3), TypeError, "satisfies\\(\\) needs a callable"),
        (lambda: x.attr(1), TypeError, "attr\\(\\) name must be a str"),
        (lambda: g(), TypeError, "one positional argument, f_locals"),  # type: ignore[call-arg]
        (lambda: g({}, {}), TypeError, "one positional argument"),  # type: ignore[call-arg]
        (lambda: g(f_locals={}), TypeError, "one positional argument"),  # type: ignore[call-arg]
        (lambda: g(5), TypeError, "f_locals must be a mapping, not int"),  # type: ignore[arg-type]
        (lambda: g.failure(5), TypeError, "f_locals must be a mapping"),  # type: ignore[arg-type]
        (lambda: ef.GuardValue(), TypeError, "cannot create"),  # type: ignore[call-arg]
    ]:
        with pytest.raises(exc, match=match):
            call()
    with pytest.raises(TypeError):

        class Sub(ef.Guard):  # type: ignore[misc]
            pass


def test_a_guard_given_to_guarded_code_is_frozen() -> None:
    def f(x: int) -> int:
        return x

    g = int_guard()
    v = g.local("x")
    assert not g.frozen
    ef.GuardedCode(f.__code__, g)
    assert g.frozen
    with pytest.raises(RuntimeError, match="can no longer change"):
        v.is_none()
    with pytest.raises(RuntimeError, match="can no longer change"):
        g.local("y")
    with pytest.raises(RuntimeError, match="can no longer change"):
        v.attr("real")
    assert g.local("x") is v  # reading what exists is fine
    assert g({"x": 1})


def test_a_guard_naming_what_f_locals_never_has_is_refused_when_cached() -> None:
    def f(x: int) -> int:
        return x

    g = ef.Guard()
    g.local("y").is_none()
    cb = GuardCacher(f, lambda frame: g)
    with pytest.raises(ValueError, match=r"Guard checks L\['y'\], but f_locals of f \(.*\) never"):
        run_with(cb, f, 1)
    assert ef.cache_entries(f.__code__) == []


# ---- cached: hits decided from the frame agree with the Guard on f_locals ----------------------

SENTINEL = ["a", "list"]
CASES: list[tuple[str, Callable[[ef.Guard], Any], list[Any]]] = [
    ("int", lambda g: g.local("x").type_is(int).equals(1), [1, 1, 2, 1, 1.0, True, 1, 10**30]),
    ("big_int", lambda g: g.local("x").type_is(int).equals(10**30), [10**30, 10**30 + 1, 10**30]),
    ("str", lambda g: g.local("x").equals("a" * 50), ["a" * 50, "b", "".join(["a"] * 50)]),
    ("float", lambda g: g.local("x").equals(0.5), [0.5, 1 / 2, 0.25, float("nan"), 0.5]),
    ("identity", lambda g: g.local("x").is_(SENTINEL), [SENTINEL, list(SENTINEL), SENTINEL]),
    ("none", lambda g: g.local("x").is_none(), [None, 0, None, ""]),
    ("not_none", lambda g: g.local("x").is_not_none().type_is(str), ["a", None, "b", 3]),
    ("length", lambda g: g.local("x").type_is(tuple).len_is(2), [(1, 2), (1,), (3, 4), [1, 2]]),
    ("bound", lambda g: g.local("x"), [0, None, 1]),
    ("tuple_eq", lambda g: g.local("x").equals((1, "a")), [(1, "a"), (1, "b"), (1, "a")]),
    ("attr", lambda g: g.local("x").attr("real").equals(2), [2, 2, 3, "s", 2]),
    ("item", lambda g: g.local("x").item(0).type_is(int), [[1], [], ["a"], [2], (3,)]),
    ("pred", lambda g: g.local("x").satisfies(lambda v: v == 4), [4, 4.0, 5, 4]),
]


def expected_offers(guard_builder: Callable[[ef.Guard], Any], values: list[Any]) -> int:
    """Offers of a code cached under one Guard each time: the first call, then every call on
    which the Guard does not hold (every entry has the same Guard)."""
    g = ef.Guard()
    guard_builder(g)
    return 1 + sum(1 for v in values[1:] if not g({"x": v}))


@pytest.mark.parametrize("name, build, values", CASES, ids=[c[0] for c in CASES])
def test_hits_agree_with_the_guard_on_f_locals(
    name: str, build: Callable[[ef.Guard], Any], values: list[Any]
) -> None:
    def f(x: Any) -> Any:
        return x

    def make(frame: ef.Frame) -> ef.Guard:
        g = ef.Guard()
        build(g)
        return g

    cb = GuardCacher(f, make)
    for v in values:
        assert run_with(cb, f, v) is v
    assert len(cb.offers) == expected_offers(build, values)
    assert [o["x"] for o in cb.offers][0] is values[0]


def test_locals_of_every_kind_are_read_from_the_frame() -> None:
    k = 5

    def f(a: int, *args: int, b: str = "s", c: Any = None, **kwargs: Any) -> Any:
        def inner() -> int:  # a is a cell: on 3.11+ its slot still holds the raw value
            return a

        return (a, args, b, c, kwargs, k, inner())

    def make(frame: ef.Frame) -> ef.Guard:
        g = ef.Guard()
        g.local("a").type_is(int).equals(1)
        g.local("args").type_is(tuple).len_is(1)
        g.local("b").equals("s")
        g.local("c").is_none()
        g.local("kwargs").type_is(dict).len_is(0)
        g.local("k").equals(5)  # a free variable
        return g

    cb = GuardCacher(f, make)
    assert make(None).runs_no_code  # type: ignore[arg-type]
    calls: list[tuple[tuple[Any, ...], dict[str, Any], bool]] = [
        ((1, 2), {}, True),  # the first call: a miss that caches
        ((1, 2), {}, True),
        ((1, 2), {"b": "t"}, False),
        ((1,), {}, False),
        ((1, 3), {"c": 0}, False),
        ((1, 3), {"z": 0}, False),
        ((2, 3), {}, False),
        ((1, 9), {}, True),
    ]
    offers = 0
    for args, kwargs, hit in calls:
        before = len(cb.offers)
        assert run_with(cb, f, *args, **kwargs)[0] == args[0]
        offers += len(cb.offers) - before
        if before:  # after the first call
            assert (len(cb.offers) == before) is hit, (args, kwargs)
    assert offers == 6


def test_a_free_variable_that_changes_is_seen() -> None:
    mode = "a"

    def f() -> str:
        return mode

    cb = GuardCacher(f, lambda frame: int_guard("mode", "a"))
    assert run_with(cb, f) == "a"
    assert run_with(cb, f) == "a"
    assert len(cb.offers) == 1
    mode = "b"
    assert run_with(cb, f) == "b"
    assert len(cb.offers) == 2


def test_the_fail_hook_gets_the_guard_and_its_failure() -> None:
    def f(x: Any) -> Any:
        return x

    failures: list[str | None] = []

    def hook(check_fn: Any, code: Any, f_locals: Any, index: int, is_last: bool) -> None:
        failures.append(check_fn.failure(f_locals))

    ef.set_guard_fail_hook(hook)
    cb = GuardCacher(f, lambda frame: int_guard())
    run_with(cb, f, 1)
    run_with(cb, f, 1)
    run_with(cb, f, 2.0)
    assert failures == ["type(L['x']) is int: it is a float"]


@pytest.mark.parametrize("errors", ["raise", "fail"])
def test_a_guard_that_raises_follows_guard_errors(errors: str) -> None:
    class Boom:
        @property
        def mode(self) -> str:
            raise ValueError("no mode here")

    def f(o: Any) -> Any:
        return o

    def make(frame: ef.Frame) -> ef.Guard:
        g = ef.Guard()
        g.local("o").attr("mode").equals("x")
        return g

    cb = GuardCacher(f, make)
    with ef.use_callback(cb, guard_errors=errors):  # type: ignore[arg-type]
        f(1)  # no attribute: the guard fails (no entry yet: cached)
        if errors == "raise":
            with pytest.raises(ValueError, match="no mode here"):
                f(Boom())
        else:
            assert isinstance(f(Boom()), Boom)
            assert len(cb.offers) == 2


def test_run_only_mode_and_isolation_hit_a_guard_entry() -> None:
    def f(x: Any) -> Any:
        return x

    cb = GuardCacher(f, lambda frame: int_guard())
    assert run_with(cb, f, 1) == 1
    assert run_with(False, f, 1) == 1  # run-only: a hit
    assert run_with(False, f, 2) == 2  # a miss runs the original code, no callback
    assert len(cb.offers) == 1
    with ef.use_callback(cb, isolate="other"):
        assert f(1) == 1  # the shared entry is not visible: cached again
    assert len(cb.offers) == 2


@pytest.mark.parametrize("with_stack", [True, False], ids=["tracer", "ranges_only"])
def test_guard_hits_record_one_cache_lookup_each(with_stack: bool) -> None:
    def f(x: Any) -> Any:
        return x

    cb = GuardCacher(f, lambda frame: int_guard(value=1000))
    run_with(cb, f, 1000)
    with framescope.profile(with_stack=with_stack) as prof:
        for _ in range(4):
            assert run_with(cb, f, 1000) == 1000  # equal, not identical: compared in C
        assert run_with(cb, f, 5) == 5  # a miss: still one lookup
    lookups = [e for e in prof.events() if e.name == "Cache Lookup"]
    assert len(lookups) == 5
    assert len(cb.offers) == 2


def test_a_dropped_entry_lets_go_of_what_its_guard_holds() -> None:
    class Token:
        pass

    def f(x: Any) -> Any:
        return x

    token = Token()
    gone = weakref.ref(token)

    def make(frame: ef.Frame) -> ef.Guard:
        g = ef.Guard()
        g.local("x").is_(token)
        return g

    cb = GuardCacher(f, make)
    assert run_with(cb, f, token) is token
    assert run_with(cb, f, token) is token
    assert len(cb.offers) == 1
    del token
    cb.offers.clear()  # the offers' f_locals held it too
    gc.collect()
    assert gone() is not None  # the entry's Guard (and its compiled program) hold it
    entries_before = _core._eval_frame_debug()["live_entries"]
    ef.reset_code(f.__code__)
    gc.collect()
    assert gone() is None
    assert _core._eval_frame_debug()["live_entries"] == entries_before - 1


def test_a_guard_in_a_reference_cycle_is_collected() -> None:
    class Holder:
        pass

    h = Holder()
    g = ef.Guard()
    g.local("x").is_(h)
    h.guard = g  # type: ignore[attr-defined]
    gone = weakref.ref(h)
    del h, g
    gc.collect()
    assert gone() is None


def test_a_guard_cannot_change_while_it_is_checked_or_described() -> None:
    g = ef.Guard()
    x = g.local("x")

    def adds_a_check(v: Any) -> bool:
        x.is_none()
        return True

    x.satisfies(adds_a_check)
    with pytest.raises(RuntimeError, match="while it is being checked or described"):
        g({"x": 1})

    class AddsALocal:
        def __repr__(self) -> str:
            g2.local("new")
            return "AddsALocal()"

    g2 = ef.Guard()
    g2.local("x").is_(AddsALocal())
    with pytest.raises(RuntimeError, match="while it is being checked or described"):
        g2.checks
    with pytest.raises(RuntimeError, match="while it is being checked or described"):
        g2.failure({"x": 1})
    x.is_not_none()  # afterwards, the guard can change again
    assert g.checks[-1] == "L['x'] is not None"


def test_a_guard_that_checks_itself_ends_in_recursion_error() -> None:
    g = ef.Guard()
    g.local("x").satisfies(g)
    d: dict[str, Any] = {}
    d["x"] = d
    with pytest.raises(RecursionError):
        g(d)


def test_attribute_and_item_of_one_name_are_different_values() -> None:
    g = ef.Guard()
    d = g.local("d")
    d.attr("mode").equals("fast")
    item = d.item("mode")
    assert item is not d.attr("mode") and item.source == "L['d']['mode']"
    item.equals("slow")
    assert g.checks == ("L['d'].mode == 'fast'", "L['d']['mode'] == 'slow'")


def test_reads_chain_a_bounded_number_of_levels() -> None:
    v = ef.Guard().local("x")
    for _ in range(64):
        v = v.attr("a")
    with pytest.raises(ValueError, match="at most 64 attributes or items deep"):
        v.item(0)
    with pytest.raises(ValueError, match="length is too large"):
        v.len_is(2**80)
    with pytest.raises(TypeError, match="takes no arguments"):
        ef.Guard.__init__(ef.Guard(), 1)  # type: ignore[call-arg]


def test_the_specializing_example_runs_each_version_and_says_why_others_missed() -> None:
    result = run_example("eval_frame_guard.py")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "results: [8.0, 8.0, 32.0, 8.0, 32.0, 1048576.0, 4.0, 2.0]"
    assert lines[1:5] == [
        "cached versions, most recently hit first:",
        "   type(L['n']) is int and L['n'] == 2",
        "   type(L['n']) is int and L['n'] == 5",
        "   type(L['n']) is int and L['n'] == 3",
    ]
    assert lines[5] == "why cached versions did not apply:"
    assert lines[6:9] == ["   L['n'] == 3: it is 5", "   L['n'] == 5: it is 3", "   L['n'] == 3: it is 5"]
    assert len(lines) == 16
