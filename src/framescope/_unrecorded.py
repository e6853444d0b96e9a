"""Work framescope does on a recording thread on its own behalf, kept out of the trace.

framescope's own frames are never recorded (they are skipped by file), but what they call is
code of the standard library or of the program's dependencies: a dump's export, a snapshot's
``summary()``, the option parsing before a start. Inside :func:`unrecorded` the calling thread
records nothing, whatever it calls; the session goes on for every other thread.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

from framescope import _core

F = TypeVar("F", bound=Callable[..., Any])


def unrecorded(fn: F) -> F:
    """Runs ``fn`` with the calling thread's recording paused (nested pauses are counted)."""

    @functools.wraps(fn)
    def run_unrecorded(*args: Any, **kwargs: Any) -> Any:
        # Paused and resumed in one C call: no bytecode (where KeyboardInterrupt could land)
        # between the two.
        return _core._call_unrecorded(fn, *args, **kwargs)

    return run_unrecorded  # type: ignore[return-value]
