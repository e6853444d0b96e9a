"""Hook cost breakdown: instructions per Python call under callgrind, framescope vs. its floors.

Time ratios on a shared 2-core machine move by several percent from one process to the next;
instruction counts do not (callgrind counts the same total for the same binary and input,
whatever else the machine runs). This bench runs each workload under `valgrind --tool=callgrind`
once per configuration and reports, per recorded Python call:

- the instructions each configuration executes beyond the untraced run (`noop_hook`: a PEP 523
  hook that only chains, `clock_floor`: the same plus two TSC reads and two 16-byte stores,
  `framescope`: the tracer with its default options, `framescope_nocpu`: without the CPU-time
  sampler);
- what framescope adds beyond each floor, and the hook function's own (self) instructions;
- with `--annotate` and an extension built with `-Ccmake.define.FRAMESCOPE_PROFILING_SYMBOLS=ON`
  (same optimization, symbols kept), the hook's own instructions per call by source line, i.e.
  what each part of the hot path costs.

Only the workload is counted: the worker calls `os.getppid()` right before and right after it,
and callgrind dumps its counters at each call (`--dump-before=getppid`), so imports, the session's
start and its stop (replay) fall into other parts. Calls per run are counted by a framescope
session of the same workload outside valgrind (recorded events / 2: a call and a return each).

    python bench/hook_instructions.py --pythons .venvs/py3.12/bin/python [--workloads fib go]
    python bench/hook_instructions.py --pythons .venvs/py3.12/bin/python --annotate

Writes bench/results/hook_instructions.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Optional

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

from _callgrind import parse_part  # noqa: E402
from tracer_overhead import describe, find_pythons, machine_info, write_results  # noqa: E402
from workloads import ALL as ALL_WORKLOADS  # noqa: E402
from workloads import EXTRA as EXTRA_WORKLOADS  # noqa: E402

RESULTS = os.path.join(BENCH_DIR, "results", "hook_instructions.json")
CONFIGS = ("untraced", "noop_hook", "clock_floor", "framescope", "framescope_nocpu")
#: Scale per workload: small (callgrind runs ~50x slower), big enough to dwarf warm-up effects.
SCALES = {"fib": 0.1, "richards": 0.1, "nbody": 0.05, "deltablue": 0.1, "raytrace": 0.05,
          "chaos": 0.05, "go": 0.05}
#: Source files of the hook's hot path, for --annotate.
HOOK_SOURCES = ("frame_hook.cpp", "frame_hook.h", "thread_buffer.h", "tracer.h", "code_extra.h",
                "py_compat.h", "clock.h", "memory_hooks.h", "ia32intrin.h")
#: What each source file of the hot path stands for, for the per-part summary of --annotate.
PARTS = {
    "frame_hook.cpp": "the hook: stack check, register saves, dispatch, compares, depth, tail calls",
    "frame_hook.h": "the hook: per-thread state",
    "tracer.h": "the tracer's per-code decision (general path only)",
    "code_extra.h": "the code object's CodeExtra (co_extra, index, bounds)",
    "thread_buffer.h": "the 8-byte event format: window, pair slot, limit, write, publication",
    "py_compat.h": "CPython: recursion check, 3.12+ early exit, chaining and C recursion units",
    "clock.h": "the clock",
    "ia32intrin.h": "the clock (two rdtsc)",
    "memory_hooks.h": "memory variant",
}

WORKER = r"""
import importlib, os, sys
sys.path.insert(0, {bench!r})
config, workload, scale = {config!r}, {workload!r}, {scale!r}
mod = importlib.import_module("workloads." + workload)
import framescope
from framescope import _core
mod.run(scale * 0.1)  # warm: imports, specialization, code objects registered once
prof = None
if config in ("noop_hook", "clock_floor"):
    hook = getattr(_core, "_noop_eval_hook" if config == "noop_hook" else "_clock_floor_eval_hook")
    hook(True)
elif config.startswith("framescope"):
    prof = framescope.profile(cpu_time=(config != "framescope_nocpu"))
    prof.start()
    mod.run(scale * 0.1)  # registers this session's code objects (once per session)
    if os.environ.get("FRAMESCOPE_COUNT_CALLS"):  # count the run's calls alone
        prof.stop()
        prof = framescope.profile(cpu_time=False)
        prof.start()
os.getppid()  # callgrind dumps here: the part that follows is the workload alone
mod.run(scale)
os.getppid()
if prof is not None:
    prof.stop()
    if os.environ.get("FRAMESCOPE_COUNT_CALLS"):
        print("EVENTS", prof.trace.recorded_events)
elif config != "untraced":
    hook(False)
