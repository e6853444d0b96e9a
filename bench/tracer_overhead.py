"""Tracer overhead: framescope vs. the no-op frame hook and peer tracers, per Python, as ratios.

Every measurement runs in a fresh subprocess of the Python under test (`--worker` mode of this
same file); the driver collects raw timings, prints one table per Python and writes
bench/results/tracer_overhead.json. See bench/README.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import glob
import importlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Optional

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(BENCH_DIR, "results", "tracer_overhead.json")
sys.path.insert(0, BENCH_DIR)

from _results import machine_info, write_results  # noqa: E402,F401  (to.write_results, to.machine_info)
from workloads import ALL as ALL_WORKLOADS  # noqa: E402
from workloads import EXTRA as EXTRA_WORKLOADS  # noqa: E402
from workloads import REAL as REAL_WORKLOADS  # noqa: E402

#: Configurations, in table order. "untraced" is the baseline of every ratio.
CONFIGS = (
    "untraced",
    "noop_hook",
    "clock_floor",
    "framescope",
    "framescope_c",
    "framescope_fallback",
    "cprofile",
    "yappi",
    "viztracer",
    "torch",
)
SHORT = {
    "noop_hook": "no-op",
    "clock_floor": "floor",
    "framescope": "fs",
    "framescope_c": "fs+C",
    "framescope_fallback": "fs-fb",
    "framescope_nocpu": "fs-noCPU",
    "framescope_mem": "fs+mem",
    "framescope_excluded": "fs-excl",
    "cprofile": "cProf",
    "yappi": "yappi",
    "viztracer": "viz",
    "torch": "torch",
}
FRAMESCOPE_CONFIGS = ("framescope", "framescope_c", "framescope_fallback")
#: VizTracer ring-buffer entries (one per finished call, C calls included). Big enough for any
#: run here; the driver checks it against the calls framescope counted and flags overflows.
VIZ_ENTRIES = 40_000_000

#: Timed runs per process of torch.profiler (at most).
TORCH_RUNS = 1
#: Below this many events (~8 MiB) the chunks prefaulted at start are not all used and their
#: RSS would be charged to too few events.
MIN_EVENTS_FOR_BYTES = 600_000

TARGET_FIB = 1.8            # fib(25) ratio on 3.11-3.13
TARGET_FIB_VS_NOOP = 1.12   # fib(25) framescope / no-op hook (issue 30)
TARGET_NON_FIB_VS_NOOP = 1.04  # geomean of framescope / no-op hook over the other workloads (issue 30)
TARGET_GEOMEAN = 1.3        # real workloads, framescope
TARGET_BYTES_PER_EVENT = 16.0


# ==== worker: one configuration of one workload in this process ==================================

Runner = Callable[[Callable[[], Any]], dict[str, Any]]


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def timed(fn: Callable[[], Any]) -> dict[str, float]:
    """Wall time and CPU time (user + system, all threads) of one call. CPU time is what the
    tables use by default: on a loaded 2-core machine it does not count time spent descheduled."""
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    t1, c1 = time.perf_counter(), time.process_time()
    return {"time": t1 - t0, "cpu": c1 - c0}


def run_untraced(fn: Callable[[], Any]) -> dict[str, Any]:
    before = rss_bytes()
    t = timed(fn)
    return {**t, "rss_growth": rss_bytes() - before}


def limit_hook_runner(name: str) -> Runner:
    """Runs under one of framescope's benchmark-only limit hooks (`_core.<name>`)."""

    def run(fn: Callable[[], Any]) -> dict[str, Any]:
        from framescope import _core

        hook = getattr(_core, name)
        hook(True)
        try:
            return timed(fn)
        finally:
            hook(False)

    return run


def framescope_runner(**options: Any) -> Runner:
    def run(fn: Callable[[], Any]) -> dict[str, Any]:
        import framescope

        prof = framescope.profile(**options)
        before = rss_bytes()
        prof.start()
        started = rss_bytes() - before  # the chunks prefaulted at start and the session's setup
        t = timed(fn)
        # Read before stop(): stop hands the chunks back and builds the replayed trace.
        grown = rss_bytes() - before
        t0 = time.perf_counter()
        prof.stop()
        stop_s = time.perf_counter() - t0
        trace = prof.trace
        return {
            **t,
            "stop_s": stop_s,
            "events": trace.recorded_events,
            "dropped": trace.dropped_events,
            "rss_growth": grown,
            "rss_growth_at_start": started,
            "backend": prof.backend,
        }

    return run


