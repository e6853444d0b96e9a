"""Two sessions in a row on a worker thread, the second started inside a helper the worker
returns from: per-thread state must not leak from the first into the second."""

import threading

result = []


def helper_start(make_profile):
    prof = make_profile()
    prof.start()
    return prof


def compute():
    return sum(part(i) for i in range(3))


def part(i):
    return i


def worker(make_profile):
    first = make_profile()
    with first:
        compute()
    prof = helper_start(make_profile)
    compute()
    prof.stop()
    result.append(prof)


def run(make_profile):
    t = threading.Thread(target=worker, args=(make_profile,))
    t.start()
    t.join()
    return result[0]
