"""A daemon thread started in the session that is still running at its stop: its frames stay
open until the stop."""

import threading

stop = threading.Event()
running = threading.Event()


def spin():
    running.set()
    while not stop.wait(0.0005):
        tick()


def tick():
    return 1


def run(make_profile):
    prof = make_profile()
    with prof:
        t = threading.Thread(target=spin, daemon=True)
        t.start()
        running.wait()
    stop.set()
    t.join()
    return prof
