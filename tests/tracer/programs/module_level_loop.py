"""Many calls made directly by a frame that was running before the session (no framescope frame
between): each is a call at the hook's outermost level, with builtins in between."""


def small(i):
    return i + 1


def run(make_profile):
    prof = make_profile()
    prof.start()
    total = 0
    for i in range(200):
        total += small(i)
        len("x")
    prof.stop()
    return prof
