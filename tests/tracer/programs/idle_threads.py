"""A thread blocked in a wait during the whole session still appears, with its open frames."""

import threading

release = threading.Event()
ready = threading.Event()


def idle_worker():
    ready.set()
    wait_for_release()


def wait_for_release():
    release.wait()


def busy(n):
    return sum(i for i in range(n))


def run(make_profile):
    t = threading.Thread(target=idle_worker, name="idle")
    t.start()
    ready.wait()
    prof = make_profile()
    with prof:
        busy(10)
    release.set()
    t.join()
    return prof
