"""Instances made at specialized `Cls(...)` sites (3.13: CALL_ALLOC_AND_ENTER_INIT pushes __init__
without the PEP 523 hook) that are cyclic garbage with __del__, with automatic collection on and
a low threshold: the finalizers a collection runs around an allocation are not calls of the
__init__ that follows."""

import gc


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
    gc.set_threshold(7)
    try:
        prof = make_profile()
        with prof:
            make_cycles(100)
            make_nodes(50)
    finally:
        gc.set_threshold(*old)
    gc.collect()
    return prof
