"""Specializing a function on an argument with framescope.eval_frame and a Guard.

A toy of what a JIT does with the eval_frame API. The first time ``power(x, n)`` is called with
a new small ``n``, the callback generates a version with the loop unrolled for that ``n`` and
caches it under a :class:`~framescope.eval_frame.Guard` that holds while ``n`` is that int. Later
calls with the same ``n`` run the unrolled version without calling the callback. Other ``n`` (not
an int, too large, or past the cache's size) run the original code for that call only. A guard
fail hook collects why each cached version did not apply (``Guard.failure``).

Run it: ``python examples/eval_frame_guard.py``.
"""

from __future__ import annotations

from types import CodeType
from typing import Any, Optional, Union

from framescope import eval_frame as ef

MAX_N = 8  # unroll up to this many multiplications
MAX_VERSIONS = 3  # cached versions per code object (Dynamo's cache_size_limit)


def power(x: float, n: int) -> float:
    result = 1.0
    for _ in range(n):
        result *= x
    return result


def unrolled_power(n: int) -> CodeType:
    """A code object with power's arguments whose body is x * x * ... (n times)."""
    body = " * ".join(["x"] * n) if n else "1.0"
    namespace: dict[str, Any] = {}
    exec(f"def power(x, n):\n    return {body}\n", namespace)
    code: CodeType = namespace["power"].__code__
    return code


def specialize(
    frame: ef.Frame, entry: Optional[ef.CacheEntry], frame_state: ef.FrameState
) -> Union[None, ef.GuardedCode, ef.FrameExecStrategy]:
    if frame.f_code is not power.__code__:
        return None  # not ours: never offered again
    n = frame.f_locals["n"]
    versions = len(ef.cache_entries(frame.f_code))
    if type(n) is not int or not 0 <= n <= MAX_N or versions >= MAX_VERSIONS:
        # This call runs the original code; later calls are offered again.
        return ef.FrameExecStrategy(ef.FrameAction.SKIP, apply_to_code=False)
    guard = ef.Guard()
    guard.local("n").type_is(int).equals(n)
    return ef.GuardedCode(code=unrolled_power(n), check_fn=guard)


def main() -> None:
    why_missed: list[Optional[str]] = []

    def fail_hook(check_fn: Any, code: Any, f_locals: Any, index: int, is_last: bool) -> None:
        if isinstance(check_fn, ef.Guard):
            why_missed.append(check_fn.failure(f_locals))

    ef.set_guard_fail_hook(fail_hook)
    try:
        with ef.use_callback(specialize):
            results = [power(2.0, n) for n in (3, 3, 5, 3, 5, 20, 2, 1)]
    finally:
        ef.set_guard_fail_hook(None)
    print("results:", results)
    print("cached versions, most recently hit first:")
    for entry in ef.cache_entries(power.__code__):
        print("  ", " and ".join(entry.check_fn.checks))
    print("why cached versions did not apply:")
    for line in why_missed:
        print("  ", line)
    ef.reset_code(power.__code__)


if __name__ == "__main__":
    main()
