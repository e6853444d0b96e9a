"""fib(25): 242,785 Python calls per fib(25), nothing else (the tracer's worst case)."""

from __future__ import annotations

N = 25
#: fib(25) calls per run (one fib(25) alone takes ~10 ms on 3.11: too short to time alone).
REPEAT = 20
CALLS_PER_FIB = 242_785


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def run(scale: float = 1.0) -> int:
    total = 0
    for _ in range(max(1, round(REPEAT * scale))):
        total += fib(N)
    return total
