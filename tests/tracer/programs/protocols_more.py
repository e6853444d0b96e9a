"""Python code that C calls through protocols not covered elsewhere: a threading.local subclass's
__init__ (run on each thread's first access), dict subclasses with __missing__, keys with
__hash__/__eq__, descriptors with __set__/__delete__, rich comparisons in sorted/min/max with key
functions, comprehensions and lambdas (inlined on 3.12+), and an unfinished generator closed by
its deallocation."""

import threading


class Local(threading.local):
    def __init__(self):
        self.value = start_value()


def start_value():
    return 0


class Defaulting(dict):
    def __missing__(self, key):
        return fallback(key)


def fallback(key):
    return len(key)


class Key:
    def __init__(self, k):
        self.k = k

    def __hash__(self):
        return hash(self.k)

    def __eq__(self, other):
        return isinstance(other, Key) and other.k == self.k

    def __lt__(self, other):
        return self.k < other.k


class Checked:
    def __set_name__(self, owner, name):
        self.name = "_" + name

    def __get__(self, obj, objtype=None):
        return getattr(obj, self.name, None)

    def __set__(self, obj, value):
        setattr(obj, self.name, validate(value))

    def __delete__(self, obj):
        delattr(obj, self.name)


def validate(value):
    return value


class Holder:
    field = Checked()


def counting(n):
    for i in range(n):
        yield i


def work(local):
    local.value += 1
    d = Defaulting()
    d["abc"]
    table = {Key(1): "a", Key(2): "b"}
    table[Key(2)]
    Key(3) in table
    sorted([Key(3), Key(1), Key(2)])
    min([3, 1, 2], key=lambda x: -x)
    max((Key(i) for i in range(3)), key=lambda k: k.k)
    squares = [i * i for i in range(3)]
    {i: validate(i) for i in range(2)}
    h = Holder()
    h.field = 5
    h.field
    del h.field
    g = counting(5)
    next(g)
    del g  # closed unfinished: GeneratorExit thrown into its frame
    return squares


def in_thread(local):
    work(local)


def run(make_profile):
    local = Local()
    work(local)
    prof = make_profile()
    with prof:
        work(local)
        t = threading.Thread(target=in_thread, args=(local,))
        t.start()
        t.join()
    return prof
