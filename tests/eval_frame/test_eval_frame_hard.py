"""framescope.eval_frame, the hard cases: re-entry, raising guards and callbacks, other code on the
frame (every argument layout, closures), generators and coroutines, deep recursion, chaining to
another PEP 523 hook, tracing, and freeing everything on reset_code or code death."""

from __future__ import annotations

import gc
import sys
import textwrap
import tracemalloc
import weakref
from pathlib import Path
from types import CodeType
from typing import Any, Callable, Iterator

import pytest

from framescope import _core
from framescope import eval_frame as ef
from tests.support.eval_frame_support import clean_eval_frame_state, codes_to_reset, run_with

LOG: list[str] = []
PY310 = sys.version_info < (3, 11)




class Cacher:
    """Caches the given codes (or their replacements) under `guard`; skips every other code."""

    def __init__(
        self,
        targets: dict[CodeType, CodeType | None],
        guard: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        self.targets = targets
        codes_to_reset.extend(targets)
        self.guard = guard or (lambda f_locals: True)
        self.offers: list[str] = []
        self.guard_calls = 0

    def counting_guard(self, f_locals: dict[str, Any]) -> Any:
        self.guard_calls += 1
        return self.guard(f_locals)

    def __call__(self, frame: ef.Frame, entry: Any, state: Any) -> Any:
        code = frame.f_code
        if code not in self.targets:
            return None
        self.offers.append(code.co_name)
        return ef.GuardedCode(code=self.targets[code] or code, check_fn=self.counting_guard)


def cache(*fns: Callable[..., Any], guard: Callable[[dict[str, Any]], Any] | None = None) -> Cacher:
    return Cacher({fn.__code__: None for fn in fns}, guard)


def replace(fn: Callable[..., Any], new: Callable[..., Any] | CodeType, guard: Any = None) -> Cacher:
    code = new if isinstance(new, CodeType) else new.__code__
    return Cacher({fn.__code__: code}, guard)


@pytest.fixture(autouse=True)
def clean_thread() -> Iterator[None]:
    yield from clean_eval_frame_state()


# -- no re-entry ---------------------------------------------------------------------------------


def test_guards_and_the_callback_run_with_the_callback_none() -> None:
    offered: list[int] = []

    def helper(x: int) -> int:
        return x

    def f(x: int) -> int:
        return x

    def guard(f_locals: dict[str, Any]) -> bool:
        helper(10)  # not intercepted
        return True

    def cb(frame: ef.Frame, entry: Any, state: Any) -> Any:
        if frame.f_code is f.__code__:
            helper(20)  # not intercepted
            return ef.GuardedCode(code=f.__code__, check_fn=guard)
        if frame.f_code is helper.__code__:
            offered.append(frame.f_locals["x"])
            return ef.GuardedCode(code=helper.__code__, check_fn=lambda f_locals: False)
        return None

    codes_to_reset.extend([f.__code__, helper.__code__])
    assert run_with(cb, f, 1) == 1  # miss: the callback calls helper
    assert run_with(cb, f, 2) == 2  # hit: the guard calls helper
    assert offered == []
    assert run_with(cb, helper, 3) == 3
    assert offered == [3]


def test_set_eval_frame_called_by_the_callback_takes_effect() -> None:
    got: list[Any] = []
    offers: list[int] = []

    def f(x: int) -> int:
        return x * 2

    def cb(frame: ef.Frame, entry: Any, state: Any) -> Any:
        if frame.f_code is not f.__code__:
            return None
        offers.append(frame.f_locals["x"])
        got.append(ef.set_eval_frame(False))  # this thread goes run-only
        return ef.GuardedCode(code=f.__code__, check_fn=lambda f_locals: f_locals["x"] == 1)

    codes_to_reset.append(f.__code__)
    prior = ef.set_eval_frame(cb)
    try:
        first = f(1)
        second = f(2)  # run-only: a miss runs the original, no callback
        third = f(1)  # run-only hit
    finally:
        after = ef.set_eval_frame(prior)
    assert (first, second, third) == (2, 4, 2)
    assert got == [None]  # the callback reads as None while it runs
    assert offers == [1]
    assert after is False


# -- raising guards and callbacks ----------------------------------------------------------------


def test_a_raising_guard_reaches_the_caller_without_running_the_body() -> None:
    ran: list[int] = []

    def f(x: int) -> int:
        ran.append(x)
        return x

    cb = cache(f, guard=lambda f_locals: 1 / f_locals["x"] > 0)
    assert run_with(cb, f, 1) == 1  # cached
    ran.clear()
    hook_calls: list[tuple[Any, ...]] = []
    ef.set_guard_error_hook(lambda *args: hook_calls.append(args))
    with pytest.raises(ZeroDivisionError):
        run_with(cb, f, 0)
    assert ran == []
    assert len(hook_calls) == 1
    check_fn, code, f_locals, index, is_last = hook_calls[0]
    assert check_fn == cb.counting_guard and code is f.__code__ and f_locals["x"] == 0
    assert (index, is_last) == (0, True)

    def raising_hook(*args: Any) -> None:
        raise KeyError("from the hook")

    ef.set_guard_error_hook(raising_hook)
    with pytest.raises(KeyError, match="from the hook") as info:
        run_with(cb, f, 0)
    assert isinstance(info.value.__context__, ZeroDivisionError)
    ef.set_guard_error_hook(None)
    with pytest.raises(ZeroDivisionError):
        run_with(cb, f, 0)
    assert ran == []
    assert run_with(cb, f, 4) == 4 and ran == [4]  # and everything still works
    assert cb.offers == ["f"]


def test_a_raising_fail_hook_propagates() -> None:
    def f(x: int) -> int:
        return x

    cb = cache(f, guard=lambda f_locals: False)
    run_with(cb, f, 1)

    def hook(*args: Any) -> None:
        raise LookupError("fail hook")

    ef.set_guard_fail_hook(hook)
    with pytest.raises(LookupError, match="fail hook"):
        run_with(cb, f, 1)
    assert len(ef.cache_entries(f.__code__)) == 1  # nothing added


def test_a_raising_callback_propagates_and_installs_nothing() -> None:
    ran: list[int] = []

    def f(x: int) -> int:
        ran.append(x)
        return x

    calls: list[int] = []

    def cb(frame: ef.Frame, entry: Any, state: Any) -> Any:
        if frame.f_code is not f.__code__:
            return None
        calls.append(1)
        state["partial"] = True
        raise RuntimeError("compile failed")

    codes_to_reset.append(f.__code__)
    prior = ef.set_eval_frame(cb)
    try:
        for _ in range(2):
            with pytest.raises(RuntimeError, match="compile failed"):
                f(1)
    finally:
        after = ef.set_eval_frame(prior)
    assert after is cb  # the thread keeps its callback
    assert calls == [1, 1]  # and the code is offered again: it was neither cached nor skipped
    assert ran == [] and ef.cache_entries(f.__code__) == [] and not ef.is_skipped(f.__code__)


# -- another code object on the frame ------------------------------------------------------------


def layout(a, b=2, /, c=3, *args, d, e=5, **kw):  # type: ignore[no-untyped-def]
    return ("orig", a, b, c, args, d, e, kw)


def layout_new(a, b=2, /, c=3, *args, d, e=5, **kw):  # type: ignore[no-untyped-def]
    return ("new", a, b, c, args, d, e, kw)


@pytest.mark.parametrize(
    "args, kwargs",
    [
        ((1,), {"d": 4}),
        ((1, 2, 3, 4, 5), {"d": 6, "z": 7}),
        ((1,), {"a": 9, "d": 1}),  # a positional-only name in **kw
        ((1, 2), {"c": 8, "e": 0, "d": 1}),
    ],
)
def test_other_code_runs_with_the_frame_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    cb = replace(layout, layout_new)
    expected = ("new",) + layout(*args, **kwargs)[1:]
    assert run_with(cb, layout, *args, **kwargs) == expected  # miss: the new entry runs
    assert run_with(cb, layout, *args, **kwargs) == expected  # hit
    assert cb.offers == ["layout"]


def cell_arg(x: int) -> int:
    def get() -> int:
        return x

    return get() + 1


def cell_arg_new(x: int) -> int:
    def get() -> int:
        return x

    return get() * 100


def make_closure(k: int) -> Callable[[int], int]:
    def closure(x: int) -> int:
        return x + k

    return closure


def make_closure_new(k: int) -> Callable[[int], int]:
    def closure(x: int) -> int:
        return x * k

    return closure


def make_nested(k: int) -> Callable[[int], Callable[[int], int]]:
    def mid(m: int) -> Callable[[int], int]:
        def nested(x: int) -> int:
            return x + k + m

        return nested

    return mid


def make_nested_new(k: int) -> Callable[[int], Callable[[int], int]]:
    def mid(m: int) -> Callable[[int], int]:
        def nested(x: int) -> int:
            return x * k * m

        return nested

    return mid


def test_other_code_with_a_cell_argument() -> None:
    cb = replace(cell_arg, cell_arg_new)
    assert run_with(cb, cell_arg, 7) == 700
    assert run_with(cb, cell_arg, 3) == 300


def test_closures_sharing_one_code_share_the_cache_and_guards_tell_them_apart() -> None:
    add2, add3 = make_closure(2), make_closure(3)
    assert add2.__code__ is add3.__code__
    new_code = make_closure_new(0).__code__

    def cb(frame: ef.Frame, entry: Any, state: Any) -> Any:
        if frame.f_code is not add2.__code__:
            return None
        k = frame.f_locals["k"]  # the free variable's value
        return ef.GuardedCode(code=new_code, check_fn=lambda f_locals: f_locals["k"] == k)

    codes_to_reset.append(add2.__code__)

    def calls() -> list[int]:
        return [add2(10), add3(10), add2(5), add3(5)]

    codes_to_reset.append(calls.__code__)
    assert run_with(cb, calls) == [20, 30, 10, 15]
    assert len(ef.cache_entries(add2.__code__)) == 2


def test_other_code_with_nested_closures() -> None:
    nested = make_nested(2)(3)
    new_code = make_nested_new(0)(0).__code__
    cb = replace(nested, new_code)
    assert run_with(cb, nested, 5) == 5 * 2 * 3
    other = make_nested(4)(5)  # same code, other cells
    assert run_with(cb, other, 5) == 5 * 4 * 5


class Counter:
    def __init__(self, value: int) -> None:
        self.value = value

    def method(self, x: int) -> int:
        return self.value + x


def method_new(self: Counter, x: int) -> int:
    return self.value * x


def test_other_code_for_a_method() -> None:
    c = Counter(6)
    cb = replace(Counter.method, method_new)
    assert run_with(cb, c.method, 7) == 42


def test_other_code_for_module_and_class_bodies() -> None:
    module_code = compile("result = a + 1", "<module>", "exec")
    module_new = compile("result = a + 100", "<module>", "exec")
    ns: dict[str, Any] = {"a": 1}
    cb = Cacher({module_code: module_new})
    run_with(cb, exec, module_code, ns)
    assert ns["result"] == 101

    def make_class() -> type:
        class K:
            value = 1

        return K

    def make_class_new() -> type:
        class K:
            value = 2

        return K

    def body(fn: Callable[..., Any]) -> CodeType:
        return next(c for c in fn.__code__.co_consts if isinstance(c, CodeType) and c.co_name == "K")

    cb = Cacher({body(make_class): body(make_class_new)})
    assert run_with(cb, make_class).value == 2
    ef.reset_code(make_class.__code__)


def wrong_names(y: int) -> int:
    return y


def wrong_count(x: int, y: int = 0) -> int:
    return x


def wrong_free() -> Callable[[int], int]:
    z = 1

    def f(x: int) -> int:
        return x + z

    return f


RAN: list[int] = []


def layout_target(x: int) -> int:
    RAN.append(x)
    return x


@pytest.mark.parametrize(
    "new, message",
    [
        (wrong_names, "different argument names"),
        (wrong_count, "different numbers of positional"),
        (wrong_free().__code__, "different numbers of free variables"),
        (compile("x = 1", "<module>", "exec"), "one is a function body"),
    ],
)
def test_a_code_whose_layout_does_not_fit_is_refused(new: Any, message: str) -> None:
    RAN.clear()
    cb = replace(layout_target, new)
    with pytest.raises(ValueError, match=message):
        run_with(cb, layout_target, 1)
    assert RAN == [] and ef.cache_entries(layout_target.__code__) == []
    assert run_with(None, layout_target, 2) == 2 and RAN == [2]


class LoggingCM:
    def __enter__(self) -> None:
        LOG.append("enter")

    def __exit__(self, *exc: Any) -> None:
        LOG.append("exit " + exc[0].__name__)


def raises_inside_with(x: int) -> int:
    return x


def raises_inside_with_new(x: int) -> int:
    try:
        with LoggingCM():
            raise ValueError(x)
    finally:
        LOG.append("finally")


def test_exceptions_with_and_finally_in_other_code() -> None:
    LOG.clear()
    cb = replace(raises_inside_with, raises_inside_with_new)
    with pytest.raises(ValueError) as info:
        run_with(cb, raises_inside_with, 3)
    assert info.value.args == (3,)
    assert LOG == ["enter", "exit ValueError", "finally"]
    assert any(tb.name == "raises_inside_with_new" for tb in _traceback_entries(info.value))


def _traceback_entries(exc: BaseException) -> list[Any]:
    import traceback

    return list(traceback.extract_tb(exc.__traceback__))


# -- generators and coroutines -------------------------------------------------------------------


def gen(n: int) -> Iterator[int]:
    try:
        for i in range(n):
            yield i
    finally:
        LOG.append("finally")


def gen_new(n: int) -> Iterator[int]:
    try:
        for i in range(n):
            yield i * 10
    finally:
        LOG.append("finally new")


def test_generators_are_offered_once_per_call_not_per_resume() -> None:
    LOG.clear()
    cb = cache(gen)

    def drive() -> list[Any]:
        out: list[Any] = [list(gen(4)), list(gen(4))]
        g = gen(5)
        out.append(next(g))
        try:
            g.throw(ValueError("boom"))
        except ValueError as e:
            out.append(str(e))
        g2 = gen(5)
        out.append(next(g2))
        g2.close()
        return out

    codes_to_reset.append(drive.__code__)
    assert run_with(cb, drive) == [[0, 1, 2, 3], [0, 1, 2, 3], 0, "boom", 0]
    assert cb.offers == ["gen"]
    assert cb.guard_calls == 3  # one per call of gen, none per resume
    assert LOG == ["finally"] * 4  # throw() and close() ran the finally blocks


class Suspend:
    def __await__(self) -> Iterator[str]:
        yield "suspended"


async def coro(x: int) -> int:
    try:
        await Suspend()
        return x + 1
    finally:
        LOG.append("coro finally")


def test_coroutines_are_offered_once_per_call_and_throw_runs_finally() -> None:
    LOG.clear()
    cb = cache(coro)

    def drive() -> list[Any]:
        out: list[Any] = []
        for _ in range(2):
            c = coro(1)
            out.append(c.send(None))
            try:
                c.send(None)
            except StopIteration as stop:
                out.append(stop.value)
        c = coro(2)
        c.send(None)
        try:
            c.throw(KeyError("k"))
        except KeyError:
            out.append("thrown")
        return out

    codes_to_reset.append(drive.__code__)
    assert run_with(cb, drive) == ["suspended", 2, "suspended", 2, "thrown"]
    assert cb.offers == ["coro"] and cb.guard_calls == 2
    assert LOG == ["coro finally"] * 3


@pytest.mark.skipif(PY310, reason="3.10 runs only a generator's own code (tested below)")
def test_other_code_for_a_generator() -> None:
    LOG.clear()
    cb = replace(gen, gen_new)
    assert run_with(cb, lambda: list(gen(3))) == [0, 10, 20]
    g = run_with(cb, gen, 3)
    assert next(g) == 0
    g.close()
    assert LOG == ["finally new", "finally new"]


@pytest.mark.skipif(not PY310, reason="3.11+ runs another code object for generators")
def test_other_code_for_a_generator_is_refused_clearly_on_310() -> None:
    cb = replace(gen, gen_new)
    with pytest.raises(NotImplementedError, match="Python 3.10"):
        run_with(cb, lambda: list(gen(3)))
    assert ef.cache_entries(gen.__code__) == []


# -- recursion -----------------------------------------------------------------------------------


def rec(n: int) -> int:
    return 0 if n == 0 else 1 + rec(n - 1)


def rec_new(n: int) -> int:
    return 0 if n == 0 else 1 + rec(n - 1)


@pytest.mark.parametrize("other_code", [False, True], ids=["own_code", "other_code"])
def test_intercepted_recursion_runs_3000_deep(other_code: bool) -> None:
    cb = replace(rec, rec_new) if other_code else cache(rec)
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(5000)
    try:
        assert run_with(cb, rec, 3000) == 3000
    finally:
        sys.setrecursionlimit(old)
    assert cb.offers == ["rec"] and cb.guard_calls == 3000


def rec_big(n: int) -> int:
    a = b = c = d = e = f = g = h = 0
    return 0 if n == 0 else 1 + rec_big(n - 1) + a + b + c + d + e + f + g + h


def rec_big_new(n: int) -> int:
    return 0 if n == 0 else 1 + rec_big(n - 1)


def test_other_code_in_deep_recursion_across_frame_stack_chunks() -> None:
    """Intercepted frames that open a chunk of CPython's frame stack: 3.12 frees them by unwinding."""
    import framescope

    def cb(frame: ef.Frame, entry: Any, state: Any) -> Any:
        if frame.f_code is rec_big.__code__:
            return ef.GuardedCode(code=rec_big_new.__code__, check_fn=bool)
        return None

    codes_to_reset.append(rec_big.__code__)
    before = _core._eval_frame_debug()["frames_unwound"]
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(5000)
    try:
        assert run_with(cb, rec_big, 3000) == 3000
        with framescope.profile(with_stack=True) as prof:
            assert run_with(cb, rec_big, 500) == 500
    finally:
        sys.setrecursionlimit(old)
    unwound = _core._eval_frame_debug()["frames_unwound"] - before
    if sys.version_info[:2] == (3, 12):
        assert unwound > 0  # the path was exercised
    else:
        assert unwound == 0  # 3.13 pops any frame; 3.10/3.11 callers free theirs
    names = [e.name for e in prof.events() if e.category == "python_function"]
    assert sum(n.endswith("rec_big_new") for n in names) == 501  # n = 500 .. 0
    assert not any(n.endswith("rec_big") for n in names)  # the intercepted frames never ran


DEEP_INTERCEPTED = """
import sys
from framescope import _core, eval_frame as ef

OTHER_CODE, DEPTH, BUDGET = {other_code}, {depth}, {budget}

def rec(n):
    return 0 if n == 0 else 1 + rec(n - 1)

def rec_new(n):
    return 0 if n == 0 else 1 + rec(n - 1)

def cb(frame, entry, state):
    if frame.f_code is rec.__code__:
        code = rec_new.__code__ if OTHER_CODE else rec.__code__
        return ef.GuardedCode(code=code, check_fn=lambda f_locals: True)
    return None

if BUDGET is not None:
    _core._set_stack_segment_budget(BUDGET)
sys.setrecursionlimit(10**7)
ef.set_eval_frame(cb)
try:
    print("result", rec(DEPTH))
except RecursionError:
    print("RecursionError")
ef.set_eval_frame(None)
print(rec(100))
"""


def run_deep_intercepted(other_code: bool, depth: int, budget: int | None) -> list[str]:
    import subprocess

    script = DEEP_INTERCEPTED.format(other_code=other_code, depth=depth, budget=budget)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.split()


@pytest.mark.parametrize("other_code", [False, True], ids=["own_code", "other_code"])
@pytest.mark.parametrize("budget", [0, 48 << 20], ids=["no_segments", "three_segments"])
def test_recursion_beyond_the_c_stack_is_a_clean_recursion_error(
    other_code: bool, budget: int
) -> None:
    """Past the thread's stack and the segment budget: RecursionError, never a crash."""
    assert run_deep_intercepted(other_code, 10**6, budget) == ["RecursionError", "100"]


@pytest.mark.parametrize("other_code", [False, True], ids=["own_code", "other_code"])
def test_intercepted_recursion_deeper_than_the_c_stack_runs_on_segments(other_code: bool) -> None:
    """100,000 intercepted levels need more C stack than a thread has (8 MiB): the hook runs
    the deep part on stack segments, so the program runs as it does without the hook (3.10
    without the hook overflows its stack at ~20,000 levels)."""
    if not _core._stack_segments_supported():
        pytest.skip("no stack segments on this platform")
    assert run_deep_intercepted(other_code, 100_000, None) == ["result", "100000", "100"]


def test_reset_code_from_a_guard_the_callback_or_the_running_code() -> None:
    def f(n: int) -> int:
        if n == 3:
            ef.reset_code(f.__code__)  # while outer frames of f run from its entries
        return 0 if n == 0 else 1 + f(n - 1)

    def f_new(n: int) -> int:
        if n == 3:
            ef.reset_code(f.__code__)
        return 0 if n == 0 else 1 + f(n - 1)

    def guard(f_locals: dict[str, Any]) -> bool:
        if f_locals["n"] == 5:
            ef.reset_code(f.__code__)  # the lookup then continues as a miss on a fresh state
        return f_locals["n"] != 7

    offers: list[tuple[int, Any]] = []

    def cb(frame: ef.Frame, entry: Any, state: Any) -> Any:
        if frame.f_code is not f.__code__:
            return None
        n = frame.f_locals["n"]
        offers.append((n, entry is None))
        if n == 7:
            ef.reset_code(f.__code__)  # its own code: the new entry goes to a fresh state
        return ef.GuardedCode(code=f_new.__code__ if n % 2 else f.__code__, check_fn=guard)

    codes_to_reset.append(f.__code__)
    # 7: a guard fails; 5: a guard resets; 2: f_new(3) reset the code while running from it
    assert run_with(cb, f, 8) == 8
    assert offers == [(8, True), (7, False), (5, True), (2, True)]
    offers.clear()
    assert run_with(cb, f, 8) == 8  # 8 hits the entry made for 2
    assert offers == [(7, False), (5, True), (2, True)]
    assert [e.code for e in ef.cache_entries(f.__code__)] == [f.__code__]


def test_skip_code_from_the_callback_is_overridden_by_what_the_callback_returns() -> None:
    """As in torch: the callback's decision is stored for the code after it returns, so a
    skip_code() of its own code from inside the callback stands only if the decision leaves the
    code's strategy alone (apply_to_code=False)."""

    def f(x: int) -> int:
        return x

    def f_new(x: int) -> int:
        return -x

    def cb(frame: ef.Frame, entry: Any, state: Any) -> Any:
        if frame.f_code is not f.__code__:
            return None
        ef.skip_code(f.__code__)  # its own code
        return ef.GuardedCode(code=f_new.__code__, check_fn=lambda f_locals: True, strategy=keep)

    codes_to_reset.append(f.__code__)
    keep = None  # a plain GuardedCode stores (DEFAULT, DEFAULT): the skip is overwritten
    assert run_with(cb, f, 3) == -3  # the returned entry ran on this frame
    assert not ef.is_skipped(f.__code__)
    assert run_with(cb, f, 3) == -3  # a hit
    ef.reset_code(f.__code__)
    keep = ef.FrameExecStrategy(ef.FrameAction.DEFAULT, ef.FrameAction.DEFAULT, apply_to_code=False)
    assert run_with(cb, f, 3) == -3
    assert ef.is_skipped(f.__code__) and len(ef.cache_entries(f.__code__)) == 1
    assert run_with(cb, f, 3) == 3  # skipped: no lookup, the original runs


# -- other hooks, tracing ------------------------------------------------------------------------

COUNTING_HOOK = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if PY_VERSION_HEX >= 0x030B0000
typedef struct _PyInterpreterFrame hook_frame;
#else
typedef PyFrameObject hook_frame;
#endif

static _PyFrameEvalFunction previous = NULL;
static long frames = 0;

static PyObject* counting_eval(PyThreadState* ts, hook_frame* frame, int throwflag) {
    frames++;
    return previous(ts, frame, throwflag);
}

static PyObject* install(PyObject* self, PyObject* unused) {
    PyInterpreterState* interp = PyInterpreterState_Get();
    previous = _PyInterpreterState_GetEvalFrameFunc(interp);
    _PyInterpreterState_SetEvalFrameFunc(interp, counting_eval);
    Py_RETURN_NONE;
}
static PyObject* uninstall(PyObject* self, PyObject* unused) {
    _PyInterpreterState_SetEvalFrameFunc(PyInterpreterState_Get(), previous);
    Py_RETURN_NONE;
}
static PyObject* is_current(PyObject* self, PyObject* unused) {
    return PyBool_FromLong(_PyInterpreterState_GetEvalFrameFunc(PyInterpreterState_Get()) == counting_eval);
}
static PyObject* count(PyObject* self, PyObject* unused) { return PyLong_FromLong(frames); }

static PyMethodDef methods[] = {
    {"install", install, METH_NOARGS, NULL},
    {"uninstall", uninstall, METH_NOARGS, NULL},
    {"is_current", is_current, METH_NOARGS, NULL},
    {"count", count, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "fs_counting_hook", NULL, -1, methods};
PyMODINIT_FUNC PyInit_fs_counting_hook(void) { return PyModule_Create(&def); }
"""


def test_a_hook_installed_first_is_chained_to_and_restored(tmp_path: Path) -> None:
    from tests.support.native_build import build_extension

    hook = build_extension("fs_counting_hook", COUNTING_HOOK, tmp_path)

    def f(x: int) -> int:
        return x + 1

    def f_new(x: int) -> int:
        return x + 10

    cb = replace(f, f_new)
    hook.install()
    try:
        assert hook.is_current()
        before = hook.count()
        assert run_with(cb, lambda: [f(1), f(2)]) == [11, 12]
        assert cb.offers == ["f"]
        assert hook.count() - before >= 3  # our hook chained to it: the lambda and f_new x2
        assert hook.is_current()  # restored when the last callback was removed
    finally:
        hook.uninstall()
    assert not _core._eval_frame_debug()["hook_installed"]


def test_frames_called_by_a_trace_function_are_not_intercepted() -> None:
    offered: list[str] = []

    def helper(x: int) -> int:
        return x

    def traced() -> int:
        return 1

    def tracer(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code is traced.__code__:
            helper(1)
        return None

    def cb(frame: ef.Frame, entry: Any, state: Any) -> None:
        offered.append(frame.f_code.co_name)
        return None

    codes_to_reset.extend([helper.__code__, traced.__code__])
    old = sys.gettrace()
    prior = ef.set_eval_frame(cb)
    sys.settrace(tracer)
    try:
        traced()
    finally:
        sys.settrace(old)
        ef.set_eval_frame(prior)
    assert "traced" in offered and "helper" not in offered


# -- freeing -------------------------------------------------------------------------------------


class Guard:
    def __call__(self, f_locals: dict[str, Any]) -> bool:
        return True


class Marker:
    pass


def test_no_leak_over_10000_set_reset_cycles() -> None:
    def f(x: int) -> int:
        return x + 1

    refs: list[weakref.ref[Any]] = []

    def cb(frame: ef.Frame, entry: Any, state: dict[str, Any]) -> Any:
        if frame.f_code is not f.__code__:
            return None
        marker = Marker()
        state["payload"] = (marker, bytearray(512))
        guard = Guard()
        refs[:] = [weakref.ref(guard), weakref.ref(marker)]
        return ef.GuardedCode(code=f.__code__, check_fn=guard)

    codes_to_reset.append(f.__code__)
    base = _core._eval_frame_debug()

    def cycles(n: int) -> None:
        for i in range(n):
            prior = ef.set_eval_frame(cb)
            f(i)
            f(i)  # a hit
            ef.set_eval_frame(prior)
            ef.reset_code(f.__code__)

    cycles(500)
    tracemalloc.start()
    try:
        start, _ = tracemalloc.get_traced_memory()
        cycles(10_000)
        end, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert end - start < 64 * 1024, f"grew by {end - start} bytes over 10,000 cycles"
    assert all(r() is None for r in refs)
    after = _core._eval_frame_debug()
    assert after["live_entries"] == base["live_entries"]
    assert after["live_states"] == base["live_states"]


def _intercept_exec_defined_function(i: int, refs: list[weakref.ref[Any]]) -> None:
    ns: dict[str, Any] = {}
    exec(compile("def h(x):\n    return x + 1\n", f"<h{i}>", "exec"), ns)
    new_ns: dict[str, Any] = {}
    exec(compile("def h(x):\n    return x + 2\n", f"<h_new{i}>", "exec"), new_ns)
    h = ns["h"]
    code = h.__code__ if i % 2 else new_ns["h"].__code__
    guard, marker = Guard(), Marker()
    refs += [weakref.ref(guard), weakref.ref(marker), weakref.ref(h), weakref.ref(new_ns["h"])]

    def cb(frame: ef.Frame, entry: Any, state: dict[str, Any]) -> Any:
        if frame.f_code is not h.__code__:
            return None
        state["marker"] = marker
        return ef.GuardedCode(code=code, check_fn=guard)

    assert run_with(cb, h, 1) == (2 if i % 2 else 3)
    assert run_with(cb, h, 1) == (2 if i % 2 else 3)


def test_entries_guards_and_frame_state_die_with_the_code() -> None:
    base = _core._eval_frame_debug()
    refs: list[weakref.ref[Any]] = []
    for i in range(20):
        _intercept_exec_defined_function(i, refs)
    gc.collect()
    assert [r for r in refs if r() is not None] == []
    after = _core._eval_frame_debug()
    assert after["live_entries"] == base["live_entries"]
    assert after["live_states"] == base["live_states"]


def test_interpreter_exit_frees_what_entries_hold() -> None:
    """A module-level guard of a module-level function is a cycle through co_extra, which the
    garbage collector cannot see: at exit the eval_frame state is dropped so that it is freed
    (nanobind reports a framescope Trace still alive at exit as a leak)."""
    script = textwrap.dedent(
        """
        import framescope
        from framescope import eval_frame as ef

        def f(x):
            return x + 1

        def guard(f_locals):
            return True

        def cb(frame, entry, state):
            if frame.f_code is f.__code__:
                return ef.GuardedCode(code=f.__code__, check_fn=guard)
            return None

        with framescope.profile() as prof:
            ef.set_eval_frame(cb)  # left set at exit
            print(f(1), f(2))
        """
    )
    import subprocess

    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", "3"]
    assert "leaked" not in result.stderr, result.stderr


def stress_f(x: int) -> int:
    return x + 1


def stress_f_new(x: int) -> int:
    return x + 1


def stress_g(x: int, *args: int, k: int = 1, **kw: int) -> int:
    return stress_f(x) + k


def test_threads_sharing_code_objects_while_guards_reset_them() -> None:
    """Several threads look up, add to and reset the same code objects, switching threads inside
    guards and callbacks: results stay right and nothing crashes."""
    import random
    import threading

    rng = random.Random(4)
    errors: list[str] = []

    def guard_for(v: int) -> Callable[[Any], bool]:
        def guard(f_locals: Any) -> bool:
            if rng.random() < 0.01:
                ef.reset_code(stress_f.__code__)
            return bool(f_locals["x"] % 3 == v)

        return guard

    def cb(frame: ef.Frame, entry: Any, state: dict[str, Any]) -> Any:
        code = frame.f_code
        if code is not stress_f.__code__ and code is not stress_g.__code__:
            return None
        state["n"] = state.get("n", 0) + 1
        if rng.random() < 0.05:
            return None
        v = frame.f_locals["x"] % 3
        new = stress_f_new.__code__ if code is stress_f.__code__ and v == 1 else code
        return ef.GuardedCode(code=new, check_fn=guard_for(v))

    def worker(n: int) -> None:
        try:
            prior = ef.set_eval_frame(cb if n % 2 else False)
            try:
                for i in range(1500):
                    assert stress_g(i, 1, 2, k=2, z=3) == i + 3
                    if i % 500 == 0:
                        ef.reset_code(stress_g.__code__)
                        ef.reset_code(stress_f.__code__)
            finally:
                ef.set_eval_frame(prior)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    codes_to_reset.extend([stress_f.__code__, stress_g.__code__])
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert errors == []
    assert _core._eval_frame_debug()["enabled_threads"] == 0

