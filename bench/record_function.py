"""ns per framescope.record_function range (context manager, decorator; with and without a
session) beside torch.profiler.record_function, per Python. Writes bench/results/record_function.json.

Each case runs in a fresh subprocess of the Python under test (`--worker` mode of this file).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import glob
import importlib
import json
import os
import platform
import subprocess
import sys
import time
from typing import Any, Callable, Optional

from _results import write_results  # bench/_results.py (this script's directory)

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(BENCH_DIR, "results", "record_function.json")
TARGET_NS_SESSION = 300.0  # framescope range with a session

# case -> (library, form, session); "session" names what is recording while ranges run.
CASES: dict[str, tuple[str, str, str]] = {
    "fs_cm_off": ("framescope", "cm", "none"),
    "fs_cm_session": ("framescope", "cm", "session"),
    "fs_cm_session_stack": ("framescope", "cm", "session+stack"),
    "fs_deco_off": ("framescope", "deco", "none"),
    "fs_deco_session": ("framescope", "deco", "session"),
    "fs_deco_session_stack": ("framescope", "deco", "session+stack"),
    "torch_cm_off": ("torch", "cm", "none"),
    "torch_cm_profiler": ("torch", "cm", "session"),
    "torch_deco_off": ("torch", "deco", "none"),
    "torch_deco_profiler": ("torch", "deco", "session"),
}


# ==== worker ======================================================================================


def record_function_of(library: str) -> Callable[[str], Any]:
    if library == "framescope":
        import framescope

        return framescope.record_function
    import torch.profiler

    return torch.profiler.record_function


def loop_cm(rf: Callable[[str], Any], n: int) -> int:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        with rf("x"):
            pass
    return time.perf_counter_ns() - t0


def loop_empty(n: int) -> int:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        pass
    return time.perf_counter_ns() - t0


def plain() -> None:
    pass


def loop_call(fn: Callable[[], None], n: int) -> int:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return time.perf_counter_ns() - t0


class Session:
    """What records while ranges run: nothing, a framescope session or torch.profiler."""

    def __init__(self, library: str, kind: str) -> None:
        self.library, self.kind = library, kind
        self.active: Any = None

    def __enter__(self) -> Session:
        if self.kind == "none":
            return self
        if self.library == "framescope":
            import framescope

            self.active = framescope.profile(with_stack=self.kind == "session+stack").start()
        else:
            import torch.profiler as tp

            self.active = tp.profile(activities=[tp.ProfilerActivity.CPU])
            self.active.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.active is None:
            return
        if self.library == "framescope":
            self.active.stop()
        else:
            self.active.__exit__(None, None, None)
        self.active = None


def measure(case: str, n: int, repeats: int) -> dict[str, Any]:
    library, form, kind = CASES[case]
    rf = record_function_of(library)
    decorated = rf("x")(plain) if form == "deco" else None
    per_range, baseline = [], []
    with Session(library, kind):  # warm-up: first-call costs, lazy imports, caches
        loop_cm(rf, 1000) if decorated is None else loop_call(decorated, 1000)
    for _ in range(repeats):
        gc.collect()
        with Session(library, kind):
            elapsed = loop_cm(rf, n) if decorated is None else loop_call(decorated, n)
        per_range.append(elapsed / n)
        # What the same loop costs without a range: an empty body, or a plain call.
        base = loop_empty(n) if decorated is None else loop_call(plain, n)
        baseline.append(base / n)
    return {"ns": per_range, "baseline_ns": baseline, "n": n}


def worker(case: str, n: int, repeats: int) -> dict[str, Any]:
    library = CASES[case][0]
    try:
        importlib.import_module(library)
    except Exception as e:
        return {"case": case, "skipped": f"{library} not importable: {type(e).__name__}: {e}"}
    return dict(measure(case, n, repeats), case=case)


# ==== driver ======================================================================================


def find_pythons() -> list[str]:
    found = glob.glob("/root/.pyenv/versions/3.1[0-3].*/bin/python")
    return sorted(found, key=lambda p: [int(x) for x in p.split("/")[-3].split(".")])


def python_version(path: str) -> str:
    return subprocess.run([path, "-c", "import platform; print(platform.python_version())"],
                          check=True, capture_output=True, text=True).stdout.strip()


def run_case(python: str, case: str, n: int, repeats: int, timeout: float) -> dict[str, Any]:
    cmd = [python, os.path.abspath(__file__), "--worker", case, "-n", str(n),
           "--repeats", str(repeats)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"case": case, "error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"case": case, "error": f"exit {proc.returncode}: " + " | ".join(tail)}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def cell(result: dict[str, Any]) -> tuple[str, str]:
    """(ns per range, net of the loop) as table text; min over repeats."""
    if "ns" not in result:
        return "-", "-"
    ns = min(result["ns"])
    net = ns - min(result["baseline_ns"])
    return f"{ns:.0f}", f"{net:.0f}"


def report(label: str, path: str, results: dict[str, dict[str, Any]]) -> str:
    lines = [f"== Python {label} ({path}) — ns per range, min of repeats (net = minus the same "
             "loop without a range) ==",
             f"{'library':11} {'form':10} {'recording':14} {'ns':>7} {'net ns':>7}"]
    notes = set()
    for case, (library, form, kind) in CASES.items():
        res = results.get(case, {})
        ns, net = cell(res)
        shown_kind = {"none": "nothing", "session": "session" if library == "framescope"
                      else "torch.profiler", "session+stack": "session+stack"}[kind]
        lines.append(f"{library:11} {'decorator' if form == 'deco' else 'with':10} "
                     f"{shown_kind:14} {ns:>7} {net:>7}")
        if "skipped" in res or "error" in res:
            notes.add(str(res.get("skipped") or res.get("error")))
    target = results.get("fs_cm_session", {})
    if "ns" in target:
        ns = min(target["ns"])
        lines.append(f"  framescope range with a session: {ns:.0f} ns (target <= "
                     f"{TARGET_NS_SESSION:.0f}: {'ok' if ns <= TARGET_NS_SESSION else 'MISSED'})")
    lines += [f"  {note}" for note in sorted(notes)]
    return "\n".join(lines)


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pythons", nargs="+", default=None,
                    help="interpreters to run (default: every 3.10-3.13 under ~/.pyenv)")
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES),
                    metavar="NAME", help=f"cases (default: all: {' '.join(CASES)})")
    ap.add_argument("-n", type=int, default=None, help="ranges per timed loop (default 200000)")
    ap.add_argument("--repeats", type=int, default=None, help="timed loops per case (default 7)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 20000 ranges, 3 repeats")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per worker process")
    ap.add_argument("--output", default=RESULTS, help="JSON results file")
    ap.add_argument("--worker", metavar="CASE", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.n = args.n or (20_000 if args.quick else 200_000)
    args.repeats = args.repeats or (3 if args.quick else 7)
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.n, args.repeats)))
        return 0
    started = datetime.datetime.now(datetime.timezone.utc)
    load_start = os.getloadavg()
    out: dict[str, Any] = {
        "benchmark": "record_function",
        "date": started.isoformat(timespec="seconds"),
        "machine": {"node": platform.node(), "cores": os.cpu_count(),
                    "kernel": platform.release(), "loadavg_start": load_start},
        "settings": {"n": args.n, "repeats": args.repeats},
        "target_ns_session": TARGET_NS_SESSION,
        "pythons": {},
    }
    for path in args.pythons or find_pythons():
        label = python_version(path)
        while label in out["pythons"]:
            label += "'"
        results = {case: run_case(path, case, args.n, args.repeats, args.timeout)
                   for case in args.cases}
        out["pythons"][label] = {"path": path, "results": results}
        print(report(label, path, results) + "\n", flush=True)
    out["machine"]["loadavg_end"] = os.getloadavg()
    print(f"load average at start {load_start}, at end {out['machine']['loadavg_end']}")
    write_results(args.output, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
