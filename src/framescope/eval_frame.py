"""framescope.eval_frame: a standalone PEP 523 frame-evaluation API with guarded code caches.

The API PyTorch Dynamo builds on (``torch._C._dynamo.eval_frame``), without PyTorch. Per thread, a
callback decides what runs when a Python function is called:

- ``set_eval_frame(None)``: frames run as usual (the default).
- ``set_eval_frame(False)``: run-only: cached entries are looked up and run; a miss runs the
  original bytecode; the callback is never called.
- ``set_eval_frame(callback)``: on a miss, ``callback(frame, cache_entry, frame_state)`` is called
  with a :class:`Frame`, the code object's first :class:`CacheEntry` (or ``None``) and a dict kept
  per code object. It returns ``None`` (the code is skipped from now on; the functions it calls
  are still offered), a :class:`GuardedCode`, which becomes the code object's first entry and
  runs on this frame, or a :class:`FrameExecStrategy` (torch's exec strategies: skip this call
  only, skip everything the frame calls, run-only for its callees...).

On every later call of the code object, ``check_fn(f_locals)`` of each entry runs, most recently
hit first; the first that returns true runs its code (and becomes the first entry). A
:class:`Guard` is a check_fn made of declared checks (``guard.local("x").type_is(int)``): when
none of them runs Python code, a hit is decided from the frame without a call. Each lookup
is recorded as a ``Cache Lookup`` range when a :class:`framescope.profile` session is active.

Guards, guard hooks and the callback get ``f_locals`` as a :class:`FrameLocals`: the frame's
arguments and free variables (torch's frame locals), read straight from the frame. While they run,
this thread's callback is ``None``: nothing they call is intercepted. A cached code object other
than the frame's own must take the same arguments (same names) and free variables; it then runs
with the frame's arguments and closure. ``docs/eval_frame.md`` maps torch's names to these.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from types import CodeType
from typing import Any, Callable, Dict, Literal, Optional, Union

from framescope import _core
from framescope._core import (
    CacheEntry,
    FrameAction,
    FrameExecStrategy,
    FrameLocals,
    Guard,
    GuardedCode,
    GuardValue,
    cache_entries,
    get_code_exec_strategy,
    get_eval_frame_callback,
    is_skipped,
    reset,
    reset_code,
    set_code_exec_strategy,
    set_eval_frame,
    set_guard_complete_hook,
    set_guard_error_hook,
    set_guard_fail_hook,
    set_skip_guard_eval_unsafe,
    skip_code,
)
from framescope._core import EvalFrame as Frame

__all__ = [
    "CacheEntry",
    "Callback",
    "Frame",
    "FrameAction",
    "FrameExecStrategy",
    "FrameLocals",
    "FrameState",
    "Guard",
    "GuardCompleteHook",
    "GuardFn",
    "GuardHook",
    "GuardValue",
    "GuardedCode",
    "cache_entries",
    "get_code_exec_strategy",
    "get_eval_frame_callback",
    "is_skipped",
    "reset",
    "reset_code",
    "set_code_exec_strategy",
    "set_eval_frame",
    "set_guard_complete_hook",
    "set_guard_error_hook",
    "set_guard_fail_hook",
    "set_skip_guard_eval_unsafe",
    "skip_code",
    "use_callback",
]

MutableMapping.register(FrameLocals)

#: The dict kept per code object and passed to every callback call for it.
FrameState = Dict[str, Any]
#: A guard: ``check_fn(f_locals) -> bool``. ``f_locals`` is a :class:`FrameLocals` mapping of the
#: frame's argument names (and free variables that hold a value) to their values.
GuardFn = Callable[[Mapping[str, Any]], Any]
#: What ``set_eval_frame`` takes and returns: ``None``, ``False`` (run-only) or a callback.
Callback = Union[
    None,
    bool,
    Callable[
        [Frame, Optional[CacheEntry], FrameState],
        Union[None, GuardedCode, FrameExecStrategy],
    ],
]
#: ``hook(check_fn, code, f_locals, index, is_last)`` for set_guard_fail_hook/set_guard_error_hook.
GuardHook = Callable[[GuardFn, CodeType, Mapping[str, Any], int, bool], Any]
#: ``hook(cache_hit) -> bool`` for set_guard_complete_hook: false turns a hit into a miss.
GuardCompleteHook = Callable[[bool], Any]


@contextmanager
def use_callback(
    callback: Callback,
    *,
    isolate: object = False,
    guard_errors: Literal["raise", "fail"] = "raise",
) -> Iterator[None]:
    """Sets this thread's callback (as :func:`set_eval_frame`) for the ``with`` block, then puts
    back the whole previous setting: its callback, isolation and ``guard_errors``
    (``set_eval_frame(prior)`` alone would restore the callback with the default settings)."""
    prior_callback, prior_isolation, prior_errors = _core._eval_frame_setting()
    set_eval_frame(callback, isolate=isolate, guard_errors=guard_errors)
    try:
        yield
    finally:
        # An isolation key given back as the isolation id keys the same entries (equal keys).
        set_eval_frame(
            prior_callback,
            isolate=False if prior_isolation is None else prior_isolation,
            guard_errors=prior_errors,
        )
