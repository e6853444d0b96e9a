"""RecursionError raised deep down and caught near the top, then normal calls."""

import sys


def down(n):
    return down(n + 1)


def run(make_profile):
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(400)
    try:
        prof = make_profile()
        with prof:
            try:
                down(0)
            except RecursionError:
                pass
            down.__name__
            after()
    finally:
        sys.setrecursionlimit(old)
    return prof


def after():
    return 1
