"""A session started inside a generator: the generator frame yields (its slice ends), runs again
later (a new slice), and the session stops elsewhere."""


def gen(make_profile):
    prof = make_profile()
    prof.start()
    inside()
    yield prof
    inside()
    yield None


def inside():
    return 1


def run(make_profile):
    g = gen(make_profile)
    prof = next(g)
    inside()
    next(g)
    inside()
    prof.stop()
    return prof
