"""Objects whose __init__ raises (sometimes) at a warmed, specialized site: the frame unwinds
through the exception, the caller catches it."""


class Picky:
    def __init__(self, x):
        if x % 3 == 0:
            raise ValueError(x)
        self.x = check(x)


def check(x):
    return x


def build(n):
    made = 0
    for i in range(n):
        try:
            Picky(i)
            made += 1
        except ValueError:
            pass
    return made


def run(make_profile):
    build(100)
    prof = make_profile()
    with prof:
        build(12)
    return prof