"""


def worker_source(config: str, workload: str, scale: float) -> str:
    return WORKER.format(bench=BENCH_DIR, config=config, workload=workload, scale=scale)


def count_calls(python: str, workload: str, scale: float) -> Optional[float]:
    """Calls in the counted part: a framescope session of the run alone, outside valgrind."""
    env = dict(os.environ, FRAMESCOPE_COUNT_CALLS="1")
    out = subprocess.run([python, "-c", worker_source("framescope_nocpu", workload, scale)],
                         capture_output=True, text=True, env=env, timeout=600)
    m = re.search(r"^EVENTS (\d+)$", out.stdout, re.M)
    if not m:
        return None
    return int(m.group(1)) / 2


def parse_costs(path: str) -> tuple[int, dict[str, int]]:
    """Total Ir of a callgrind part and self Ir per object file."""
    out = subprocess.run(["callgrind_annotate", "--threshold=100", "--inclusive=no", path],
                         capture_output=True, text=True, check=True).stdout
    total = 0
    per_object: dict[str, int] = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)$", line)
        if not m:
            continue
        ir = int(m.group(1).replace(",", ""))
        if "PROGRAM TOTALS" in m.group(2):
            total = ir
            continue
        obj = re.search(r"\[([^\]]+)\]\s*$", m.group(2))
        name = os.path.basename(obj.group(1)) if obj else "python (main object)"
        per_object[name] = per_object.get(name, 0) + ir
    return total, per_object


def run_callgrind(python: str, config: str, workload: str, scale: float, tmp: str,
                  annotate: bool) -> dict[str, Any]:
    out = os.path.join(tmp, f"{config}-{workload}.cg")
    cmd = ["valgrind", "--tool=callgrind", "--dump-before=getppid", f"--callgrind-out-file={out}"]
    if annotate:
        cmd += ["--compress-strings=no", "--compress-pos=no"]
    proc = subprocess.run(cmd + [python, "-c", worker_source(config, workload, scale)],
                          capture_output=True, text=True, timeout=3600)
    part = out + ".2"  # part 1: up to the first getppid; part 2: the workload; the rest: exit
    if proc.returncode != 0 or not os.path.exists(part):
        raise RuntimeError(f"callgrind run failed ({config}, {workload}): {proc.stderr[-800:]}")
    total, per_object = parse_costs(part)
    result: dict[str, Any] = {"ir": total, "per_object": per_object}
    if annotate and config == "framescope_nocpu":
        result["lines"] = parse_part(part, HOOK_SOURCES)[2]
    return result


def report(version: str, workload: str, calls: float, cells: dict[str, dict[str, Any]]) -> None:
    base = cells["untraced"]["ir"]

    def per_call(config: str) -> float:
        return (cells[config]["ir"] - base) / calls

    print(f"  {workload:10s} {calls:12,.0f} calls   instructions per call beyond untraced:")
    for config in CONFIGS[1:]:
        if config in cells:
            print(f"    {config:18s} {per_call(config):8.1f}")
    if not all(c in cells for c in CONFIGS):
        print_lines(cells, calls)
        return
    fs = per_call("framescope_nocpu")
    print(f"    framescope beyond no-op hook: {fs - per_call('noop_hook'):.1f}, beyond clock floor: "
          f"{fs - per_call('clock_floor'):.1f}; total Ir ratio fs/no-op: "
          f"{cells['framescope']['ir'] / cells['noop_hook']['ir']:.3f}, "
          f"floor/no-op: {cells['clock_floor']['ir'] / cells['noop_hook']['ir']:.3f}")
    core = {c: sum(v for k, v in cells[c]["per_object"].items() if k.startswith("_core"))
            for c in CONFIGS}
    print(f"    hook's own (_core) instructions per call: framescope {core['framescope'] / calls:.1f},"
          f" clock floor {core['clock_floor'] / calls:.1f}, no-op {core['noop_hook'] / calls:.1f}")
    print_lines(cells, calls)


def print_lines(cells: dict[str, dict[str, Any]], calls: float) -> None:
    """With --annotate: the hook's own instructions per call by part (source file), then by line."""
    lines = cells.get("framescope_nocpu", {}).get("lines")
    if lines:
        parts: dict[str, float] = {}
        for key, ir in lines.items():
            name = PARTS.get(key.split(":")[0], key.split(":")[0])
            parts[name] = parts.get(name, 0.0) + ir / calls
        print("    by part (framescope without the sampler; instructions per call and return):")
        for name, n in sorted(parts.items(), key=lambda kv: -kv[1]):
            print(f"      {n:6.1f}  {name}")
        print(f"      {sum(parts.values()):6.1f}  total")
        print("    by source line:")
        for key, ir in sorted(lines.items(), key=lambda kv: -kv[1])[:40]:
            if ir / calls >= 0.5:
                print(f"      {ir / calls:6.1f}  {key}")


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pythons", nargs="+", default=None,
                    help="interpreters with framescope installed (default: every 3.10-3.13)")
    ap.add_argument("--workloads", nargs="+", default=list(ALL_WORKLOADS),
                    choices=list(ALL_WORKLOADS) + list(EXTRA_WORKLOADS))
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS),
                    help="configurations to run (untraced is always run: the baseline)")
    ap.add_argument("--annotate", action="store_true",
                    help="per-line breakdown (needs FRAMESCOPE_PROFILING_SYMBOLS=ON)")
    ap.add_argument("--output", default=RESULTS)
    args = ap.parse_args(argv)
    if not shutil.which("valgrind") or not shutil.which("callgrind_annotate"):
        print("hook_instructions: valgrind is not installed (apt install valgrind)", file=sys.stderr)
        return 2
    pythons = describe(args.pythons or find_pythons())
    doc: dict[str, Any] = {"machine": machine_info(), "configs": list(CONFIGS), "results": {}}
    with tempfile.TemporaryDirectory(prefix="fs-callgrind-") as tmp:
        for py in pythons:
            path = py.path
            print(f"== {py.version} ({path})")
            per_py: dict[str, Any] = {}
            for workload in args.workloads:
                scale = SCALES.get(workload, 0.05)
                calls = count_calls(path, workload, scale)
                if not calls:
                    print(f"  {workload}: could not count calls (framescope not installed?)")
                    continue
                configs = ["untraced"] + [c for c in args.configs if c != "untraced"]
                cells = {c: run_callgrind(path, c, workload, scale, tmp, args.annotate)
                         for c in configs}
                report(py.version, workload, calls, cells)
                per_py[workload] = {"calls": calls, "scale": scale, "cells": cells}
            doc["results"][py.version] = per_py
    write_results(args.output, doc)
    print(f"results: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
