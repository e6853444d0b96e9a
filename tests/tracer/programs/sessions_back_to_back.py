"""Sessions one after another on the same thread with other backends and options before the one
compared: nothing of an earlier session may leak into a later one."""

import framescope


def work(n):
    return [leaf(i) for i in range(n)]


def leaf(i):
    return i


def begin(make_profile):
    prof = make_profile()
    prof.start()
    return prof


def run(make_profile):
    for backend, c_calls in (("frame_hook", True), ("fallback", False), ("frame_hook", False)):
        with framescope.profile(backend=backend, c_calls=c_calls):
            work(2)
    prof = begin(make_profile)
    work(3)
    prof.stop()
    return prof
