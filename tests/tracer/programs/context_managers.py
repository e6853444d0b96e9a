"""with statements: class-based and contextlib.contextmanager (generator-based) managers, nested,
ExitStack, suppress, and a body that raises."""

import contextlib


class Managed:
    def __enter__(self):
        return opened()

    def __exit__(self, *exc):
        closed()
        return False


def opened():
    return 1


def closed():
    return 0


@contextlib.contextmanager
def scope(n):
    opened()
    try:
        yield n
    finally:
        closed()


def work():
    with Managed():
        with scope(1):
            opened()
    with contextlib.ExitStack() as stack:
        stack.enter_context(scope(2))
        stack.callback(closed)
    with contextlib.suppress(KeyError):
        with scope(3):
            raise KeyError("k")
