"""The benchmark-only limit hooks (`_core._noop_eval_hook`, `_core._clock_floor_eval_hook`):
programs run unchanged under them, they restore the previous hook and refuse to stack."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator

import pytest

import framescope
from framescope import _core

LIMIT_HOOKS: list[Callable[[bool], None]] = [_core._noop_eval_hook, _core._clock_floor_eval_hook]


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def gen(n: int) -> Iterator[int]:
    for i in range(n):
        yield i * i


@pytest.mark.parametrize("hook", LIMIT_HOOKS, ids=lambda h: h.__name__)
def test_programs_run_unchanged_under_the_limit_hooks(hook: Callable[[bool], None]) -> None:
    hook(True)
    try:
        assert fib(20) == 6765
        assert sum(gen(100)) == sum(i * i for i in range(100))
        with pytest.raises(ZeroDivisionError):
            (lambda: 1 // 0)()
        results: list[int] = []
        t = threading.Thread(target=lambda: results.append(fib(15)))  # a new thread's first frames
        t.start()
        t.join()
        assert results == [610]
        old = sys.getrecursionlimit()
        sys.setrecursionlimit(5000)
        try:

            def rec(n: int) -> int:
                return 0 if n == 0 else 1 + rec(n - 1)

            assert rec(3000) == 3000
        finally:
            sys.setrecursionlimit(old)
        hook(True)  # enabling twice is a no-op
    finally:
        hook(False)
    hook(False)  # and so is disabling twice


@pytest.mark.parametrize("hook", LIMIT_HOOKS, ids=lambda h: h.__name__)
def test_limit_hooks_refuse_to_stack_on_another_hook(hook: Callable[[bool], None]) -> None:
    with framescope.profile():  # the tracer owns the frame hook now
        with pytest.raises(RuntimeError, match="another PEP 523 frame hook"):
            hook(True)
    other = LIMIT_HOOKS[1] if hook is LIMIT_HOOKS[0] else LIMIT_HOOKS[0]
    other(True)
    try:
        with pytest.raises(RuntimeError, match="another PEP 523 frame hook"):
            hook(True)
    finally:
        other(False)
    with framescope.profile(with_stack=True) as prof:  # and the tracer works again afterwards
        fib(5)
    assert sum(e.name.endswith(": fib") for e in prof.events()) == 15
