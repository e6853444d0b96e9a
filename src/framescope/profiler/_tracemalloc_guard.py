"""Keeps ``profile_memory`` counting across ``tracemalloc.stop()`` during a session.

Why: framescope counts Python allocations by wrapping the allocators installed when its session
starts. When tracemalloc was started before the session, its wrappers are the ones framescope
wraps; ``tracemalloc.stop()`` then puts back the allocators *it* found at its start, unlinking
framescope's wrappers too, and every allocation after that went uncounted without a word (the
figures came out half as large). ``tracemalloc.stop`` is replaced, once, by a function that
calls it and then has the core put its wrappers back (a no-op when no session counts, or when
they are still in the chain). Another tool that unlinks them (or ``_tracemalloc.stop()`` called
directly) is found at the session's stop, which warns that the memory figures are too low.
"""

from __future__ import annotations

import functools
import tracemalloc
from typing import Callable

from framescope import _core

_original_stop: Callable[[], None] | None = None


def install() -> None:
    """Wraps ``tracemalloc.stop`` (once per process; before a profile_memory session starts)."""
    global _original_stop
    if _original_stop is not None:
        return
    original = tracemalloc.stop

    @functools.wraps(original)
    def stop() -> None:
        original()
        _core._rearm_memory_hooks()

    _original_stop = original
    tracemalloc.stop = stop
