"""framescope.eval_frame: a standalone PEP 523 frame-evaluation API with guarded code caches.

The API PyTorch Dynamo builds on, without PyTorch. Per thread, a callback decides what runs when a
Python function is called:

- ``set_eval_frame(None)``: frames run as usual (the default).
- ``set_eval_frame(False)``: run-only: cached entries are looked up and run; a miss runs the
  original bytecode; the callback is never called.
- ``set_eval_frame(callback)``: on a miss, ``callback(frame, cache_entry, frame_state)`` is called
  with a :class:`Frame`, the code object's first :class:`CacheEntry` (or ``None``) and a dict kept
  per code object. It returns ``None`` (the code is skipped from now on; the functions it calls
  are still offered) or a :class:`GuardedCode`, which becomes the code object's first entry and
  runs on this frame.

On every later call of the code object, ``check_fn(f_locals)`` of each entry runs, most recently
hit first; the first that returns true runs its code (and becomes the first entry). Each lookup
is recorded as a ``Cache Lookup`` range when a :class:`framescope.profile` session is active.

Guards, guard hooks and the callback get ``f_locals`` as a :class:`FrameLocals`: a read-only mapping
read straight from the frame (a dict of the values if kept after the lookup). While they run, this
thread's callback is ``None``: nothing they call is intercepted. A cached code object other than the frame's own must take the same arguments
(same names) and free variables; it then runs with the frame's arguments and closure.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import CodeType
from typing import Any, Callable, Dict, Optional, Union

from framescope._core import (
    CacheEntry,
    FrameLocals,
    GuardedCode,
    cache_entries,
    is_skipped,
    reset_code,
    set_eval_frame,
    set_guard_error_hook,
    set_guard_fail_hook,
    skip_code,
)
from framescope._core import EvalFrame as Frame

__all__ = [
    "CacheEntry",
    "Callback",
    "Frame",
    "FrameLocals",
    "FrameState",
    "GuardFn",
    "GuardHook",
    "GuardedCode",
    "cache_entries",
    "is_skipped",
    "reset_code",
    "set_eval_frame",
    "set_guard_error_hook",
    "set_guard_fail_hook",
    "skip_code",
]

Mapping.register(FrameLocals)

#: The dict kept per code object and passed to every callback call for it.
FrameState = Dict[str, Any]
#: A guard: ``check_fn(f_locals) -> bool``. ``f_locals`` is a read-only :class:`FrameLocals`
#: mapping of the argument names (and free variables that hold a value) to their values; for
#: module and class bodies, their namespace.
GuardFn = Callable[[Mapping[str, Any]], Any]
#: What ``set_eval_frame`` takes and returns: ``None``, ``False`` (run-only) or a callback.
Callback = Union[
    None,
    bool,
    Callable[[Frame, Optional[CacheEntry], FrameState], Optional[GuardedCode]],
]
#: ``hook(check_fn, code, f_locals, index, is_last)`` for set_guard_fail_hook/set_guard_error_hook.
GuardHook = Callable[[GuardFn, CodeType, Mapping[str, Any], int, bool], Any]
