"""Helpers shared by the eval_frame tests: running with a callback, and per-test clean-up."""

from __future__ import annotations

from types import CodeType
from typing import Any, Callable, Iterator

from framescope import _core
from framescope import eval_frame as ef

# Code objects a test cached entries for: reset after the test so none leaks into the next.
codes_to_reset: list[CodeType] = []


def run_with(callback: Any, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Calls fn with `callback` set on this thread (only fn and what it calls are intercepted)."""
    prior = ef.set_eval_frame(callback)
    try:
        return fn(*args, **kwargs)
    finally:
        ef.set_eval_frame(prior)


def clean_eval_frame_state() -> Iterator[None]:
    """Body of the tests' autouse fixture: no callback before or after a test, no guard hooks or
    flags, no thread left intercepting, and the entries of `codes_to_reset` dropped."""
    assert ef.set_eval_frame(None) is None, "an earlier test left a callback set"
    yield
    ef.set_guard_fail_hook(None)
    ef.set_guard_error_hook(None)
    assert ef.set_guard_complete_hook(None) is None, "the test left a guard complete hook set"
    assert ef.set_skip_guard_eval_unsafe(False) is False, "the test left skip_guard_eval_unsafe"
    assert ef.set_eval_frame(None) is None, "the test left a callback set"
    assert _core._eval_frame_debug()["enabled_threads"] == 0
    while codes_to_reset:
        ef.reset_code(codes_to_reset.pop())
