"""Callables of every shape: bound methods, staticmethod/classmethod, functools.partial of a Python
function, lambdas, closures, *args/**kwargs, defaults, keyword-only, operator helpers, map."""

import functools
import operator


class K:
    def m(self, a, b=2):
        return a + b

    @classmethod
    def c(cls, x):
        return x

    @staticmethod
    def s(x):
        return x


def outer(x):
    def inner(y):
        return x + y

    return inner


def star(*args, **kwargs):
    return len(args) + len(kwargs)


def kwonly(a, *, b=1):
    return a + b


def work():
    k = K()
    k.m(1)
    bound = k.m
    bound(1, b=3)
    K.c(1)
    K.s(2)
    functools.partial(kwonly, b=2)(1)
    (lambda z: z + 1)(1)
    outer(1)(2)
    star(1, 2, x=3)
    kwonly(1, b=2)
    operator.methodcaller("m", 5)(k)
    list(map(outer(1), range(2)))
    list(filter(lambda v: v > 0, range(3)))
