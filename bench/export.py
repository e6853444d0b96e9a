"""Export benchmark: every number the "outputs at scale" targets name, measured in one run.

    python bench/export.py [--n 30] [--stream-events 200e6] [--output bench/results/export.json]

The results file keeps one entry per Python version ("runs": {"3.12": ...}) and the last
streamed run ("stream"); --stream-events 0 skips the long streamed session (~2 min).

- each format's speed and size: events/s and bytes/event (an "event" is a recorded call or
  return, so a slice is two events; as in the issue, 2.5 M calls = 5 M events), best of 2;
- beside VizTracer's save() of the same workload and, where torch is installed (3.11 here), torch's
  export_chrome_trace of a with_stack profile (torch's tracer is too slow for the full workload:
  fib(22));
- events(): a for-loop over prof.events() reading one attribute, first pass (which also keeps
  every event's duration) and later passes;
- peak memory from session start to the end of each export, in a fresh process per format,
  against the target 2x the event buffers + 64 MB;
- streaming: a session of --stream-events events on four threads streamed to a .fstrace, its
  peak RSS (target < 300 MB), then its conversion to Perfetto, whose TrackEvents are counted
  (bench/native/pftrace_count.cpp, compiled here with c++) and compared with the trace.

Install the peers into the venv that runs this (never into a base interpreter):
    .venvs/py3.11/bin/pip install viztracer     (torch: scripts/dev_env.sh 3.11 torch==2.13.0)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

from _child_programs import FIB_ON_FOUR_THREADS  # bench/ is sys.path[0] when run

HERE = os.path.dirname(os.path.abspath(__file__))

FORMATS = {
    "chrome": ".json",
    "chrome_gz": ".json.gz",
    "perfetto": ".pftrace",
    "pstats": ".prof",
    "speedscope": ".speedscope.json",
    "collapsed": ".collapsed",
    "fstrace": ".fstrace",
}

TARGETS = {
    "perfetto_events_per_s": 10e6,
    "perfetto_bytes_per_event": 16,
    "chrome_slices_per_s": 4e6,
    "pstats_calls_per_s": 10e6,
    "collapsed_calls_per_s": 10e6,
    "events_iter_per_s": 5e6,
    "memory_limit": "2x buffers + 64 MB",
    "stream_events": 200e6,
    "stream_peak_rss_mb": 300,
}

# Peak memory of one export, in a fresh process: its VmHWM after the export less the RSS before
# the session started.
MEMORY_CHILD = r"""
import json, os, resource, sys
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
import framescope
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
before = rss()
with framescope.profile() as prof:
    fib(int(sys.argv[1]))
if sys.argv[3] == "events":
    for e in prof.events():
        e.duration_ns
elif sys.argv[3] != "none":
    prof.export(sys.argv[2])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
try:  # VmHWM: ru_maxrss starts at the parent's peak (kept across fork and exec)
    with open("/proc/self/status") as f:
        peak = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))
except (OSError, StopIteration):
    pass
print(json.dumps({"before": before, "peak": peak, "slot_bytes": prof.trace.slot_bytes}))
"""

# A streamed session of about `target` events on four threads, then its Perfetto conversion.
STREAM_CHILD = r"""
import json, math, os, resource, sys, threading, time
import framescope
def peak_mb():
    # VmHWM: this process's own high-water mark. ru_maxrss is not: on Linux it starts at the
    # parent's peak (kept across fork and exec), which made earlier runs report the bench
    # parent's 2.1 GB as the stream's.
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
inherited_maxrss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
target, fstrace, pftrace = float(sys.argv[1]), sys.argv[2], sys.argv[3]
""" + FIB_ON_FOUR_THREADS + r"""
t = time.perf_counter()
with framescope.profile(stream_to=fstrace) as prof:
    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
