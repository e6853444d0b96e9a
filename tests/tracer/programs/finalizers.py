"""Finalizers and weakref callbacks that run while a returning frame's locals are freed: CPython's
hooks put them after the frame, as calls of its caller."""

import gc
import weakref


class Resource:
    def __del__(self):
        released()


def released():
    return 1


class Target:
    pass


def on_collect(ref):
    released()


def make_and_drop():
    r = Resource()
    helper(r)
    return 1


def with_weakref():
    t = Target()
    ref = weakref.ref(t, on_collect)
    helper(t)
    return ref


def helper(x):
    return x


def cycle():
    a = Resource()
    a.self = a
    del a
    gc.collect()


def work():
    for _ in range(3):
        make_and_drop()
        with_weakref()
    cycle()
