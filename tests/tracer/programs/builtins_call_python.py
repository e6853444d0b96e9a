"""Builtins that call back into Python: list(map), sum over a generator, sorted with a key, min and
max with a key, dict(zip), any/all over generators, itertools, enumerate, functools.reduce."""

import functools
import itertools


def f(x):
    return x * 2


def gen(n):
    for i in range(n):
        yield f(i)


def work():
    list(map(f, range(3)))
    sum(gen(3))
    sorted(range(4), key=f)
    min(range(3), key=f)
    max(gen(3))
    dict(zip(gen(2), gen(2)))
    any(x > 2 for x in gen(3))
    all(x >= 0 for x in gen(2))
    list(itertools.chain(gen(2), gen(1)))
    list(enumerate(gen(2)))
    functools.reduce(lambda a, b: a + f(b), range(3), 0)