def run_cprofile(fn: Callable[[], Any]) -> dict[str, Any]:
    import cProfile

    prof = cProfile.Profile()
    prof.enable()
    t = timed(fn)
    prof.disable()
    return t


def run_yappi(fn: Callable[[], Any]) -> dict[str, Any]:
    import yappi  # type: ignore[import-untyped]

    yappi.set_clock_type("wall")
    yappi.start()
    t = timed(fn)
    yappi.stop()
    yappi.clear_stats()
    return t


def run_viztracer(fn: Callable[[], Any]) -> dict[str, Any]:
    from viztracer import VizTracer  # type: ignore[import-untyped]

    tracer = VizTracer(tracer_entries=VIZ_ENTRIES, verbose=0)
    tracer.start()
    t = timed(fn)
    tracer.stop()
    tracer.clear()
    return {**t, "entries": VIZ_ENTRIES}


def run_torch(fn: Callable[[], Any]) -> dict[str, Any]:
    import torch.profiler as tp

    prof: Any = tp.profile(activities=[tp.ProfilerActivity.CPU], with_stack=True)
    prof.__enter__()
    t = timed(fn)
    t0 = time.perf_counter()
    prof.__exit__(None, None, None)
    return {**t, "stop_s": time.perf_counter() - t0}


RUNNERS: dict[str, Runner] = {
    "untraced": run_untraced,
    "noop_hook": limit_hook_runner("_noop_eval_hook"),
    "clock_floor": limit_hook_runner("_clock_floor_eval_hook"),
    "framescope": framescope_runner(),
    "framescope_c": framescope_runner(c_calls=True),
    "framescope_fallback": framescope_runner(backend="fallback"),
    # bench/analysis_overhead.py: what CPU sampling and memory profiling add
    "framescope_nocpu": framescope_runner(cpu_time=False),
    "framescope_mem": framescope_runner(cpu_time=False, profile_memory=True),
    # ... and what a frame left out by exclude_files costs (every frame of the workloads)
    "framescope_excluded": framescope_runner(
        cpu_time=False, exclude_files=[os.path.join(BENCH_DIR, "workloads", "*")]),
    "cprofile": run_cprofile,
    "yappi": run_yappi,
    "viztracer": run_viztracer,
    "torch": run_torch,
}
#: The limit configurations and the benchmark-only hook each installs.
LIMIT_HOOKS = {"noop_hook": "_noop_eval_hook", "clock_floor": "_clock_floor_eval_hook"}
#: Module a configuration needs, and how its absence is reported.
NEEDS = {
    "noop_hook": "framescope",
    "clock_floor": "framescope",
    "framescope": "framescope",
    "framescope_c": "framescope",
    "framescope_fallback": "framescope",
    "framescope_nocpu": "framescope",
    "framescope_mem": "framescope",
    "framescope_excluded": "framescope",
    "yappi": "yappi",
    "viztracer": "viztracer",
    "torch": "torch",
}


def unavailable(config: str) -> Optional[str]:
    """Why `config` cannot run in this interpreter, or None."""
    module = NEEDS.get(config)
    if module is None:
        return None
    try:
        importlib.import_module(module)
    except Exception as e:  # torch may fail with more than ImportError
        return f"{module} not importable: {type(e).__name__}: {e}"
    hook = LIMIT_HOOKS.get(config)
    if hook is not None:
        from framescope import _core

        if not hasattr(_core, hook):
            return f"this framescope build has no _core.{hook}"
    return None


def worker(workload: str, config: str, runs: int, scale: float) -> dict[str, Any]:
    info: dict[str, Any] = {"workload": workload, "config": config, "runs": []}
    reason = unavailable(config)
    if reason:
        info["skipped"] = reason
        return info
    module = importlib.import_module(f"workloads.{workload}")

    def fn() -> Any:
        return module.run(scale)

    fn()  # warm-up, untraced: imports, caches, specialisation and the workload's own memory
    if config == "torch":
        runs = min(runs, TORCH_RUNS)  # its stop takes ~4 us per event: minutes per run
    # Traced runs alternate with untraced ones in the same process (U T U T ... U), so that each
    # traced run has a baseline measured seconds apart: a change of machine load then moves
    # both and cancels in their ratio.
    paired = config != "untraced"
    if paired:
        info["base_runs"] = []
    for _ in range(runs):
        if paired:
            gc.collect()
            info["base_runs"].append(run_untraced(fn))
        gc.collect()
        info["runs"].append(RUNNERS[config](fn))
    if paired:
        gc.collect()
        info["base_runs"].append(run_untraced(fn))
    return info


