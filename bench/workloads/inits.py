"""Micro: instances of a class with a plain Python __init__ (3.13 inlines such calls)."""


class P:
    def __init__(self, x, y):
        self.x = x
        self.y = y


def run(scale=1.0):
    s = 0
    for i in range(int(200_000 * scale)):
        p = P(i, i)
        s += p.x
    return s
