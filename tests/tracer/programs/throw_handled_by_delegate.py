"""throw() into a `yield from` / `await` chain whose innermost delegate handles the exception and
returns: the delegating frames resume from the delegate's return value (on 3.11 without a call
event for that resume). Short and deep chains, generators and coroutines, and asyncio: a
TaskGroup's cancellation handled inside an awaited coroutine."""

import asyncio
import types


def leaf(x):
    return x


def handler():
    try:
        yield 1
    except ValueError:
        leaf(0)
        return "handled"
    yield 2


def middle():
    r = yield from handler()
    leaf(r)
    yield 3
    leaf(4)


def chain(n):
    if n == 0:
        r = yield from handler()
    else:
        r = yield from chain(n - 1)
    leaf(n)
    return r


def drive_chain(depth):
    g = chain(depth)
    next(g)
    try:
        g.throw(ValueError)
    except StopIteration as e:
        leaf(e.value)


@types.coroutine
def suspend():
    yield "suspended"


async def handling_coro():
    try:
        await suspend()
    except KeyError:
        leaf(1)
        return 5
    return 6


async def awaiting_coro():
    r = await handling_coro()
    leaf(r)
    await suspend()
    return r


async def child_that_cleans_up(started):
    try:
        started.set()
        await asyncio.sleep(10)
    except asyncio.CancelledError:
        leaf(2)
        raise


async def cancelled_work():
    try:
        await asyncio.sleep(10)
    except asyncio.CancelledError:
        leaf(3)
        return "cancel handled"


async def awaits_handler(started):
    r = await cancelled_work()  # handles the CancelledError thrown into this chain
    leaf(r)


async def task_group_main():
    started = asyncio.Event()
    try:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(child_that_cleans_up(started))
            await started.wait()
            raise RuntimeError("stop")
    except Exception:  # the group of the RuntimeError
        leaf(5)


async def cancel_main():
    started = asyncio.Event()

    async def wrapper():
        started.set()
        await awaits_handler(started)

    t = asyncio.create_task(wrapper())
    await started.wait()
    await asyncio.sleep(0)
    t.cancel()
    await t


def work():
    g = middle()
    next(g)
    g.throw(ValueError)  # handler returns; middle resumes and yields 3
    try:
        next(g)
    except StopIteration:
        pass
    drive_chain(3)
    drive_chain(200)
    c = awaiting_coro()
    c.send(None)
    c.throw(KeyError)  # handling_coro returns; awaiting_coro resumes and suspends again
    try:
        c.send(None)
    except StopIteration:
        pass
    asyncio.run(cancel_main())
    if hasattr(asyncio, "TaskGroup"):  # 3.11+
        asyncio.run(task_group_main())


def run(make_profile):
    prof = make_profile()
    with prof:
        work()
    return prof