# ==== driver ======================================================================================


@dataclasses.dataclass
class Interpreter:
    path: str
    version: str  # e.g. "3.11.7"
    label: str    # version, made unique when two paths have the same version


def find_pythons() -> list[str]:
    found = glob.glob("/root/.pyenv/versions/3.1[0-3].*/bin/python")
    return sorted(found, key=lambda p: [int(x) for x in p.split("/")[-3].split(".")])


def describe(paths: list[str]) -> list[Interpreter]:
    out: list[Interpreter] = []
    for path in paths:
        version = subprocess.run(
            [path, "-c", "import platform; print(platform.python_version())"],
            check=True, capture_output=True, text=True).stdout.strip()
        label = version
        n = 2
        while any(i.label == label for i in out):
            label = f"{version}#{n}"
            n += 1
        out.append(Interpreter(path, version, label))
    return out


def run_worker(py: Interpreter, workload: str, config: str, runs: int, scale: float,
               timeout: float) -> dict[str, Any]:
    cmd = [py.path, os.path.abspath(__file__), "--worker", "--workloads", workload,
           "--configs", config, "--runs", str(runs), "--scale", str(scale)]
    result = run_json_worker(cmd, timeout)
    if "error" in result:
        return {"workload": workload, "config": config, "runs": [], "error": result["error"]}
    return result


def run_json_worker(cmd: list[str], timeout: float) -> dict[str, Any]:
    """Runs a worker process (PYTHONHASHSEED=0) and returns the JSON object on its last line
    that starts with "{", or {"error": ...} saying why there is none."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, PYTHONHASHSEED="0"))
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": f"exit {proc.returncode}: " + " | ".join(tail)}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def collect(pythons: list[Interpreter], workloads: list[str], configs: list[str], runs: int,
            processes: int, scale: float, timeout: float) -> dict[str, Any]:
    """raw[label][workload][config] = list of worker results (one per process)."""
    raw: dict[str, dict[str, dict[str, list[dict[str, Any]]]]] = {}
    total = len(pythons) * len(workloads) * len(configs) * processes
    done = 0
    started = time.time()
    # Rounds outermost and configs innermost: a drift in machine load hits every config alike.
    for rnd in range(processes):
        for py in pythons:
            for workload in workloads:
                for config in configs:
                    result = run_worker(py, workload, config, runs, scale, timeout)
                    raw.setdefault(py.label, {}).setdefault(workload, {}).setdefault(
                        config, []).append(result)
                    done += 1
                    status = result.get("skipped") or result.get("error") or ", ".join(
                        f"{r['time']:.3f}/{r['cpu']:.3f}" for r in result["runs"])
                    print(f"[{done}/{total} {time.time() - started:5.0f}s] round {rnd + 1} "
                          f"{py.label} {workload:9} {config:20} {status}", file=sys.stderr,
                          flush=True)
    return raw


# ---- analysis ------------------------------------------------------------------------------------


#: Which timing the tables use: "cpu" (process CPU time) or "time" (wall); set by --clock.
CLOCK = "cpu"


def samples(cell: list[dict[str, Any]], key: Optional[str] = None) -> list[float]:
    key = key or CLOCK
    return [r[key] for res in cell for r in res.get("runs", []) if r.get(key) is not None]


def stat(values: list[float], how: str) -> Optional[float]:
    if not values:
        return None
    return min(values) if how == "min" else statistics.median(values)


def why_missing(cell: list[dict[str, Any]]) -> str:
    for res in cell:
        if res.get("skipped"):
            return f"skipped: {res['skipped']}"
        if res.get("error"):
            return f"error: {res['error']}"
    return "no data"


def pair_ratios(cell: list[dict[str, Any]]) -> list[float]:
    """Each traced run over the mean of the untraced runs just before and after it (same
    process)."""
    out = []
    for res in cell:
        base = res.get("base_runs", [])
        for i, run in enumerate(res.get("runs", [])):
            if i + 1 < len(base):
                out.append(run[CLOCK] / ((base[i][CLOCK] + base[i + 1][CLOCK]) / 2))
    return out


def ratio(cells: dict[str, list[dict[str, Any]]], config: str, how: str) -> Optional[float]:
    """Traced / untraced. "paired": median of pair_ratios(); "min"/"median": that statistic of
    the traced runs over the same statistic of the untraced config's runs."""
    if config == "untraced":
        return 1.0 if samples(cells.get("untraced", [])) else None
    if how == "paired":
        values = pair_ratios(cells.get(config, []))
        return statistics.median(values) if values else None
    base = stat(samples(cells.get("untraced", [])), how)
    value = stat(samples(cells.get(config, [])), how)
    return value / base if value is not None and base else None


