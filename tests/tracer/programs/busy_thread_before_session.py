"""A thread already running a loop of calls when the session starts, stopped during it."""

import threading

stop = threading.Event()
looping = threading.Event()


def worker():
    while not stop.is_set():
        tick()
        looping.set()


def tick():
    return sum(range(10))


def run(make_profile):
    t = threading.Thread(target=worker)
    t.start()
    looping.wait()
    prof = make_profile()
    with prof:
        for _ in range(3):
            tick()
        stop.set()
        t.join()
    return prof
