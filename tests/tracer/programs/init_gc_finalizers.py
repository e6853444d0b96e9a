"""Instances made at specialized `Cls(...)` sites (3.13: CALL_ALLOC_AND_ENTER_INIT pushes __init__
without the PEP 523 hook) that are cyclic garbage with __del__, with automatic collection on and
a low threshold: the finalizers a collection runs around an allocation are not calls of the
__init__ that follows.

Automatic collections only on 3.12+, where CPython runs them at an eval-breaker check (3.13: a
frame's RESUME, before it reports the frame's start). 3.10/3.11 run a collection inside the
allocation that crosses the threshold, and on 3.11 the trace function of the ground truth
allocates a frame object for every call event, between the frame hook's sight of the call and
CPython's report of it: the recorder itself would move the collections. There the program
collects explicitly."""

import gc
import sys

AUTOMATIC = sys.version_info >= (3, 12)


def finalized():
    return 1


class Cyclic:
    def __init__(self, n):
        self.me = self
        self.n = n

    def __del__(self):
        finalized()


class Node:
    def __init__(self, parent):
        self.parent = parent
        self.child = None


def make_cycles(n):
    for i in range(n):
        Cyclic(i)


def make_nodes(n):
    last = None
    for _ in range(n):
        last = Node(last)
        last.child = Cyclic(0)
    return last


def run(make_profile):
    gc.collect()
    make_cycles(5)  # warm the sites
    old = gc.get_threshold()
    if AUTOMATIC:
        gc.set_threshold(7)
    else:
        gc.disable()
    try:
        prof = make_profile()
        with prof:
            make_cycles(100)
            if not AUTOMATIC:
                gc.collect()
            make_nodes(50)
            if not AUTOMATIC:
                gc.collect()
    finally:
        gc.set_threshold(*old)
        gc.enable()
    gc.collect()
    return prof
