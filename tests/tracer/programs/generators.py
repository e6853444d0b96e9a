"""Generators driven every way: for, next(), send(), yield from, expressions, close(), throw()."""


def count(n):
    for i in range(n):
        yield i


def echo():
    total = 0
    while True:
        got = yield total
        if got is None:
            return total
        total += got


def delegate(n):
    result = yield from count(n)
    yield from (x * 2 for x in count(n))
    return result


def guarded():
    try:
        yield 1
        yield 2
    finally:
        cleanup()


def cleanup():
    return 0


def catcher():
    while True:
        try:
            yield
        except ValueError:
            handled()


def handled():
    return 1


def work():
    for _ in count(3):
        pass
    g = count(2)
    next(g)
    next(g)
    e = echo()
    next(e)
    e.send(1)
    e.send(2)
    try:
        e.send(None)
    except StopIteration:
        pass
    list(delegate(2))
    sum(x for x in count(3))
    g = guarded()
    next(g)
    g.close()
    c = catcher()
    next(c)
    c.throw(ValueError)
    c.close()


def run(make_profile):
    work()  # warm: specialized sites
    prof = make_profile()
    with prof:
        work()
    return prof