def ratios(raw_py: dict[str, dict[str, list[dict[str, Any]]]], how: str
           ) -> dict[str, dict[str, Optional[float]]]:
    return {workload: {config: ratio(cells, config, how) for config in cells}
            for workload, cells in raw_py.items()}


def base_seconds(cells: dict[str, list[dict[str, Any]]]) -> Optional[float]:
    """Seconds of one untraced run: the median of the untraced config's runs."""
    values = samples(cells.get("untraced", []))
    return statistics.median(values) if values else None


def geomean(values: list[float]) -> Optional[float]:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def bytes_per_event(cell: list[dict[str, Any]], untraced: list[dict[str, Any]]
                    ) -> tuple[Optional[float], Optional[float]]:
    """RSS growth over recorded events in the first traced run of each process (the chunk pool
    is still empty there; later sessions reuse its chunks and grow RSS less): as measured, and
    net of the growth of the first untraced run (the workload's own allocations)."""
    firsts = [res["runs"][0] for res in cell
              if res.get("runs") and res["runs"][0].get("events", 0) >= MIN_EVENTS_FOR_BYTES]
    if not firsts:
        return None, None
    own = [res["runs"][0].get("rss_growth", 0) for res in untraced if res.get("runs")]
    own_growth = statistics.median(own) if own else 0
    raw = min(r["rss_growth"] / r["events"] for r in firsts)
    net = min((r["rss_growth"] - own_growth) / r["events"] for r in firsts)
    return raw, net


def bytes_fit(raw_py: dict[str, dict[str, list[dict[str, Any]]]], config: str = "framescope"
              ) -> Optional[tuple[float, float, int]]:
    """Least-squares line through (recorded events, RSS growth) of the first traced run of every
    process, over all workloads: (bytes per event, fixed bytes per session, points). The slope
    is the memory an event costs; the intercept is what a session costs whatever it records."""
    points = [(r["events"], r["rss_growth"]) for cells in raw_py.values()
              for res in cells.get(config, []) for r in res.get("runs", [])[:1]
              if r.get("events", 0) >= MIN_EVENTS_FOR_BYTES]
    if len({x for x, _ in points}) < 2:
        return None
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    slope = (sum((x - mx) * (y - my) for x, y in points)
             / sum((x - mx) ** 2 for x, _ in points))
    return slope, my - slope * mx, len(points)


def events_per_run(cell: list[dict[str, Any]]) -> Optional[float]:
    values = samples(cell, "events")
    return statistics.median(values) if values else None


def overhead_ns_per_call(raw_cells: dict[str, list[dict[str, Any]]], config: str,
                         how: str) -> Optional[float]:
    """(traced - untraced) time per Python call: (ratio - 1) x untraced seconds / calls, with
    calls = the Python events framescope recorded / 2 (the no-op hook records nothing)."""
    base = base_seconds(raw_cells)
    r = ratio(raw_cells, config, how)
    events = events_per_run(raw_cells.get("framescope", []))
    if base is None or r is None or not events:
        return None
    return (r - 1) * base / (events / 2) * 1e9


