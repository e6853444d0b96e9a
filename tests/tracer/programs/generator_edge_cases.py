"""Generators that return values, raise inside, are closed half-way with finally blocks, yield
inside with statements, and are thrown into while suspended in a yield from."""

import contextlib


def returns():
    yield 1
    return finish()


def finish():
    return 5


def raises():
    yield 1
    raise KeyError("k")


@contextlib.contextmanager
def ctx():
    yield


def with_inside():
    with ctx():
        yield 1
        yield 2


def inner():
    try:
        yield 1
    except ValueError:
        finish()
        yield 2


def outer():
    yield from inner()


def work():
    g = returns()
    next(g)
    try:
        next(g)
    except StopIteration:
        pass
    g = raises()
    next(g)
    try:
        next(g)
    except KeyError:
        pass
    g = with_inside()
    next(g)
    g.close()
    g = outer()
    next(g)
    g.throw(ValueError)
    g.close()
