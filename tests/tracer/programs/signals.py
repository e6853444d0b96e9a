"""A Python signal handler running in the middle of the program's calls."""

import signal


def handler(signum, frame):
    in_handler()


def in_handler():
    return 1


def work():
    signal.raise_signal(signal.SIGUSR1)
    after()
    for _ in range(2):
        signal.raise_signal(signal.SIGUSR1)


def after():
    return 2


def run(make_profile):
    old = signal.signal(signal.SIGUSR1, handler)
    try:
        prof = make_profile()
        with prof:
            work()
    finally:
        signal.signal(signal.SIGUSR1, old)
    return prof
