"""A session started inside a helper that returns right away; the caller goes on."""


def begin(make_profile):
    prof = make_profile()
    prof.start()
    return prof


def work(n):
    return [step(i) for i in range(n)]


def step(i):
    return i + 1


def run(make_profile):
    prof = begin(make_profile)
    work(3)
    prof.stop()
    return prof
