"""Threads that hand work to each other: a queue between a producer and a consumer, a condition
variable, a barrier, a timer."""

import queue
import threading


def produce(q, n):
    for i in range(n):
        q.put(item(i))
    q.put(None)


def consume(q, out):
    while True:
        v = q.get()
        if v is None:
            break
        out.append(item(v))


def item(i):
    return i


def run(make_profile):
    prof = make_profile()
    with prof:
        q = queue.Queue()
        out = []
        threads = [threading.Thread(target=produce, args=(q, 5)),
                   threading.Thread(target=consume, args=(q, out))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        barrier = threading.Barrier(2)
        t = threading.Thread(target=barrier.wait)
        t.start()
        barrier.wait()
        t.join()
        done = threading.Event()
        timer = threading.Timer(0.001, lambda: done.set())
        timer.start()
        done.wait()
        timer.join()
    return prof
