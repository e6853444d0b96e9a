"""A frame entered while one session records returns while a later session records: the
session is stopped and the next one started inside a deeper frame, which then returns. Its
return belongs to the earlier session: the later session's calls stay under their callers, and
later calls at the outer levels are not roots."""

import framescope


def work(n):
    return [step(i) for i in range(n)]


def step(i):
    return i + 1


def switch(first, make_profile):
    # Entered while `first` records; returns while the compared session records.
    first.stop()
    prof = make_profile()
    prof.start()
    return prof


def middle(first, make_profile):
    prof = deeper(first, make_profile)
    work(2)  # a call of middle, not of the function that called it
    return prof


def deeper(first, make_profile):
    prof = switch(first, make_profile)
    work(1)
    return prof


def outer(first, make_profile):
    prof = middle(first, make_profile)
    work(3)
    return prof


def run(make_profile):
    first = framescope.profile()
    first.start()
    prof = outer(first, make_profile)
    work(2)  # a call of run
    after()
    prof.stop()
    return prof


def after():
    return work(1)
