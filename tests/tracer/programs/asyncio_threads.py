"""asyncio handing work to threads (to_thread, run_in_executor) and, on 3.11+, a TaskGroup whose
task fails and cancels its siblings."""

import asyncio
import sys


def blocking(i):
    return i * 2


async def sleeper():
    await asyncio.sleep(1)


async def failing():
    await asyncio.sleep(0)
    raise KeyError("task")


async def main():
    await asyncio.to_thread(blocking, 1)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, blocking, 2)
    if sys.version_info >= (3, 11):
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(sleeper())
                tg.create_task(failing())
        except BaseException:
            pass


def run(make_profile):
    prof = make_profile()
    with prof:
        asyncio.run(main())
    return prof