def fmt(v: Optional[float], width: int = 6, digits: int = 2) -> str:
    return f"{v:{width}.{digits}f}" if v is not None else f"{'-':>{width}}"


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def report(py: Interpreter, raw_py: dict[str, dict[str, list[dict[str, Any]]]],
           configs: list[str], how: str) -> tuple[str, dict[str, Any]]:
    table = ratios(raw_py, how)
    shown = [c for c in configs if c != "untraced"]
    lines = [f"== Python {py.label} ({py.path}) — {how} ratios, {'CPU' if CLOCK == 'cpu' else 'wall'}"
             " time, ratio to untraced =="]
    head = f"{'workload':10} {'untraced s':>10} " + " ".join(f"{SHORT[c]:>6}" for c in shown)
    lines += [head + f" {'fs/no-op':>8} {'fs/floor':>8}", "-" * (len(head) + 18)]
    for workload, row in table.items():
        base = base_seconds(raw_py[workload])
        fs, noop, floor = row.get("framescope"), row.get("noop_hook"), row.get("clock_floor")
        vs_noop = fs / noop if fs and noop else None
        vs_floor = fs / floor if fs and floor else None
        lines.append(f"{workload:10} {fmt(base, 10, 3)} "
                     + " ".join(fmt(row.get(c)) for c in shown)
                     + f" {fmt(vs_noop, 8, 3)} {fmt(vs_floor, 8, 3)}")
    summary: dict[str, Any] = {"ratios": table}
    real = [w for w in table if w in REAL_WORKLOADS]
    if real:
        gm = {c: geomean([v for w in real if (v := table[w].get(c)) is not None])
              if all(table[w].get(c) for w in real) else None for c in shown}
        summary["geomean_real"] = gm
        lines.append(f"{'geomean':10} {'':10} " + " ".join(fmt(gm[c]) for c in shown)
                     + f"   (over {len(real)} real workloads)")
    lines.append("")
    # Missing cells, once per configuration.
    for c in shown:
        gaps = {why_missing(raw_py[w].get(c, [])) for w in table if table[w].get(c) is None}
        if gaps:
            lines.append(f"  {SHORT[c]}: " + "; ".join(sorted(gaps))[:300])
    lines += targets(py, raw_py, table, summary, how)
    return "\n".join(lines), summary


def non_fib_geomean(table: dict[str, dict[str, Optional[float]]], base: str) -> Optional[float]:
    """Geomean over the workloads other than fib of framescope's ratio to `base`'s."""
    ratios = [fs / b for w, cells in table.items() if w != "fib"
              for fs, b in [(cells.get("framescope"), cells.get(base))] if fs and b]
    return math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None


