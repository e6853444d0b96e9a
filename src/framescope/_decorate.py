"""record_function used as a decorator (called from the C type's __call__)."""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def decorate(name: str, args: str | None, fn: F) -> F:
    from framescope._core import record_function

    @functools.wraps(fn)
    def wrapper(*a: Any, **kw: Any) -> Any:
        with record_function(name, args):
            return fn(*a, **kw)

    return wrapper  # type: ignore[return-value]
