"""Threads made without threading.Thread.start's usual path: _thread.start_new_thread, a thread
whose target raises (threading.excepthook), a threading.Timer, and a thread started from
another thread started in the session."""

import _thread
import threading


def leaf(i):
    return i


def raw_target(done):
    leaf(1)
    done.release()


def raising():
    leaf(2)
    raise ValueError("in a thread")


def quiet_hook(args):
    leaf(3)


def nested_parent():
    t = threading.Thread(target=nested_child)
    t.start()
    t.join()


def nested_child():
    leaf(4)


def run(make_profile):
    old_hook = threading.excepthook
    threading.excepthook = quiet_hook
    try:
        prof = make_profile()
        with prof:
            done = _thread.allocate_lock()
            done.acquire()
            _thread.start_new_thread(raw_target, (done,))
            done.acquire()  # released by the thread's last call
            t = threading.Thread(target=raising)
            t.start()
            t.join()
            timer = threading.Timer(0.001, leaf, args=(5,))
            timer.start()
            timer.join()
            t = threading.Thread(target=nested_parent)
            t.start()
            t.join()
    finally:
        threading.excepthook = old_hook
    return prof