def targets(py: Interpreter, raw_py: dict[str, dict[str, list[dict[str, Any]]]],
            table: dict[str, dict[str, Optional[float]]], summary: dict[str, Any],
            how: str) -> list[str]:
    lines: list[str] = []
    fib = table.get("fib", {})
    fs, noop, floor = fib.get("framescope"), fib.get("noop_hook"), fib.get("clock_floor")
    if fs is not None:
        strict = py.version.split(".")[:2] != ["3", "10"]
        goal = f"target <= {TARGET_FIB}x" + ("" if strict else ", not set for 3.10")
        ok = fs <= TARGET_FIB or not strict
        lines.append(f"  fib(25): framescope {fs:.2f}x ({goal}: {verdict(ok)})"
                     + (f"; no-op hook {noop:.2f}x; framescope/no-op {fs / noop:.3f} "
                        f"(target <= {TARGET_FIB_VS_NOOP}: {verdict(fs / noop <= TARGET_FIB_VS_NOOP)})"
                        if noop else ""))
        if floor is not None and noop:
            lines.append(f"  fib(25): clock floor {floor:.2f}x = {floor / noop:.3f} x no-op "
                         f"(two clock reads per call, nothing else); framescope/floor "
                         f"{fs / floor:.3f}")
        ns = overhead_ns_per_call(raw_py["fib"], "framescope", how)
        ns_noop = overhead_ns_per_call(raw_py["fib"], "noop_hook", how)
        ns_floor = overhead_ns_per_call(raw_py["fib"], "clock_floor", how)
        if ns is not None:
            lines.append(f"  fib(25) overhead per call: framescope {ns:.1f} ns, clock floor "
                         f"{fmt(ns_floor, 1, 1)} ns, no-op hook {fmt(ns_noop, 1, 1)} ns")
        summary["fib"] = {"framescope": fs, "noop_hook": noop, "clock_floor": floor,
                          "ns_per_call": ns, "noop_ns_per_call": ns_noop,
                          "floor_ns_per_call": ns_floor}
    gm = summary.get("geomean_real", {}).get("framescope")
    if gm is not None:
        gm_floor = summary.get("geomean_real", {}).get("clock_floor")
        lines.append(f"  geomean over real workloads: framescope {gm:.3f}x "
                     f"(target <= {TARGET_GEOMEAN}x: {verdict(gm <= TARGET_GEOMEAN)})"
                     + (f"; clock floor {gm_floor:.3f}x" if gm_floor else ""))
    gm_noop = non_fib_geomean(table, "noop_hook")
    if gm_noop is not None:
        summary["non_fib_vs_noop"] = gm_noop
        gm_fl = non_fib_geomean(table, "clock_floor")
        summary["non_fib_vs_floor"] = gm_fl
        lines.append(f"  geomean over the other workloads: framescope/no-op {gm_noop:.3f} (target <= "
                     f"{TARGET_NON_FIB_VS_NOOP}: {verdict(gm_noop <= TARGET_NON_FIB_VS_NOOP)})"
                     + (f"; framescope/floor {gm_fl:.3f}" if gm_fl is not None else ""))
    bpe = {w: bytes_per_event(raw_py[w].get("framescope", []), raw_py[w].get("untraced", []))
           for w in table}
    bpe = {w: v for w, v in bpe.items() if v[0] is not None}
    if bpe:
        summary["bytes_per_event"] = {w: {"raw": v[0], "net": v[1]} for w, v in bpe.items()}
        fit = bytes_fit(raw_py)
        start = [r["rss_growth_at_start"] for res in raw_py.get("fib", {}).get("framescope", [])
                 for r in res.get("runs", [])[:1] if "rss_growth_at_start" in r]
        lines.append("  bytes/event while tracing, framescope (RSS growth from before start() to "
                     "the end of the run / recorded events; net of the untraced run's growth"
                     + (f"; start() itself: {max(start) / 2**20:.1f} MiB" if start else "") + "):")
        lines.append("    " + ", ".join(f"{w} {v[0]:.1f} (net {v[1]:.1f})" for w, v in bpe.items()))
        if fit is not None:
            slope, fixed, n = fit
            summary["bytes_fit"] = {"bytes_per_event": slope, "fixed_bytes": fixed, "points": n}
            lines.append(f"    fit over {n} runs: {slope:.2f} bytes per event + {fixed / 2**20:.2f} "
                         f"MiB per session (target <= {TARGET_BYTES_PER_EVENT:.0f} per event: "
                         f"{verdict(slope <= TARGET_BYTES_PER_EVENT + 0.05)})")
    notes = trace_notes(raw_py)
    if notes:
        summary["notes"] = notes
        lines += ["  note: " + n for n in notes]
    return lines


def trace_notes(raw_py: dict[str, dict[str, list[dict[str, Any]]]]) -> list[str]:
    notes = []
    for workload, cells in raw_py.items():
        for config in FRAMESCOPE_CONFIGS:
            dropped = samples(cells.get(config, []), "dropped")
            if any(dropped):
                notes.append(f"{workload}/{config} dropped {max(dropped)} events")
            backends = {r.get("backend") for res in cells.get(config, [])
                        for r in res.get("runs", [])}
            if any(b and "->" in b for b in backends):
                notes.append(f"{workload}/{config} switched backend: {sorted(backends)}")
        # VizTracer keeps one entry per finished call, C calls included: framescope with C calls
        # counts those calls (events / 2).
        calls = events_per_run(cells.get("framescope_c", []))
        viz = [r.get("entries") for res in cells.get("viztracer", []) for r in res.get("runs", [])]
        if calls and viz and calls / 2 > min(e for e in viz if e):
            notes.append(f"{workload}: VizTracer buffer ({min(viz)} entries) smaller than its "
                         f"~{calls / 2:.0f} calls: it dropped events")
    return notes


# ---- main ----------------------------------------------------------------------------------------


