"""Garbage collection during the session: cycles with __del__ collected by gc.collect(), weakref
callbacks and weakref.finalize, gc.callbacks, and a collection triggered by allocation."""

import gc
import weakref


class Cyclic:
    def __init__(self):
        self.me = self

    def __del__(self):
        finalized()


def finalized():
    return 1


def gc_callback(phase, info):
    if phase == "stop":
        finalized()


class Plain:
    pass


def work():
    for _ in range(2):
        Cyclic()
    gc.collect()
    p = Plain()
    weakref.finalize(p, finalized)
    del p
    gc.callbacks.append(gc_callback)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(gc_callback)
    old = gc.get_threshold()
    gc.set_threshold(10)
    try:
        junk = [Cyclic() for _ in range(30)]
        del junk
        make_lists(50)
    finally:
        gc.set_threshold(*old)
    gc.collect()


def make_lists(n):
    return [[i] for i in range(n)]


def run(make_profile):
    gc.collect()
    prof = make_profile()
    with prof:
        work()
    return prof
