"""asyncio: tasks, gather, sleep(0), an async generator, wait_for, a task's exception."""

import asyncio


async def produce(n):
    for i in range(n):
        await asyncio.sleep(0)
        yield i


async def consume(n):
    total = 0
    async for v in produce(n):
        total += v
    return total


async def boom():
    await asyncio.sleep(0)
    raise RuntimeError("boom")


async def main():
    results = await asyncio.gather(consume(3), consume(2))
    task = asyncio.create_task(consume(1))
    await task
    await asyncio.wait_for(consume(2), timeout=10)
    try:
        await boom()
    except RuntimeError:
        pass
    return results


def run(make_profile):
    asyncio.run(main())
    prof = make_profile()
    with prof:
        asyncio.run(main())
    return prof
