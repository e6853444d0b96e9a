"""What a schedule costs per step: waiting, warmup and recorded steps, as ratios in one run.

Issue 17 asks that waiting steps cost nothing measurable and warmup steps cost what a running
session costs. Each fresh process of the Python under test runs a training-like loop whose step
body is a small workload (`go` by default: many short Python calls) and times every step on the
process CPU clock (a step = its body plus `prof.step()`):

  untraced   the loop with no profiler
  session    the loop inside a plain running session (`framescope.profile()`, no schedule)
  wait       the NONE steps of `profile(schedule=schedule(wait=K, warmup=K, active=K, repeat=1))`
  warmup     the WARMUP steps of that schedule
  active     its RECORD steps (each one a ProfilerStep#N range)

The phases of one round run back to back in one process (untraced, session, then the scheduled
profile's wait, warmup and active phases), the rounds alternate the untraced and plain-session
loops before and after the scheduled one, and every figure is a median over the steps of every
round of every process. The first and last step of each phase are left out: they hold the
phase's transition (a session's start, the warmup's restart, the cycle's stop and
`on_trace_ready`), whose one-off costs are reported apart.

    python bench/schedule_overhead.py --pythons .venvs/py3.12/bin/python

Prints a table per Python and writes bench/results/schedule_overhead.json.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import importlib
import json
import os
import statistics
import sys
import time
from typing import Any, Callable, Optional

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import tracer_overhead as to  # noqa: E402

RESULTS = os.path.join(BENCH_DIR, "results", "schedule_overhead.json")
PHASES = ("untraced", "session", "wait", "warmup", "active")


# ---- worker -------------------------------------------------------------------------------------


def step_times(body: Callable[[], Any], steps: int, step: Callable[[], None]) -> list[float]:
    """CPU seconds of each of `steps` steps, a step being body() then step()."""
    out = []
    clock = time.process_time
    for _ in range(steps):
        c0 = clock()
        body()
        step()
        out.append(clock() - c0)
    return out


def inner(times: list[float]) -> list[float]:
    """The steps of a phase without its first and last (they hold the phase transitions)."""
    return times[1:-1]


def one_round(body: Callable[[], Any], k: int, session_first: bool) -> dict[str, Any]:
    import framescope

    def nothing() -> None:
        pass

    def plain_loops() -> dict[str, list[float]]:
        gc.collect()
        untraced = step_times(body, k, nothing)
        gc.collect()
        prof = framescope.profile()
        prof.start()
        session = step_times(body, k, prof.step)
        prof.stop()
        return {"untraced": inner(untraced), "session": inner(session)}

    result: dict[str, Any] = {}
    if session_first:
        result.update(plain_loops())
    gc.collect()
    ready: list[float] = []
    sched = framescope.schedule(wait=k, warmup=k, active=k, repeat=1)
    prof = framescope.profile(schedule=sched,
                              on_trace_ready=lambda p: ready.append(time.process_time()))
    prof.start()
    times = step_times(body, 3 * k, prof.step)
    c0 = time.process_time()
    prof.stop()
    stop_s = time.process_time() - c0
    # times[i] is step i's body plus the step() that ends it: the transitions into warmup, into
    # recording and out of it are in the last step of each phase (left out by inner()).
    result["wait"] = inner(times[:k])
    result["warmup"] = inner(times[k:2 * k])
    result["active"] = inner(times[2 * k:])
    result["transitions_s"] = {"into_warmup": times[k - 1], "into_active": times[2 * k - 1],
                               "end_of_cycle": times[3 * k - 1], "stop": stop_s}
    result["cycles_ready"] = len(ready)
    if not session_first:
        result.update(plain_loops())
    return result


def worker(workload: str, rounds: int, k: int, scale: float) -> dict[str, Any]:
    module = importlib.import_module(f"workloads.{workload}")

    def body() -> Any:
        return module.run(scale)

    body()  # warm-up: imports, caches, specialisation
    one_round(body, 3, True)  # and one small round: the first session maps its chunks
    return {"workload": workload,
            "rounds": [one_round(body, k, r % 2 == 0) for r in range(rounds)]}


def run_worker(py: to.Interpreter, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [py.path, os.path.abspath(__file__), "--worker", "--workload", args.workload,
           "--rounds", str(args.rounds), "--steps", str(args.steps), "--scale", str(args.scale)]
    result = to.run_json_worker(cmd, args.timeout)
    if "error" in result:
        return {"rounds": [], "error": result["error"]}
    return result


# ---- driver -------------------------------------------------------------------------------------


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    rounds = [rd for res in results for rd in res.get("rounds", [])]
    med: dict[str, Optional[float]] = {}
    for phase in PHASES:
        values = [t for rd in rounds for t in rd[phase]]
        med[phase] = statistics.median(values) if values else None

    def ratio(a: str, b: str) -> Optional[float]:
        x, y = med.get(a), med.get(b)
        return x / y if x and y else None

    transitions = {key: statistics.median(rd["transitions_s"][key] for rd in rounds)
                   for key in ("into_warmup", "into_active", "end_of_cycle", "stop")} \
        if rounds else {}
    return {
        "median_step_s": med,
        "wait_vs_untraced": ratio("wait", "untraced"),
        "warmup_vs_session": ratio("warmup", "session"),
        "active_vs_session": ratio("active", "session"),
        "session_vs_untraced": ratio("session", "untraced"),
        "transition_median_s": transitions,
        "cycles_ready_per_round": sorted({rd["cycles_ready"] for rd in rounds}),
        "rounds": len(rounds),
        "errors": [res["error"] for res in results if res.get("error")],
    }


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pythons", nargs="+", default=None,
                    help="interpreters (default: every 3.10-3.13 under ~/.pyenv)")
    ap.add_argument("--workload", default="go", help="the step body (a bench/workloads module)")
    ap.add_argument("--scale", type=float, default=0.05, help="workload size factor per step")
    ap.add_argument("--steps", type=int, default=40, help="steps per phase (K)")
    ap.add_argument("--rounds", type=int, default=4, help="rounds per process")
    ap.add_argument("--processes", type=int, default=2, help="fresh processes per Python")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--output", default=RESULTS)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        print(json.dumps(worker(args.workload, args.rounds, args.steps, args.scale)))
        return 0

    pythons = to.describe(args.pythons or to.find_pythons())
    raw: dict[str, list[dict[str, Any]]] = {}
    for n in range(args.processes):
        for py in pythons:
            res = run_worker(py, args)
            raw.setdefault(py.label, []).append(res)
            print(f"[process {n + 1}/{args.processes}] {py.label}: "
                  + (res.get("error") or f"{len(res['rounds'])} rounds"), file=sys.stderr,
                  flush=True)

    summary: dict[str, Any] = {}
    print(f"Per-step CPU time, median over steps, {args.workload} x{args.scale} per step; "
          f"limits: wait/untraced ~1.00 (nothing measurable), warmup/session ~1.00")
    print(f"{'python':<8} {'untraced':>10} {'wait/untr':>10} {'warm/sess':>10} "
          f"{'active/sess':>12} {'sess/untr':>10}  transitions (ms): into warmup, into active, "
          f"end of cycle, stop")
    for py in pythons:
        s = summarize(raw[py.label])
        summary[py.label] = {"path": py.path, **s}
        med = s["median_step_s"]["untraced"]
        tr = s["transition_median_s"]
        print(f"{py.label:<8} {to.fmt(med * 1e3 if med else None, 8, 3)}ms "
              f"{to.fmt(s['wait_vs_untraced'], 10, 3)} {to.fmt(s['warmup_vs_session'], 10, 3)} "
              f"{to.fmt(s['active_vs_session'], 12, 3)} {to.fmt(s['session_vs_untraced'], 10, 3)}"
              + ("  " + ", ".join(f"{tr[k] * 1e3:.2f}" for k in
                                  ("into_warmup", "into_active", "end_of_cycle", "stop"))
                 if tr else ""))
        for err in s["errors"]:
            print(f"   error: {err}")

    out = {
        "benchmark": "schedule_overhead",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": to.machine_info(),
        "settings": {"workload": args.workload, "scale": args.scale, "steps": args.steps,
                     "rounds": args.rounds, "processes": args.processes,
                     "clock": "process CPU time"},
        "summary": summary,
        "raw": raw,
    }
    to.write_results(args.output, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
