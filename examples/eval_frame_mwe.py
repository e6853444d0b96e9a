"""A minimal example of framescope.eval_frame: callbacks that always skip, always hit or always miss.

The same program as the "minimal working example of standalone usage for dynamo eval_frame", on
framescope's API (no PyTorch). Run it: ``python examples/eval_frame_mwe.py``. The callback counts
the functions it is offered and caches each with a guard that always holds (hit) or never holds
(miss), or skips them (skip):

- skip: ``f`` and ``g`` are each offered once, then run as usual;
- hit: after the first call of each, their guard runs and the cached code runs;
- miss: every call runs all the guards, then the callback adds one more entry.
"""

from __future__ import annotations

import inspect
from types import CodeType
from typing import Any, Mapping, Optional

from framescope.eval_frame import (
    CacheEntry,
    Frame,
    FrameState,
    GuardedCode,
    reset_code,
    set_eval_frame,
)


def is_generator(code: CodeType) -> bool:
    flags = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
    return bool(code.co_flags & flags)


def full_function_name(frame: Frame) -> str:
    function_name = frame.f_code.co_name
    # A method: say which class.
    try:
        class_name = frame.f_locals["self"].__class__.__name__
        function_name = class_name + "." + function_name
    except KeyError:
        pass
    module = inspect.getmodule(frame)
    module_name = module.__name__ if module is not None else "empty module"
    return module_name + "." + function_name


class Always:
    """A guard that always answers the same."""

    def __init__(self, hit: bool = True) -> None:
        self.hit = hit

    def __call__(self, f_locals: Mapping[str, Any]) -> bool:
        print(f"guard called with {len(f_locals)} args.")
        return self.hit


class MyCallback:
    def __init__(self, skip: bool, hit: bool = False) -> None:
        self.count = 0
        self.skip = skip
        self.hit = hit

    def __call__(
        self, frame: Frame, cache: Optional[CacheEntry], frame_state: FrameState
    ) -> Optional[GuardedCode]:
        self.count += 1
        cache_len = 0
        while cache is not None:
            cache_len += 1
            cache = cache.next
        print(f"calling the {self.count}-th function: {full_function_name(frame)}")
        print(f"the function has {cache_len} cache entries now.")

        if "cache_len" in frame_state:
            cache_len = frame_state["cache_len"]
            print(f"number of caches in the last call: {cache_len}")
        frame_state["cache_len"] = cache_len

        if self.skip or is_generator(frame.f_code):
            return None
        return GuardedCode(code=frame.f_code, check_fn=Always(hit=self.hit))


def f(x: int) -> int:
    return x + 1


def g(x: int) -> int:
    return x + 2


def eval_frame_mwe(skip: bool, hit: bool = False) -> int:
    callback = MyCallback(skip=skip, hit=hit)
    prior = set_eval_frame(callback)

    x = 1
    x = f(x)
    x = g(x)
    x = f(x)
    x = g(x)
    x = f(x)

    set_eval_frame(prior)
    # Skip marks, cache entries and frame_state belong to the code objects: drop them so that the
    # next run starts afresh.
    for fn in (f, g):
        reset_code(fn.__code__)
    return x


def test_always_skip_callback() -> None:
    eval_frame_mwe(skip=True)


def test_always_hit_callback() -> None:
    eval_frame_mwe(skip=False, hit=True)


def test_always_miss_callback() -> None:
    eval_frame_mwe(skip=False, hit=False)


if __name__ == "__main__":
    for title, run in (
        ("always skip", test_always_skip_callback),
        ("always hit", test_always_hit_callback),
        ("always miss", test_always_miss_callback),
    ):
        print(f"== {title}")
        run()