def add_pythons_and_workloads(ap: argparse.ArgumentParser) -> None:
    """--pythons and --workloads, as this bench and bench/tracer_overhead_interleaved.py take them."""
    ap.add_argument("--pythons", nargs="+", default=None,
                    help="interpreters to run (default: every 3.10-3.13 under ~/.pyenv)")
    ap.add_argument("--workloads", nargs="+", default=list(ALL_WORKLOADS),
                    choices=list(ALL_WORKLOADS + EXTRA_WORKLOADS), metavar="NAME",
                    help=f"workloads (default: all: {' '.join(ALL_WORKLOADS)})")


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_pythons_and_workloads(ap)
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(RUNNERS),
                    metavar="NAME", help=f"configurations (default: all: {' '.join(CONFIGS)})")
    ap.add_argument("--runs", type=int, default=None, help="timed runs per process (default 3)")
    ap.add_argument("--processes", type=int, default=None,
                    help="fresh processes per cell (default 2)")
    ap.add_argument("--scale", type=float, default=None,
                    help="workload size factor (default 1: ~0.2-1 s per untraced run on 3.11)")
    ap.add_argument("--stat", choices=("paired", "min", "median"), default="paired",
                    help="ratio: median over traced runs of run / neighbouring untraced runs of "
                    "the same process (default), or min/median of traced runs over min/median "
                    "of the separate untraced processes")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                    help="timing used for ratios: process CPU time (default; robust to other "
                    "load on the machine) or wall time; both are kept in the JSON")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: scale 0.1, 2 runs, 1 process")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per worker process")
    ap.add_argument("--output", default=RESULTS, help="JSON results file")
    ap.add_argument("--report", metavar="JSON", default=None,
                    help="print the tables of an earlier run's JSON again (no measurement)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    quick = (0.1, 2, 1) if args.quick else (1.0, 3, 2)
    args.scale = quick[0] if args.scale is None else args.scale
    args.runs = quick[1] if args.runs is None else args.runs
    args.processes = quick[2] if args.processes is None else args.processes
    if "untraced" not in args.configs and not args.worker:
        args.configs.insert(0, "untraced")  # the baseline of every ratio
    return args


def reprint(path: str, how: str) -> int:
    with open(path) as f:
        result = json.load(f)
    for label, info in result["pythons"].items():
        py = Interpreter(info["path"], info["version"], label)
        raw_py = result["raw"].get(label, {})
        configs = [c for c in CONFIGS if any(c in cells for cells in raw_py.values())]
        print(report(py, raw_py, configs, how)[0] + "\n")
    m = result["machine"]
    print(f"{result['date']}: load average at start {m['loadavg_start']}, at end "
          f"{m['loadavg_end']}; {result['duration_s']} s")
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.workloads[0], args.configs[0], args.runs, args.scale)))
        return 0
    global CLOCK
    CLOCK = "cpu" if args.clock == "cpu" else "time"
    if args.report:
        return reprint(args.report, args.stat)
    pythons = describe(args.pythons or find_pythons())
    configs = [c for c in CONFIGS if c in args.configs]
    started = datetime.datetime.now(datetime.timezone.utc)
    machine = machine_info()
    raw = collect(pythons, args.workloads, configs, args.runs, args.processes, args.scale,
                  args.timeout)
    result: dict[str, Any] = {
        "benchmark": "tracer_overhead",
        "date": started.isoformat(timespec="seconds"),
        "duration_s": round((datetime.datetime.now(datetime.timezone.utc) - started)
                            .total_seconds(), 1),
        "machine": dict(machine, loadavg_end=os.getloadavg()),
        "settings": {"runs": args.runs, "processes": args.processes, "scale": args.scale,
                     "stat": args.stat, "clock": args.clock, "quick": args.quick, "viztracer_entries": VIZ_ENTRIES},
        "targets": {"fib_ratio": TARGET_FIB, "fib_vs_noop": TARGET_FIB_VS_NOOP,
                    "non_fib_vs_noop": TARGET_NON_FIB_VS_NOOP,
                    "geomean_real": TARGET_GEOMEAN, "bytes_per_event": TARGET_BYTES_PER_EVENT},
        "pythons": {py.label: {"path": py.path, "version": py.version} for py in pythons},
        "summary": {},
        "raw": raw,
    }
    for py in pythons:
        text, summary = report(py, raw.get(py.label, {}), configs, args.stat)
        result["summary"][py.label] = summary
        print(text + "\n")
    print(f"load average at start {result['machine']['loadavg_start']}, "
          f"at end {result['machine']['loadavg_end']}; {result['duration_s']} s")
    write_results(args.output, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
