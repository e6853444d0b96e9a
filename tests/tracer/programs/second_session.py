"""A session started inside a helper, after an earlier session on the same thread: the caller's
later calls belong to the caller, not to the helper that returned."""


def work(n):
    return sum(step(i) for i in range(n))


def step(i):
    return i * 2


def begin(make_profile):
    prof = make_profile()
    prof.start()
    return prof


def run(make_profile):
    first = make_profile()
    with first:
        work(3)
    prof = begin(make_profile)
    work(3)
    after()
    prof.stop()
    return prof


def after():
    return step(1)
