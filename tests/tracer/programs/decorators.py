"""Wrappers: functools.wraps decorators, lru_cache (a C wrapper calling a Python function),
cached_property, property setters, staticmethod and classmethod."""

import functools


def logged(f):
    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        return f(*args, **kwargs)

    return wrapper


@logged
def add(a, b):
    return a + b


@functools.lru_cache(maxsize=None)
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


class Thing:
    def __init__(self):
        self._v = 0

    @functools.cached_property
    def expensive(self):
        return add(1, 2)

    @property
    def v(self):
        return self._v

    @v.setter
    def v(self, value):
        self._v = add(value, 0)

    @staticmethod
    def static(x):
        return add(x, 1)

    @classmethod
    def build(cls):
        return cls()


def work():
    add(1, 2)
    fib.cache_clear()
    fib(8)
    t = Thing.build()
    t.expensive
    t.expensive
    t.v = 3
    t.v
    Thing.static(1)