record_s = time.perf_counter() - t
after_stop = peak_mb()
recorded = prof.trace.recorded_events
counts = {name: c for name, c, *_ in prof.trace.stats()}
after_stats = peak_mb()
fib_calls = sum(c for name, c in counts.items() if name.endswith(": fib"))
events = len(prof.events())
after_events = peak_mb()
t = time.perf_counter()
prof.export(pftrace)
export_s = time.perf_counter() - t
print(json.dumps({
    "fib_n": n, "rounds": rounds, "threads": 4, "recorded_events": recorded,
    "fib_calls": fib_calls, "expected_fib_calls": 4 * rounds * calls(n),
    "events": events, "dropped": prof.trace.dropped_events, "record_s": record_s,
    "peak_rss_mb_after_stop": after_stop, "peak_rss_mb_after_stats": after_stats,
    "peak_rss_mb_after_events": after_events, "peak_rss_source": "VmHWM",
    "ru_maxrss_mb_inherited_at_start": inherited_maxrss_mb, "export_s": export_s,
    "peak_rss_mb_after_export": peak_mb(), "fstrace_bytes": os.path.getsize(fstrace),
    "pftrace_bytes": os.path.getsize(pftrace), "warnings": prof.warnings,
}))
"""


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def best_time(fn: Callable[[], object], repeat: int = 2) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def bench_formats(prof: Any, tmp: str, events: int) -> dict[str, dict[str, float]]:
    slices = events // 2
    out: dict[str, dict[str, float]] = {}
    for name, ext in FORMATS.items():
        path = os.path.join(tmp, "t" + ext)
        seconds = best_time(lambda: prof.export(path))
        size = os.path.getsize(path)
        out[name] = {"seconds": seconds, "events_per_s": events / seconds,
                     "calls_per_s": slices / seconds, "bytes_per_event": size / events}
        os.unlink(path)
        print(f"  {name:11s} {seconds:7.3f} s  {events / seconds / 1e6:6.2f} M events/s "
              f"({slices / seconds / 1e6:5.2f} M calls/s)  {size / events:6.1f} B/event")
    return out


def bench_events(prof: Any) -> dict[str, float]:
    def loop() -> None:
        for e in prof.events():
            e.duration_ns

    n = len(prof.events())
    first = best_time(loop, repeat=1)  # includes the replay that keeps every duration
    later = best_time(loop, repeat=3)
    print(f"  events()    {n / first / 1e6:6.2f} M events/s first pass, {n / later / 1e6:6.2f} M "
          f"events/s after (a for-loop reading e.duration_ns; {n:,} events)")
    return {"events": n, "seconds_first": first, "seconds": later,
            "events_per_s_first": n / first, "events_per_s": n / later}


def bench_memory(n: int, tmp: str) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for name in ["none", "events", *FORMATS]:
        path = os.path.join(tmp, "m" + FORMATS.get(name, ".json"))
        run = subprocess.run([sys.executable, "-c", MEMORY_CHILD, str(n), path, name],
                             capture_output=True, text=True, check=True)
        m = json.loads(run.stdout)
        grown = (m["peak"] - m["before"]) / 1e6
        buffers = m["slot_bytes"] / 1e6
        limit = 2 * buffers + 64
        out[name] = {"peak_growth_mb": grown, "buffers_mb": buffers, "limit_mb": limit}
        print(f"  memory {name:10s} peak +{grown:6.1f} MB; buffers {buffers:5.1f} MB; "
              f"limit {limit:.1f} MB {'ok' if grown <= limit else 'OVER'}")
        if os.path.exists(path):
            os.unlink(path)
    return out


def bench_peers(n: int, tmp: str) -> dict[str, object]:
    peers: dict[str, object] = {}
    try:
        from viztracer import VizTracer  # type: ignore[import-not-found]
        import viztracer

        calls = 0

        def count(k: int) -> int:
            return 1 if k < 2 else 1 + count(k - 1) + count(k - 2)

        calls = count(n)
        tracer = VizTracer(tracer_entries=calls + 100000, verbose=0)
        tracer.start()
        fib(n)
        tracer.stop()
        path = os.path.join(tmp, "viz.json")
        seconds = best_time(lambda: tracer.save(path), repeat=1)
        size = os.path.getsize(path)
        peers["viztracer_save"] = {"version": viztracer.__version__, "seconds": seconds,
                                   "calls": calls, "events_per_s": 2 * calls / seconds,
                                   "bytes_per_event": size / (2 * calls)}
        print(f"  VizTracer {viztracer.__version__} save {seconds:.3f} s: "
              f"{2 * calls / seconds / 1e6:.2f} M events/s, {size / (2 * calls):.1f} B/event")
        os.unlink(path)
    except ImportError:
        peers["viztracer_save"] = "not installed"
        print("  VizTracer: not installed")
    try:
        import torch  # type: ignore[import-not-found]

        small = min(n, 22)
        with torch.profiler.profile(with_stack=True) as tp:
            fib(small)
        path = os.path.join(tmp, "torch.json")
        seconds = best_time(lambda: tp.export_chrome_trace(path), repeat=1)
        with open(path) as f:
            doc = json.load(f)
        evs = doc["traceEvents"] if isinstance(doc, dict) else doc
        python_events = sum(1 for e in evs if e.get("cat") == "python_function")
        size = os.path.getsize(path)
        peers["torch_export_chrome_trace"] = {
            "version": torch.__version__, "fib_n": small, "seconds": seconds,
            "python_function_slices": python_events,
            "events_per_s": 2 * python_events / seconds,
            "bytes_per_event": size / max(1, 2 * python_events)}
        print(f"  torch {torch.__version__} export_chrome_trace (fib({small}), {python_events:,} "
              f"python_function slices) {seconds:.3f} s: "
              f"{2 * python_events / seconds / 1e6:.2f} M events/s")
        os.unlink(path)
    except ImportError:
        peers["torch_export_chrome_trace"] = "not installed"
        print("  torch: not installed")
    return peers


def bench_stream(target: float, tmp: str) -> dict[str, object]:
    counter = os.path.join(tmp, "pftrace_count")
    subprocess.run([os.environ.get("CXX", "c++"), "-O2", "-std=c++17",
                    os.path.join(HERE, "native", "pftrace_count.cpp"), "-o", counter], check=True)
    fstrace, pftrace = os.path.join(tmp, "s.fstrace"), os.path.join(tmp, "s.pftrace")
    run = subprocess.run([sys.executable, "-c", STREAM_CHILD, str(target), fstrace, pftrace],
                         capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"streaming child failed: {run.stderr}")
    s: dict[str, object] = json.loads(run.stdout.strip().splitlines()[-1])
    t = time.perf_counter()
    counted = json.loads(subprocess.run([counter, pftrace], capture_output=True, text=True,
                                        check=True).stdout)
    s["count_s"] = time.perf_counter() - t
    s["pftrace_counts"] = counted
    marks = 2  # the session's start and stop marks
    slices = int(s["events"]) - marks  # type: ignore[call-overload]
    s["perfetto_holds_every_event"] = (counted["slice_begin"] == slices
                                       and counted["slice_end"] == slices
                                       and counted["instant"] == marks)
    os.unlink(fstrace)
    os.unlink(pftrace)
    print(f"  stream      {s['recorded_events']:,} events on 4 threads in {s['record_s']:.1f} s; "
          f"peak RSS {s['peak_rss_mb_after_stop']:.0f} MB after stop, "
          f"{s['peak_rss_mb_after_stats']:.0f} MB after stats(), "
          f"{s['peak_rss_mb_after_events']:.0f} MB after events(), "
          f"{s['peak_rss_mb_after_export']:.0f} MB after the Perfetto export "
          f"({s['export_s']:.1f} s, {int(s['pftrace_bytes']) / 1e9:.2f} GB); "  # type: ignore[call-overload]
          f"Perfetto holds every event: {s['perfetto_holds_every_event']}")
    return s


def stream_met(stream: dict[str, Any]) -> dict[str, bool]:
    peaks = [float(v) for k, v in stream.items() if k.startswith("peak_rss_mb_after_")]
    return {"stream_events": int(stream["recorded_events"]) >= float(TARGETS["stream_events"]),  # type: ignore[arg-type]
            "stream_peak_rss_mb": max(peaks) < float(TARGETS["stream_peak_rss_mb"]),  # type: ignore[arg-type]
            "stream_perfetto_holds_every_event": bool(stream["perfetto_holds_every_event"])}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=30, help="fib(n) is the traced workload")
    ap.add_argument("--stream-events", type=float, default=200e6,
                    help="events of the streamed session (0: skip it)")
    ap.add_argument("--stream-only", action="store_true",
                    help="run only the streamed session and update the file's \"stream\" entry")
    ap.add_argument("--output", default=os.path.join(HERE, "results", "export.json"))
    args = ap.parse_args()
    import framescope

    if args.stream_only:
        tmp = tempfile.mkdtemp(prefix="fs-bench-export-")
        try:
            stream = bench_stream(args.stream_events, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        with open(args.output) as f:
            saved: dict[str, Any] = json.load(f)
        saved["stream"] = {"python": platform.python_version(),
                             "date": time.strftime("%Y-%m-%d %H:%M:%S"), **stream}
        run = saved.get("runs", {}).get(".".join(platform.python_version().split(".")[:2]))
        if isinstance(run, dict):  # this Python's run: its stream and stream targets
            run["stream"] = stream
            run.setdefault("met", {}).update(stream_met(stream))
        with open(args.output, "w") as f:
            json.dump(saved, f, indent=1)
        print(f"results: {args.output} (stream entry)")
        return

    load_start = os.getloadavg()
    print(f"load average at start: {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}")
    sys.setrecursionlimit(10000)
    with framescope.profile() as prof:
        fib(args.n)
    events = prof.trace.recorded_events
    print(f"fib({args.n}): {events:,} events ({events // 2:,} calls), "
          f"{prof.trace.slot_bytes / 1e6:.1f} MB of event buffers; Python {platform.python_version()}")
    tmp = tempfile.mkdtemp(prefix="fs-bench-export-")
    try:
        formats = bench_formats(prof, tmp, events)
        events_iter = bench_events(prof)
        memory = bench_memory(args.n, tmp)
        peers = bench_peers(args.n, tmp)
        stream = bench_stream(args.stream_events, tmp) if args.stream_events > 0 else "skipped"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    met = {
        "perfetto_events_per_s": formats["perfetto"]["events_per_s"] >= TARGETS["perfetto_events_per_s"],
        "perfetto_bytes_per_event": formats["perfetto"]["bytes_per_event"] <= TARGETS["perfetto_bytes_per_event"],
        "chrome_slices_per_s": formats["chrome"]["calls_per_s"] >= TARGETS["chrome_slices_per_s"],
        "pstats_calls_per_s": formats["pstats"]["calls_per_s"] >= TARGETS["pstats_calls_per_s"],
        "collapsed_calls_per_s": formats["collapsed"]["calls_per_s"] >= TARGETS["collapsed_calls_per_s"],
        "events_iter_per_s": events_iter["events_per_s"] >= TARGETS["events_iter_per_s"],
        "memory_limit": all(m["peak_growth_mb"] <= m["limit_mb"] for m in memory.values()),
    }
    if isinstance(stream, dict):
        met.update(stream_met(stream))
    print("targets: " + ", ".join(f"{k} {'met' if v else 'MISSED'}" for k, v in met.items()))
    doc = {"python": platform.python_version(), "machine": platform.processor() or platform.machine(),
           "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
           "load_average": {"start": load_start, "end": os.getloadavg()},
           "workload": f"fib({args.n})", "events": events,
           "formats": formats, "events_iter": events_iter, "memory": memory, "peers": peers,
           "stream": stream, "targets": TARGETS, "met": met}
    # One file for every Python: this run replaces its own version's entry; the last streamed
    # run is kept beside them (a run with --stream-events 0 leaves it as it was).
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    results: dict[str, Any] = {}
    if os.path.exists(args.output):
        with open(args.output) as f:
            old = json.load(f)
        if isinstance(old, dict) and isinstance(old.get("runs"), dict):
            results = old
    results.setdefault("runs", {})
    results["runs"][".".join(platform.python_version().split(".")[:2])] = doc
    if isinstance(stream, dict):
        results["stream"] = {"python": platform.python_version(), **stream}
    with open(args.output, "w") as f:
        json.dump(results, f, indent=1)
    print(f"results: {args.output}")


if __name__ == "__main__":
    main()
