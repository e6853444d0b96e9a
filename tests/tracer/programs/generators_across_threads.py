"""A generator started on the main thread and resumed on a worker thread: each resume is a slice
of the thread that ran it."""

import threading


def numbers():
    for i in range(4):
        yield square(i)


def square(i):
    return i * i


def run(make_profile):
    prof = make_profile()
    with prof:
        g = numbers()
        next(g)
        t = threading.Thread(target=lambda: [next(g), next(g)])
        t.start()
        t.join()
        next(g)
    return prof
