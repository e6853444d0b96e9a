"""A thread blocked when the session starts, released during it: its frames from the start end
when they return, and its calls after the release nest under them."""

import threading

go = threading.Event()
parked = threading.Event()


def worker():
    wait_here()
    for i in range(3):
        step(i)


def wait_here():
    parked.set()
    go.wait()


def step(i):
    return i


def run(make_profile):
    t = threading.Thread(target=worker)
    t.start()
    parked.wait()
    prof = make_profile()
    with prof:
        go.set()
        t.join()
    return prof
