"""Threads started during the session, each with its own calls, from their first frame."""

import threading


def worker(n):
    total = 0
    for i in range(n):
        total += square(i)
    return total


def square(i):
    return i * i


def run(make_profile):
    prof = make_profile()
    with prof:
        threads = [threading.Thread(target=worker, args=(20,)) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return prof
