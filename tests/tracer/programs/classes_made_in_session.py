"""Classes created during the session and instantiated in hot loops (3.13 specializes such
`Cls(...)` sites), including an __init__ bound under another name, and a factory site that sees
several classes."""


def make_class(n):
    class Made:
        def __init__(self, x):
            self.x = helper(x)

    Made.__name__ = f"Made{n}"
    return Made


def helper(x):
    return x


def init_function(self, x):
    self.x = helper(x)


class Renamed:
    __init__ = init_function


def build(cls, n):
    for i in range(n):
        cls(i)


def run(make_profile):
    for _ in range(20):
        Renamed(1)  # warm the site below's code... and this one
    prof = make_profile()
    with prof:
        a, b = make_class(1), make_class(2)
        build(a, 20)
        build(b, 20)
        build(Renamed, 20)
        for i in range(20):
            Renamed(i)
    return prof
