"""Tracer overhead with every configuration in one process per workload, in Williams-square order.

The configurations take turns, so each ratio compares runs seconds apart in the same memory
layout.

bench/tracer_overhead.py gives every configuration processes of its own and pairs each traced
run with untraced runs of the same process; framescope ÷ the no-op hook is then a ratio of two
ratios from different processes, and a process's layout (ASLR, where the interpreter's and the
workload's objects land) moves it by ±5-10% on this machine. Here untraced, the no-op hook, the
clock floor and framescope (and any peer asked for) run in turn in the same process, round after
round. The order of each round is a row of a Williams square, which puts every configuration
before every other one equally often, so whatever a run leaves behind (caches, a respecialised
call site, the allocator's state) is spread over all of them. Each ratio is taken within a
round and the tables give the median over the rounds of every process. This is how issue 30's
held-out runs were measured. See bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import importlib
import math
import os
import statistics
import sys
import time
from typing import Any, Optional

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(BENCH_DIR, "results", "tracer_overhead_interleaved.json")
sys.path.insert(0, BENCH_DIR)

import tracer_overhead as to  # noqa: E402  (the runners, the interpreters, the worker protocol)
from _results import machine_info, write_results  # noqa: E402

#: What runs by default: the baseline, the two floors and framescope.
DEFAULT_CONFIGS = ("untraced", "noop_hook", "clock_floor", "framescope")
#: Configurations that can share a process with the others (torch.profiler's import and stop
#: take minutes at this scale; it stays in bench/tracer_overhead.py).
IN_PROCESS = tuple(c for c in to.RUNNERS if c != "torch")


def williams_rows(n: int) -> list[list[int]]:
    """The rows of a Williams design for n treatments: every treatment follows every other one
    equally often over the rows (n rows when n is even, 2n when it is odd)."""
    if n < 1:
        raise ValueError(f"williams_rows needs at least one treatment, got {n}")
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:
        first.append(lo if len(first) % 2 else hi)
        if len(first) % 2:
            hi -= 1
        else:
            lo += 1
    rows = [[(x + i) % n for x in first] for i in range(n)]
    if n % 2:
        rows += [row[::-1] for row in rows]
    return rows


# ==== worker: every configuration of one workload in this process ================================


def worker(workload: str, configs: list[str], rounds: int, scale: float, first_row: int
           ) -> dict[str, Any]:
    info: dict[str, Any] = {"workload": workload, "configs": configs, "rounds": []}
    skipped = {c: why for c in configs if (why := to.unavailable(c))}
    if skipped:
        info["skipped"] = skipped
        configs = [c for c in configs if c not in skipped]
    module = importlib.import_module(f"workloads.{workload}")

    def fn() -> Any:
        return module.run(scale)

    # One run of each configuration first, not timed: imports, the tracers' one-time setup, and
    # the call sites' specialisation under each hook.
    for config in configs:
        gc.collect()
        to.RUNNERS[config](fn)
    rows = williams_rows(len(configs))
    for r in range(rounds):
        row = rows[(first_row + r) % len(rows)]
        measured: dict[str, dict[str, float]] = {}
        for i in row:
            gc.collect()
            result = to.RUNNERS[configs[i]](fn)
            measured[configs[i]] = {"cpu": result["cpu"], "time": result["time"]}
            if result.get("dropped"):
                measured[configs[i]]["dropped"] = result["dropped"]
        info["rounds"].append({"order": [configs[i] for i in row], "runs": measured})
    return info


# ==== driver ======================================================================================


def collect(pythons: list[to.Interpreter], workloads: list[str], configs: list[str], rounds: int,
            processes: int, scale: float, timeout: float) -> dict[str, dict[str, list[Any]]]:
    """raw[label][workload] = one worker result per process."""
    raw: dict[str, dict[str, list[Any]]] = {}
    total, done, started = len(pythons) * len(workloads) * processes, 0, time.time()
    rows = len(williams_rows(len(configs)))
    for p in range(processes):  # processes outermost: a drift in load hits every cell alike
        for py in pythons:
            for workload in workloads:
                cmd = [py.path, os.path.abspath(__file__), "--worker", "--workloads", workload,
                       "--configs", *configs, "--rounds", str(rounds), "--scale", str(scale),
                       "--first-row", str(p * rounds % rows)]
                result = to.run_json_worker(cmd, timeout)
                raw.setdefault(py.label, {}).setdefault(workload, []).append(result)
                done += 1
                status = result.get("error") or (
                    f"{len(result['rounds'])} rounds" + (
                        f", skipped {sorted(result['skipped'])}" if result.get("skipped") else ""))
                print(f"[{done}/{total} {time.time() - started:5.0f}s] {py.label} {workload:9} "
                      f"{status}", file=sys.stderr, flush=True)
    return raw


def round_ratios(cell: list[Any], num: str, den: str, clock: str) -> list[float]:
    """num ÷ den within each round of each process of a cell."""
    out = []
    for res in cell:
        for rnd in res.get("rounds", []):
            runs = rnd["runs"]
            if num in runs and den in runs and runs[den][clock] > 0:
                out.append(runs[num][clock] / runs[den][clock])
    return out


def median(values: list[float]) -> Optional[float]:
    return statistics.median(values) if values else None


def spread(values: list[float]) -> str:
    """The middle half of the values, as ±half its width in percent of the median."""
    if len(values) < 4:
        return ""
    q1, _, q3 = statistics.quantiles(values, n=4)
    return f"±{50 * (q3 - q1) / statistics.median(values):.1f}%"


def geomean(values: list[float]) -> Optional[float]:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def fmt(v: Optional[float], digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def report(label: str, raw_py: dict[str, list[Any]], configs: list[str], clock: str
           ) -> tuple[str, dict[str, Any]]:
    traced = [c for c in configs if c != "untraced"]
    pairs = [("framescope", "noop_hook"), ("clock_floor", "noop_hook"),
             ("framescope", "clock_floor")]
    pairs = [(a, b) for a, b in pairs if a in configs and b in configs]
    head = (f"{'workload':10} {'untraced s':>10} " + " ".join(f"{to.SHORT.get(c, c):>8}"
                                                               for c in traced)
            + "".join(f" {to.SHORT[a] + '/' + to.SHORT[b]:>13}" for a, b in pairs))
    lines = [f"Python {label}: each configuration ÷ untraced, median over the rounds "
             f"({clock} time; spread = half the interquartile range)", head]
    summary: dict[str, Any] = {"workloads": {}}
    for workload, cell in raw_py.items():
        errors = [res["error"] for res in cell if res.get("error")]
        if errors:
            lines.append(f"{workload:10} error: {errors[0]}")
            continue
        base = median([rnd["runs"]["untraced"][clock] for res in cell
                       for rnd in res.get("rounds", []) if "untraced" in rnd["runs"]])
        row: dict[str, Any] = {"untraced_s": base, "rounds": sum(len(r["rounds"]) for r in cell)}
        cols = []
        for c in traced:
            values = round_ratios(cell, c, "untraced", clock)
            row[c] = median(values)
            cols.append(f"{fmt(row[c], 3):>8}")
        for a, b in pairs:
            values = round_ratios(cell, a, b, clock)
            row[f"{a}/{b}"] = median(values)
            row[f"{a}/{b} spread"] = spread(values)
            cols.append(f" {fmt(row[f'{a}/{b}'], 3):>6} {spread(values):>6}")
        dropped = [r["runs"][c].get("dropped", 0) for res in cell for r in res["rounds"]
                   for c in r["runs"]]
        if any(dropped):
            row["dropped"] = max(dropped)
        summary["workloads"][workload] = row
        lines.append(f"{workload:10} {fmt(base, 3):>10} " + " ".join(cols)
                     + (f"  (dropped {max(dropped)} events)" if any(dropped) else ""))
    lines += targets(summary)
    return "\n".join(lines), summary


def targets(summary: dict[str, Any]) -> list[str]:
    rows = summary["workloads"]
    lines = []
    fib = rows.get("fib", {})
    if fib.get("framescope/noop_hook") is not None:
        v = fib["framescope/noop_hook"]
        floor = fib.get("clock_floor/noop_hook")
        lines.append(f"  fib: framescope/no-op {v:.3f} (target <= {to.TARGET_FIB_VS_NOOP}: "
                     f"{to.verdict(v <= to.TARGET_FIB_VS_NOOP)})"
                     + (f"; the clock floor alone {floor:.3f}" if floor is not None else ""))
    others = [w for w in rows if w != "fib"]
    for key, name in (("framescope/noop_hook", "framescope/no-op"),
                      ("clock_floor/noop_hook", "floor/no-op"),
                      ("framescope/clock_floor", "framescope/floor")):
        gm = geomean([rows[w][key] for w in others if rows[w].get(key) is not None])
        if gm is None:
            continue
        summary[f"non_fib_geomean {key}"] = gm
        target = (f" (target <= {to.TARGET_NON_FIB_VS_NOOP}: "
                  f"{to.verdict(gm <= to.TARGET_NON_FIB_VS_NOOP)})"
                  if key == "framescope/noop_hook" else "")
        lines.append(f"  geomean over {', '.join(others)}: {name} {gm:.3f}{target}")
    return lines


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    to.add_pythons_and_workloads(ap)
    ap.add_argument("--configs", nargs="+", default=list(DEFAULT_CONFIGS),
                    choices=list(IN_PROCESS), metavar="NAME",
                    help=f"configurations (default: {' '.join(DEFAULT_CONFIGS)}; untraced is "
                    f"always added; any of {' '.join(IN_PROCESS)})")
    ap.add_argument("--rounds", type=int, default=None,
                    help="rounds per process (default: two Williams squares)")
    ap.add_argument("--processes", type=int, default=None,
                    help="processes per workload (default 2)")
    ap.add_argument("--scale", type=float, default=None, help="workload size factor (default 1)")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                    help="process CPU time (default) or wall time; both are kept in the JSON")
    ap.add_argument("--quick", action="store_true", help="smoke run: scale 0.1, 1 process")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per worker process")
    ap.add_argument("--output", default=RESULTS, help="JSON results file")
    ap.add_argument("--first-row", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if "untraced" not in args.configs:
        args.configs.insert(0, "untraced")
    args.configs = [c for c in IN_PROCESS if c in args.configs]  # one fixed order of treatments
    square = len(williams_rows(len(args.configs)))
    for name, value in (("--rounds", args.rounds), ("--processes", args.processes),
                        ("--scale", args.scale)):
        if value is not None and value <= 0:
            ap.error(f"{name} must be positive, got {value}")
    args.rounds = args.rounds or 2 * square
    args.processes = args.processes or (1 if args.quick else 2)
    args.scale = args.scale or (0.1 if args.quick else 1.0)
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if args.worker:
        import json

        print(json.dumps(worker(args.workloads[0], args.configs, args.rounds, args.scale,
                                args.first_row)))
        return 0
    clock = "cpu" if args.clock == "cpu" else "time"
    pythons = to.describe(args.pythons or to.find_pythons())
    started = datetime.datetime.now(datetime.timezone.utc)
    machine = machine_info()
    raw = collect(pythons, args.workloads, args.configs, args.rounds, args.processes, args.scale,
                  args.timeout)
    result: dict[str, Any] = {
        "benchmark": "tracer_overhead_interleaved",
        "date": started.isoformat(timespec="seconds"),
        "duration_s": round((datetime.datetime.now(datetime.timezone.utc) - started)
                            .total_seconds(), 1),
        "machine": dict(machine, loadavg_end=os.getloadavg()),
        "settings": {"configs": args.configs, "rounds": args.rounds,
                     "processes": args.processes, "scale": args.scale, "clock": args.clock},
        "targets": {"fib_vs_noop": to.TARGET_FIB_VS_NOOP,
                    "non_fib_vs_noop": to.TARGET_NON_FIB_VS_NOOP},
        "pythons": {py.label: {"path": py.path, "version": py.version} for py in pythons},
        "summary": {},
        "raw": raw,
    }
    for py in pythons:
        text, summary = report(py.label, raw.get(py.label, {}), args.configs, clock)
        result["summary"][py.label] = summary
        print(text + "\n")
    print(f"load average at start {result['machine']['loadavg_start']}, "
          f"at end {result['machine']['loadavg_end']}; {result['duration_s']} s")
    write_results(args.output, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
