"""Python special methods the interpreter calls (many through specialized instructions on 3.12+):
properties, __getitem__, __getattribute__, __getattr__, __setitem__, __len__, __iter__ and
__next__, operators, __hash__, __contains__, __bool__, descriptors, __call__; in loops warmed up
before the session."""


class Vec:
    def __init__(self, x):
        self.x = x

    @property
    def double(self):
        return self.x * 2

    def __getitem__(self, i):
        return self.x + i

    def __setitem__(self, i, v):
        self.x = v

    def __len__(self):
        return 1

    def __add__(self, other):
        return Vec(self.x + other.x)

    def __eq__(self, other):
        return self.x == other.x

    def __lt__(self, other):
        return self.x < other.x

    def __hash__(self):
        return hash(self.x)

    def __contains__(self, v):
        return v == self.x

    def __bool__(self):
        return True

    def __call__(self, y):
        return self.x + y


class Dynamic:
    def __getattribute__(self, name):
        return name

    def __getattr__(self, name):
        return name


class Fallback:
    def __getattr__(self, name):
        return name


class Counter:
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return self

    def __next__(self):
        if self.n == 0:
            raise StopIteration
        self.n -= 1
        return self.n


class Desc:
    def __get__(self, obj, owner=None):
        return 7

    def __set__(self, obj, value):
        pass


class HasDesc:
    d = Desc()


def work(n):
    v, w = Vec(1), Vec(2)
    d, f, h = Dynamic(), Fallback(), HasDesc()
    for i in range(n):
        v.double
        v[i]
        v[0] = i
        len(v)
        v + w
        v == w
        sorted([w, v])
        {v: 1}
        1 in v
        bool(v)
        v(i)
        d.anything
        f.missing
        h.d
        h.d = 1
        for _ in Counter(2):
            pass


def run(make_profile):
    work(50)  # specialize the sites
    prof = make_profile()
    with prof:
        work(3)
    return prof
