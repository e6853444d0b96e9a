"""Frames running when the session starts that return during it, with time (in C) between their
return and the thread's next Python call: they end when they return, and the calls after them
belong to their callers."""

import time


def outer(make_profile):
    prof = middle(make_profile)
    time.sleep(0.01)  # no Python call for a while after middle() returned
    after_middle()
    return prof


def middle(make_profile):
    prof = inner(make_profile)
    len("x")
    return prof


def inner(make_profile):
    prof = make_profile()
    prof.start()
    leaf()
    return prof


def leaf():
    return 1


def after_middle():
    return leaf()


def run(make_profile):
    prof = outer(make_profile)
    leaf()
    prof.stop()
    return prof
