"""A session started and stopped on a worker thread while the main thread waits in join()."""

import threading

result = []


def worker(make_profile):
    prof = make_profile()
    with prof:
        compute(5)
    result.append(prof)


def compute(n):
    return sum(square(i) for i in range(n))


def square(i):
    return i * i


def run(make_profile):
    t = threading.Thread(target=worker, args=(make_profile,))
    t.start()
    t.join()
    return result[0]
