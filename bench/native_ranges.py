#!/usr/bin/env python3
"""bench/native_ranges.py: builds and runs the C++ range benchmark, prints ns/range beside targets
and beside the clock floor (two clock reads and two stores, measured in the same run).

    python bench/native_ranges.py [--rebuild] [--repetitions N] [--build-dir DIR]

Configures a Release build with -DFRAMESCOPE_BUILD_BENCHMARKS=ON (in build-bench by default)
when the binary is missing or --rebuild is given, runs bench/native/range_benchmark with
--benchmark_format=json, prints the median ns per range of each case beside its target and
writes bench/results/native_ranges.json. Exits 1 when a case with a target misses it.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
from typing import Any, cast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "native_ranges.json"

# case name in the benchmark -> (label, target ns per range or None)
CASES = {
    "BM_RangeDisabled": ("disabled (nothing consumes ranges)", 2.0),
    "BM_RangeSession": ("enabled: session", 30.0),
    "BM_RangeObserver": ("one observer, no session", None),
    "BM_RangeSessionObserver": ("session + one observer", None),
    "BM_ClockFloor": ("floor: 2 clock reads + 2 stores", None),
}


def build(build_dir: Path, force: bool) -> Path:
    exe = build_dir / "bench" / "native" / "range_benchmark"
    if exe.exists() and not force:
        # still let ninja bring it up to date (cheap when nothing changed)
        subprocess.run(["cmake", "--build", str(build_dir)], check=True, stdout=subprocess.DEVNULL)
        return exe
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.run(
        ["cmake", "-S", str(ROOT), "-B", str(build_dir), *generator,
         "-DCMAKE_BUILD_TYPE=Release", "-DFRAMESCOPE_BUILD_PYTHON=OFF",
         "-DFRAMESCOPE_BUILD_TESTS=OFF", "-DFRAMESCOPE_BUILD_BENCHMARKS=ON"],
        check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(build_dir)], check=True)
    return exe


def run(exe: Path, repetitions: int) -> dict[str, Any]:
    out = subprocess.run(
        [str(exe), "--benchmark_format=json", f"--benchmark_repetitions={repetitions}"],
        check=True, capture_output=True, text=True)
    return cast(dict[str, Any], json.loads(out.stdout))


def to_ns(value: float, unit: str) -> float:
    return value * {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}[unit]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", type=Path, default=ROOT / "build-bench")
    ap.add_argument("--rebuild", action="store_true", help="reconfigure and rebuild first")
    ap.add_argument("--repetitions", type=int, default=5)
    args = ap.parse_args()

    exe = build(args.build_dir, args.rebuild)
    report = run(exe, args.repetitions)

    runs: dict[str, list[float]] = {}
    for b in report["benchmarks"]:
        if b.get("run_type") == "aggregate":
            continue
        name = b.get("run_name", b["name"])
        runs.setdefault(name, []).append(to_ns(b["real_time"], b["time_unit"]))
    floor = statistics.median(runs["BM_ClockFloor"]) if "BM_ClockFloor" in runs else None

    ok = True
    rows = []
    print(f"C++ range cost, {args.repetitions} runs ({exe.name}, Release); the target applies to "
          "the median")
    print(f"{'case':40} {'median':>7} {'min':>7} {'stddev':>7} {'÷floor':>7} {'target':>8}  "
          "status")
    for case, (label, target) in CASES.items():
        values = runs.get(case)
        if not values:
            print(f"{label:40} {'missing':>7}")
            ok = False
            continue
        ns, low = statistics.median(values), min(values)
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        vs_floor = ns / floor if floor else None
        status = "-" if target is None else ("ok" if ns <= target else "MISSED")
        ok &= status != "MISSED"
        tgt = "-" if target is None else f"<= {target:g}"
        vf = "-" if vs_floor is None else f"{vs_floor:.2f}"
        print(f"{label:40} {ns:7.2f} {low:7.2f} {sd:7.2f} {vf:>7} {tgt:>8}  {status}")
        rows.append({"case": case, "label": label, "ns_per_range": round(ns, 3),
                     "min_ns": round(low, 3), "stddev_ns": round(sd, 3),
                     "vs_clock_floor": None if vs_floor is None else round(vs_floor, 3),
                     "target_ns": target, "status": status})

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "benchmark": "bench/native/range_benchmark.cpp",
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "context": report.get("context", {})},
        "repetitions": args.repetitions,
        "results": rows,
    }, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
