"""Exits by exception through several frames, caught higher up, re-raised, in finally blocks,
and exception groups (3.11+)."""

import sys


def deepest(n):
    if n == 0:
        raise ValueError("deep")
    return deepest(n - 1)


def catcher():
    try:
        deepest(4)
    except ValueError:
        handler()


def handler():
    return 1


def reraiser():
    try:
        deepest(2)
    except ValueError:
        cleanup()
        raise


def cleanup():
    return 0


def with_finally():
    try:
        return deepest(1)
    finally:
        cleanup()


def chained():
    try:
        deepest(1)
    except ValueError as e:
        raise KeyError("k") from e


GROUPS = sys.version_info >= (3, 11)
if GROUPS:
    exec(
        """
def raise_group():
    raise ExceptionGroup("g", [ValueError(1), KeyError(2)])

def star_catcher():
    try:
        raise_group()
    except* ValueError:
        handler()
    except* KeyError:
        cleanup()
"""
    )


def work():
    catcher()
    for f in (reraiser, with_finally, chained):
        try:
            f()
        except (ValueError, KeyError):
            handler()
    if GROUPS:
        star_catcher()  # noqa: F821 (defined by exec above)
