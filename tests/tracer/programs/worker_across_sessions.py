"""A worker thread started while one session records, blocked waiting for work when the next
session starts: the frames it entered in the first session return in the second, and the jobs
it runs then belong to its loop, not to Thread.run."""

import queue
import threading

import framescope

items: "queue.Queue[int | None]" = queue.Queue()
waiting = threading.Semaphore(0)
done = threading.Event()


def wait_for_item():
    waiting.release()
    return items.get()


def job(i):
    return helper(i) * 2


def helper(i):
    return i + 1


def worker_loop():
    while True:
        item = wait_for_item()
        if item is None:
            break
        job(item)
        if item == 2:
            done.set()


def run(make_profile):
    first = framescope.profile()
    first.start()
    t = threading.Thread(target=worker_loop)
    t.start()
    items.put(0)
    items.put(1)
    for _ in range(3):  # the worker took both items and waits for the next one
        waiting.acquire()
    first.stop()
    prof = make_profile()
    prof.start()
    items.put(1)
    items.put(2)
    done.wait()
    prof.stop()
    items.put(None)
    t.join()
    return prof
