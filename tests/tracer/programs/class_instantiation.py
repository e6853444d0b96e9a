"""Objects built in hot loops: on 3.13 a specialized `Cls(...)` site enters __init__ without the
PEP 523 hook (CALL_ALLOC_AND_ENTER_INIT). Sites warmed before the session and sites that
specialize during it; subclasses, __init__ that calls helpers, __new__ + __init__."""


class Point:
    def __init__(self, x, y):
        self.x = x
        self.y = norm(x, y)


def norm(x, y):
    return x * x + y * y


class Point3(Point):
    def __init__(self, x, y, z):
        super().__init__(x, y)
        self.z = z


class WithNew:
    def __new__(cls, v):
        return super().__new__(cls)

    def __init__(self, v):
        self.v = v


class Plain:
    pass


def build(n):
    out = []
    for i in range(n):
        out.append(Point(i, i))
        Point3(i, i, i)
        WithNew(i)
        Plain()
    return out


def cold(n):
    for i in range(n):
        Point(i, 1)


def run(make_profile):
    build(100)  # the sites in build() specialize before the session
    prof = make_profile()
    with prof:
        build(50)
        cold(50)  # these sites specialize during the session
    return prof
