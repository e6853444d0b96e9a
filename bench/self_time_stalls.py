"""Stalls in the tracer's own trace: traced fib calls with far more self time than a call takes.

fib's calls are all alike (~70 ns of self time each, traced), so a call with more than
`--threshold-us` (default 30 us) of self time is time that was not the program's: the tracer's
own work at that call (mapping and faulting in a fresh chunk of events: ~90 us here), or the
machine's (an interrupt, another thread on the core). Each worker process traces fib(25)
`--reps` times in a fresh session and counts those calls, their summed self time and its share
of all self time, beside what the chunk pool mapped ahead (its refill thread) and on demand (on
the recording thread, inside the trace). `--pythons OLD NEW` compares two builds in alternating
processes. No target: it shows whether a change moved the tracer's stalls out of the trace.
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
RESULTS = os.path.join(BENCH_DIR, "results", "self_time_stalls.json")
sys.path.insert(0, BENCH_DIR)

import tracer_overhead as to  # noqa: E402  (the interpreters and the worker protocol)
from _results import machine_info, write_results  # noqa: E402


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def worker(reps: int, threshold_ns: int) -> dict[str, Any]:
    import framescope
    from framescope import _core

    stats = getattr(_core, "_chunk_pool_stats", None)
    pool_before = stats() if stats else None
    prof = framescope.profile()
    prof.start()
    for _ in range(reps):
        fib(25)
    prof.stop()
    pool_after = stats() if stats else None
    duration: dict[int, int] = {}
    children: dict[int, int] = {}
    for e in prof.trace.iter_events():
        if e.name.endswith(": fib"):
            duration[e.index] = e.duration_ns
            if e.parent is not None:
                children[e.parent] = children.get(e.parent, 0) + e.duration_ns
    selfs = [duration[i] - children.get(i, 0) for i in duration]
    stalls = [s for s in selfs if s > threshold_ns]
    out: dict[str, Any] = {
        "calls": len(selfs),
        "events": prof.trace.recorded_events,
        "median_self_ns": statistics.median(selfs),
        "stalls": len(stalls),
        "stall_ns": sum(stalls),
        "self_ns": sum(selfs),
    }
    if pool_before is not None and pool_after is not None:
        out["mapped_ahead"] = pool_after["mapped_ahead"] - pool_before["mapped_ahead"]
        out["mapped_on_demand"] = pool_after["mapped_on_demand"] - pool_before["mapped_on_demand"]
    return out


def median_of(results: list[dict[str, Any]], key: str) -> Optional[float]:
    values = [r[key] for r in results if key in r]
    return statistics.median(values) if values else None


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pythons", nargs="+", default=None,
                    help="interpreters (default: every 3.10-3.13 under ~/.pyenv); two of one "
                    "version compare builds")
    ap.add_argument("--processes", type=int, default=5, help="processes per interpreter")
    ap.add_argument("--reps", type=int, default=10, help="fib(25) runs per process")
    ap.add_argument("--threshold-us", type=float, default=30.0,
                    help="self time above which a fib call counts as a stall")
    ap.add_argument("--output", default=RESULTS, help="JSON results file")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    for name in ("processes", "reps", "threshold_us"):
        if getattr(args, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} must be positive")
    threshold_ns = int(args.threshold_us * 1000)
    if args.worker:
        print(json.dumps(worker(args.reps, threshold_ns)))
        return 0
    pythons = to.describe(args.pythons or to.find_pythons())
    started = datetime.datetime.now(datetime.timezone.utc)
    machine = machine_info()
    raw: dict[str, list[dict[str, Any]]] = {py.label: [] for py in pythons}
    for p in range(args.processes):  # alternating: a drift in load hits every build alike
        for py in pythons:
            cmd = [py.path, os.path.abspath(__file__), "--worker", "--reps", str(args.reps),
                   "--threshold-us", str(args.threshold_us)]
            result = to.run_json_worker(cmd, 600.0)
            raw[py.label].append(result)
            print(f"[{p + 1}/{args.processes}] {py.label}: "
                  f"{result.get('error') or str(result.get('stalls')) + ' stalls'}",
                  file=sys.stderr, flush=True)
    print(f"fib(25) x {args.reps} per process, {args.processes} processes; medians; a stall is a "
          f"call with more than {args.threshold_us:g} us of self time")
    print(f"{'python':10} {'calls':>9} {'self ns':>8} {'stalls':>7} {'stall ms':>9} "
          f"{'share':>7} {'chunks ahead':>13} {'on demand':>10}")
    summary: dict[str, Any] = {}
    for py in pythons:
        ok = [r for r in raw[py.label] if "error" not in r]
        if not ok:
            print(f"{py.label:10} error: {raw[py.label][0].get('error')}")
            continue
        share = statistics.median(r["stall_ns"] / r["self_ns"] for r in ok)
        row = {k: median_of(ok, k) for k in ("calls", "median_self_ns", "stalls", "stall_ns",
                                             "mapped_ahead", "mapped_on_demand")}
        row["share"] = share
        summary[py.label] = row

        def cell(key: str, width: int, scale: float = 1.0, digits: int = 0) -> str:
            v = row[key]
            return f"{'-':>{width}}" if v is None else f"{v / scale:>{width}.{digits}f}"

        print(f"{py.label:10} {cell('calls', 9)} {cell('median_self_ns', 8)} {cell('stalls', 7)} "
              f"{cell('stall_ns', 9, 1e6, 2)} {100 * share:>6.2f}% {cell('mapped_ahead', 13)} "
              f"{cell('mapped_on_demand', 10)}")
    result = {
        "benchmark": "self_time_stalls",
        "date": started.isoformat(timespec="seconds"),
        "machine": dict(machine, loadavg_end=os.getloadavg()),
        "settings": {"processes": args.processes, "reps": args.reps,
                     "threshold_us": args.threshold_us},
        "pythons": {py.label: {"path": py.path, "version": py.version} for py in pythons},
        "summary": summary,
        "raw": raw,
    }
    print(f"load average at start {machine['loadavg_start']}, at end "
          f"{result['machine']['loadavg_end']}")
    write_results(args.output, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
