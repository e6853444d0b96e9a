"""The standard library calling Python code from C and from its own Python: contextvars,
functools.singledispatch, abc with __subclasshook__, enum, re.sub with a function, json hooks,
sorted on keys with __lt__, a list built from an iterator class."""

import abc
import contextvars
import enum
import functools
import json
import re


class Color(enum.Enum):
    RED = 1
    GREEN = 2


class Shape(abc.ABC):
    @classmethod
    def __subclasshook__(cls, other):
        return hasattr(other, "area")


class Square:
    def area(self):
        return 1


@functools.singledispatch
def describe(x):
    return "thing"


@describe.register
def _(x: int):
    return "int"


var = contextvars.ContextVar("var", default=0)


def in_context():
    var.set(1)
    return var.get()


def repl(m):
    return m.group(0).upper()


def hook(d):
    return d


class Numbers:
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter(range(self.n))


def work():
    contextvars.copy_context().run(in_context)
    describe(1)
    describe("a")
    isinstance(Square(), Shape)
    Color(1)
    Color["GREEN"]
    list(Color)
    re.sub(r"a", repl, "banana")
    json.loads('{"a": {"b": 1}}', object_hook=hook)
    list(Numbers(3))
