"""A ThreadPoolExecutor with one worker (so each thread's calls are the same in every run):
submit, map, and a task that raises."""

from concurrent.futures import ThreadPoolExecutor


def task(x):
    return helper(x) * 2


def helper(x):
    return x + 1


def bad(x):
    raise ValueError(x)


def run(make_profile):
    prof = make_profile()
    with prof:
        with ThreadPoolExecutor(max_workers=1) as pool:
            futures = [pool.submit(task, i) for i in range(3)]
            for f in futures:
                f.result()
            list(pool.map(task, range(2)))
            try:
                pool.submit(bad, 1).result()
            except ValueError:
                pass
    return prof
