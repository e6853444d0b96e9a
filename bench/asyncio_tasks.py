"""Cost of attributing asyncio Task steps (framescope.integrations._asyncio_tasks) on an asyncio-heavy
workload: many Tasks doing small steps between awaits (sleep(0), queues, gather, TaskGroup).

Cases, each in a fresh subprocess, alternated over rounds, median per case:
  untraced      - the workload alone
  noop_hook     - a PEP 523 hook that does nothing (the floor of any frame-hook tracer)
  traced        - framescope.profile() without Task attribution (_asyncio_tasks.ENABLED=False)
  traced_tasks  - framescope.profile() with it (the default)
Each case's time is both wall and CPU time (the workload is single-threaded: its process CPU
time is the loop's; on a machine shared with other work CPU time moves less with the load).
Prints each case's times and the ratio traced_tasks / traced (the cost of the attribution,
target <= 1.03), and writes bench/results/asyncio_tasks.json (asyncio_tasks_work<N>.json with
--work N: steps that compute something, as real Tasks do, rather than empty ones).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(BENCH_DIR, "results", "asyncio_tasks{}.json")  # "" or "_work<N>"
CASES = ("untraced", "noop_hook", "traced", "traced_tasks")


def workload(tasks: int, steps: int, work: int = 0) -> int:
    """``work``: iterations of a small computation in each step (0: empty steps, the worst
    case: the loop's own code is all there is)."""
    import asyncio

    def compute() -> int:
        return sum(i * i for i in range(work))

    async def producer(q: asyncio.Queue[int], n: int) -> None:
        for i in range(n):
            await q.put(i)
        await q.put(-1)

    async def consumer(q: asyncio.Queue[int]) -> int:
        total = 0
        while (item := await q.get()) >= 0:
            total += item * item + compute()
        return total

    async def stepper(n: int) -> int:
        acc = 0
        for i in range(n):
            acc += i + compute()
            await asyncio.sleep(0)
        return acc

    async def main() -> int:
        total = 0
        for _ in range(2):
            qs = [asyncio.Queue[int](maxsize=8) for _ in range(tasks // 4)]
            results = await asyncio.gather(
                *(stepper(steps) for _ in range(tasks // 2)),
                *(producer(q, steps) for q in qs), *(consumer(q) for q in qs))
            total += sum(r for r in results if r is not None)
            async with asyncio.TaskGroup() as tg:
                ts = [tg.create_task(stepper(steps // 4)) for _ in range(tasks // 4)]
            total += sum(t.result() for t in ts)
        return total

    return asyncio.run(main())


def worker(case: str, tasks: int, steps: int, work: int) -> tuple[float, float]:
    """(wall s, CPU s) of the workload under ``case``."""
    import framescope
    from framescope import _core
    from framescope.integrations import _asyncio_tasks

    workload(8, 10)  # warm imports
    t0, c0 = time.perf_counter(), time.process_time()
    if case == "untraced":
        workload(tasks, steps, work)
    elif case == "noop_hook":
        _core._noop_eval_hook(True)
        try:
            workload(tasks, steps, work)
        finally:
            _core._noop_eval_hook(False)
    else:
        # The time the program runs under the session (start and stop, which replays the
        # trace, are one-off costs of their own, not the recording's).
        _asyncio_tasks.ENABLED = case == "traced_tasks"
        prof = framescope.profile(cpu_time=False, memory_limit="2GiB")
        prof.start()
        t0, c0 = time.perf_counter(), time.process_time()
        workload(tasks, steps, work)
        elapsed = time.perf_counter() - t0, time.process_time() - c0
        prof.stop()
        return elapsed
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", choices=CASES)
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--work", type=int, default=0,
                    help="iterations of a small computation per step (0: empty steps)")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.tasks, args.steps, args.work)))
        return
    times: dict[str, list[float]] = {c: [] for c in CASES}
    cpu: dict[str, list[float]] = {c: [] for c in CASES}
    for _ in range(args.rounds):
        for case in CASES:
            out = subprocess.run([sys.executable, __file__, "--worker", case, "--tasks",
                                  str(args.tasks), "--steps", str(args.steps),
                                  "--work", str(args.work)],
                                 capture_output=True, text=True, check=True)
            wall, cpu_s = json.loads(out.stdout.strip().splitlines()[-1])
            times[case].append(wall)
            cpu[case].append(cpu_s)
    load = os.getloadavg()
    med = {c: statistics.median(v) for c, v in times.items()}
    best = {c: min(v) for c, v in times.items()}
    # Rounds alternate the cases, so a round's ratio compares runs made under the same load.
    paired = statistics.median(a / b for a, b in zip(times["traced_tasks"], times["traced"]))
    base = med["untraced"]
    for c in CASES:
        print(f"{c:>13}: {med[c] * 1e3:9.1f} ms  x{med[c] / base:5.2f} of untraced")
    cost = med["traced_tasks"] / med["traced"]
    print(f"Task attribution (wall): traced_tasks / traced = {cost:.3f} (medians), "
          f"{best['traced_tasks'] / best['traced']:.3f} (best runs), {paired:.3f} (median of "
          f"per-round ratios); target <= 1.03")
    cpu_med = {c: statistics.median(v) for c, v in cpu.items()}
    cpu_paired = statistics.median(a / b for a, b in zip(cpu["traced_tasks"], cpu["traced"]))
    for c in CASES:
        print(f"{c:>13}: {cpu_med[c] * 1e3:9.1f} ms CPU  x{cpu_med[c] / cpu_med['untraced']:5.2f}")
    cpu_cost = cpu_med["traced_tasks"] / cpu_med["traced"]
    print(f"Task attribution (CPU): {cpu_cost:.3f} (medians), {cpu_paired:.3f} (median of "
          f"per-round ratios); load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    results = RESULTS.format(f"_work{args.work}" if args.work else "")
    os.makedirs(os.path.dirname(results), exist_ok=True)
    with open(results, "w", encoding="utf-8") as f:
        json.dump({"date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                   "python": platform.python_version(), "load_average": os.getloadavg(),
                   "tasks": args.tasks, "steps": args.steps, "work": args.work,
                   "rounds": args.rounds, "load_average_end": load,
                   "cpu_median_s": cpu_med, "cpu_all_s": cpu,
                   "cpu_attribution_ratio": cpu_cost, "cpu_attribution_ratio_paired": cpu_paired,
                   "median_s": med, "best_s": best, "all_s": times, "attribution_ratio": cost,
                   "attribution_ratio_best": best["traced_tasks"] / best["traced"],
                   "attribution_ratio_paired": paired}, f, indent=1)
    print(f"wrote {results}")


if __name__ == "__main__":
    main()
