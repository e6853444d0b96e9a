"""The recursion limit lowered while the session records, then a recursion into it: the frame
CPython refuses at the limit (RecursionError before its first instruction) never runs, so it is
no call; the limit raised again and lowered once more."""

import sys


def down(n):
    return down(n + 1)


def recurse_into_limit(limit):
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        down(0)
    except RecursionError:
        pass
    finally:
        sys.setrecursionlimit(old)
    after()


def after():
    return 1


def run(make_profile):
    prof = make_profile()
    with prof:
        recurse_into_limit(120)
        recurse_into_limit(200)
    return prof
