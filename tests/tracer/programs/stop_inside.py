"""A session started deep in a call chain and stopped deeper in another: frames open at the stop
end there, frames running at the start begin there."""


def a(make_profile):
    prof = b(make_profile)
    c(prof)
    return prof


def b(make_profile):
    prof = make_profile()
    prof.start()
    leaf()
    return prof


def c(prof):
    leaf()
    d(prof)


def d(prof):
    leaf()
    prof.stop()
    leaf()


def leaf():
    return 1


def run(make_profile):
    return a(make_profile)
