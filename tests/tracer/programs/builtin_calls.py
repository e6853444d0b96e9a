"""Builtins by what was called: a list subclass's append is list.append (and plain lists call the
same), weakref and partial objects called, classmethods of subclasses, object.__new__, bound
builtin methods kept in variables, builtins calling Python (sorted with key, map)."""

import functools
import weakref


class MyList(list):
    pass


class MyDict(dict):
    pass


class Target:
    pass


def key(v):
    return -v


def work():
    m = MyList()
    m.append(1)
    plain = []
    plain.append(2)
    add = plain.append
    add(3)
    t = Target()
    r = weakref.ref(t)
    r()
    p = functools.partial(max, 1)
    p(2)
    MyDict.fromkeys("ab")
    dict.fromkeys("cd")
    object.__new__(Target)
    sorted([3, 1, 2], key=key)
    list(map(str.upper, "ab"))
    "a,b".split(",")
    len(m)
    isinstance(m, list)
    getattr(t, "missing", None)
    int.from_bytes(b"\x01", "little")
