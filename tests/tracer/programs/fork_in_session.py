"""A fork during the session: the child runs a little Python and leaves with os._exit; the
parent's trace is what the parent ran (the child's calls are not in it)."""

import os


def child_work():
    return sum(leaf(i) for i in range(3))


def leaf(i):
    return i


def run(make_profile):
    prof = make_profile()
    with prof:
        leaf(0)
        pid = os.fork()
        if pid == 0:
            try:
                child_work()
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        leaf(1)
    return prof
