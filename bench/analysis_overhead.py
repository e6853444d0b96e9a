"""What CPU-time sampling and memory profiling add to a framescope session, as ratios in one run.

For each workload, three sessions of framescope run in fresh processes of the Python under test
(tracer_overhead.py's worker, traced runs alternating with untraced ones in the same process):
  framescope_nocpu  the tracer alone (cpu_time=False)
  framescope        the default session: the tracer plus the CPU clock sampler thread
  framescope_mem    the tracer plus profile_memory=True (allocation counting), no CPU sampling
Each traced run is divided by its neighbouring untraced runs (process CPU time by default, all
threads included: the sampler thread's own CPU counts). The cost of a feature is the ratio of
two such ratios: framescope / framescope_nocpu (limit 1.03), framescope_mem / framescope_nocpu
(limit 1.5 on the allocation-heavy workload "alloc"). Prints a table per Python and writes
bench/results/analysis_overhead.json.

    python bench/analysis_overhead.py --pythons .venvs/py3.12/bin/python --processes 2 --runs 3
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
from typing import Any, Optional

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import tracer_overhead as to  # noqa: E402

RESULTS = os.path.join(BENCH_DIR, "results", "analysis_overhead.json")
CONFIGS = ("framescope_nocpu", "framescope", "framescope_mem")
WORKLOADS = ("fib", "richards", "go", "alloc")
LIMIT_CPU = 1.03  # issue 17: CPU time costs at most 3% more
LIMIT_MEMORY = 1.5  # issue 17: memory profiling at most 1.5x the session without it


def cell_ratio(cells: dict[str, list[dict[str, Any]]], config: str) -> Optional[float]:
    values = to.pair_ratios(cells.get(config, []))
    return statistics.median(values) if values else None


def relative(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a / b if a is not None and b else None


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pythons", nargs="+", default=None,
                    help="interpreters (default: every 3.10-3.13 under ~/.pyenv)")
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    ap.add_argument("--runs", type=int, default=3, help="timed runs per process")
    ap.add_argument("--processes", type=int, default=2, help="fresh processes per cell")
    ap.add_argument("--scale", type=float, default=1.0, help="workload size factor")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--output", default=RESULTS)
    args = ap.parse_args(argv)

    pythons = to.describe(args.pythons or to.find_pythons())
    raw: dict[str, dict[str, dict[str, list[dict[str, Any]]]]] = {}
    # Configurations interleaved within each round of processes: load changes hit all three.
    for py in pythons:
        raw[py.label] = {w: {c: [] for c in CONFIGS} for w in args.workloads}
        for _ in range(args.processes):
            for workload in args.workloads:
                for config in CONFIGS:
                    res = to.run_worker(py, workload, config, args.runs, args.scale, args.timeout)
                    raw[py.label][workload][config].append(res)

    summary: dict[str, Any] = {}
    for py in pythons:
        print(f"== Python {py.label} ({py.path}): process CPU time, traced / untraced, paired")
        print(f"{'workload':<10} {'fs-noCPU':>9} {'fs':>9} {'fs+mem':>9} {'CPU cost':>9} "
              f"{'mem cost':>9}")
        rows = {}
        for workload in args.workloads:
            cells = raw[py.label][workload]
            r = {c: cell_ratio(cells, c) for c in CONFIGS}
            cpu = relative(r["framescope"], r["framescope_nocpu"])
            mem = relative(r["framescope_mem"], r["framescope_nocpu"])
            rows[workload] = {**r, "cpu_cost": cpu, "memory_cost": mem}
            print(f"{workload:<10} " + " ".join(to.fmt(r[c], 9) for c in CONFIGS)
                  + f" {to.fmt(cpu, 9, 3)} {to.fmt(mem, 9, 3)}")
            for c in CONFIGS:
                for res in cells[c]:
                    if res.get("error") or res.get("skipped"):
                        print(f"   {c}: {res.get('error') or res.get('skipped')}")
        cpu_costs = [v["cpu_cost"] for v in rows.values() if v["cpu_cost"]]
        alloc = rows.get("alloc", {}).get("memory_cost")
        worst_cpu = max(cpu_costs) if cpu_costs else None
        print(f"CPU sampling: worst {to.fmt(worst_cpu, 6, 3)} (limit {LIMIT_CPU}); memory on "
              f"alloc: {to.fmt(alloc, 6, 3)} (limit {LIMIT_MEMORY})\n")
        summary[py.label] = {"path": py.path, "rows": rows, "worst_cpu_cost": worst_cpu,
                             "alloc_memory_cost": alloc}

    out = {
        "benchmark": "analysis_overhead",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": to.machine_info(),
        "settings": {"runs": args.runs, "processes": args.processes, "scale": args.scale,
                     "clock": "process CPU time", "limits": {"cpu": LIMIT_CPU,
                                                             "memory": LIMIT_MEMORY}},
        "summary": summary,
        "raw": raw,
    }
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
