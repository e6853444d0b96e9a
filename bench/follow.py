#!/usr/bin/env python3
"""bench/follow.py: what following child processes costs under ``framescope run``.

    python bench/follow.py [--repeat N] [--children N]

Times, in one run and interleaved, whole commands (wall time, best of --repeat):

* ``children``: a program that runs N short Python children one after another
  (``subprocess.run([sys.executable, "-c", "pass"])``): plain python, ``framescope run
  --no-follow`` and ``framescope run`` (each child then imports framescope, records, saves its
  trace, and the parent merges it). The difference per child is what following costs a child.
* ``pool``: a spawn ``Pool(4)`` mapping 64 small tasks, the same three ways.

Prints the times and ratios, and writes bench/results/follow.json. Not a test: the figures
depend on the machine (and its load); compare ratios from one run.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from _results import machine_info, write_results  # bench/_results.py (this script's directory)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "follow.json"

CHILDREN = """
    import subprocess, sys
    for _ in range(int(sys.argv[1])):
        subprocess.run([sys.executable, "-c", "pass"], check=True)
"""

POOL = """
    import multiprocessing as mp

    def task(n):
        return sum(i * i for i in range(n))

    if __name__ == "__main__":
        with mp.get_context("spawn").Pool(4) as pool:
            pool.map(task, [2000] * 64, chunksize=1)
"""


def timed(cmd: list[str], cwd: str) -> float:
    env = dict(os.environ)
    env.pop("FRAMESCOPE_FOLLOW", None)
    t = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--children", type=int, default=20)
    args = ap.parse_args()
    py = sys.executable
    run = [py, "-m", "framescope", "run", "--limit", "0", "-o", "t.fstrace"]
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "children.py").write_text(textwrap.dedent(CHILDREN))
        Path(tmp, "pool.py").write_text(textwrap.dedent(POOL))
        cases = {
            "children": ["children.py", str(args.children)],
            "pool": ["pool.py"],
        }
        for case, argv in cases.items():
            ways = {
                "python": [py, *argv],
                "framescope run --no-follow": [*run, "--no-follow", *argv],
                "framescope run": [*run, *argv],
            }
            best = {way: float("inf") for way in ways}
            for _ in range(args.repeat):  # interleaved: the machine's load hits all ways alike
                for way, cmd in ways.items():
                    best[way] = min(best[way], timed(cmd, tmp))
            results[case] = best
    print(f"{'case':10} {'way':28} {'best s':>8} {'vs python':>10}")
    for case, best in results.items():
        for way, seconds in best.items():
            print(f"{case:10} {way:28} {seconds:8.3f} {seconds / best['python']:9.2f}x")
    per_child_ms = (results["children"]["framescope run"]
                    - results["children"]["framescope run --no-follow"]) / args.children * 1e3
    print(f"following costs {per_child_ms:.0f} ms per short child "
          "(import framescope, start, stop, save, merge)")
    write_results(RESULTS, {
        "machine": machine_info(),
        "load_average": os.getloadavg(),
        "repeat": args.repeat,
        "children": args.children,
        "best_seconds": results,
        "follow_ms_per_child": per_child_ms,
    })


if __name__ == "__main__":
    main()
