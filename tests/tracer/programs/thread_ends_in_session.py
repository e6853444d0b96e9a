"""A thread started before the session that finishes during it: its frames from the start end
when they return (run, _bootstrap_inner, _bootstrap), whatever follows on other threads."""

import threading

go = threading.Event()
started = threading.Event()


def worker():
    started.set()
    go.wait()
    finish()


def finish():
    return sum(range(3))


def run(make_profile):
    t = threading.Thread(target=worker)
    t.start()
    started.wait()
    prof = make_profile()
    with prof:
        go.set()
        t.join()
        after()
    return prof


def after():
    return 1
