"""Recursion 5,000 deep (deeper than the C stack a hooked call takes allows without segments on
some versions), twice, and an exception from the bottom caught at the top."""

import sys


def rec(n):
    if n == 0:
        return 0
    return rec(n - 1) + 1


def rec_raise(n):
    if n == 0:
        raise ValueError("bottom")
    return rec_raise(n - 1)


def run(make_profile):
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)
    try:
        prof = make_profile()
        with prof:
            rec(5_000)
            rec(5_000)
            try:
                rec_raise(3_000)
            except ValueError:
                pass
    finally:
        sys.setrecursionlimit(old)
    return prof
