"""Async generators and async context managers, driven by asyncio and by hand (aclose, athrow)."""

import asyncio
import contextlib


async def agen(n):
    try:
        for i in range(n):
            yield i
    finally:
        cleanup()


def cleanup():
    return 0


@contextlib.asynccontextmanager
async def resource():
    cleanup()
    yield 1
    cleanup()


async def main():
    async for _ in agen(2):
        pass
    async with resource():
        pass
    g = agen(5)
    await g.__anext__()
    await g.aclose()
    g = agen(5)
    await g.__anext__()
    try:
        await g.athrow(ValueError)
    except ValueError:
        pass


def run(make_profile):
    asyncio.run(main())
    prof = make_profile()
    with prof:
        asyncio.run(main())
    return prof
