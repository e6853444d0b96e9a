"""Coroutines driven by hand (send/throw/close), awaiting each other and custom awaitables."""


class Ready:
    """An awaitable whose __await__ is a generator."""

    def __init__(self, value):
        self.value = value

    def __await__(self):
        got = yield self.value
        return got


async def leaf(x):
    return await Ready(x) + 1


async def middle(x):
    a = await leaf(x)
    b = await leaf(a)
    return a + b


async def failing():
    await Ready(0)
    raise KeyError("x")


def drive(coro):
    value = coro.send(None)
    try:
        while True:
            value = coro.send(value)
    except StopIteration as stop:
        return stop.value


def work():
    drive(middle(1))
    c = failing()
    c.send(None)
    try:
        c.send(None)
    except KeyError:
        pass
    c = middle(2)
    c.send(None)
    c.close()
    c = middle(3)
    c.send(None)
    try:
        c.throw(ValueError)
    except ValueError:
        pass
