"""Export benchmark: each format's speed (events/s), size (bytes/event) and the peak memory from
session start to the end of the export, in one run, beside VizTracer's save and torch's
export_chrome_trace of comparable traces when those are installed.

    python bench/export.py [--n 28] [--output bench/results/export.json]

An "event" is a recorded call or return (a slice is two events). Peak memory is measured in a
fresh subprocess per format (ru_maxrss after the export less the RSS before the session) and
compared with the session's event buffers (the stored trace's slot bytes).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time

FORMATS = {
    "chrome": ".json",
    "chrome_gz": ".json.gz",
    "perfetto": ".pftrace",
    "pstats": ".prof",
    "speedscope": ".speedscope.json",
    "collapsed": ".collapsed",
    "fstrace": ".fstrace",
}

CHILD = r"""
import os, resource, sys, json, time
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
import framescope
sys.setrecursionlimit(10000)
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
before = rss()
with framescope.profile() as prof:
    fib(int(sys.argv[1]))
path = sys.argv[2]
if sys.argv[3] != "none":
    prof.export(path)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"before": before, "peak": peak, "slot_bytes": prof.trace.slot_bytes,
                  "events": prof.trace.recorded_events}))
"""


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=28, help="fib(n) is the traced workload")
    ap.add_argument("--output", default=os.path.join(os.path.dirname(__file__), "results", "export.json"))
    args = ap.parse_args()
    import framescope

    with framescope.profile() as prof:
        fib(args.n)
    events = prof.trace.recorded_events
    slices = events // 2
    print(f"fib({args.n}): {events:,} events ({slices:,} calls), {prof.trace.slot_bytes / 1e6:.1f} MB of event buffers")
    results: dict[str, dict[str, float]] = {}
    tmp = tempfile.mkdtemp(prefix="fs-bench-")
    for name, ext in FORMATS.items():
        path = os.path.join(tmp, "t" + ext)
        seconds = min(timed(lambda: prof.export(path)) for _ in range(2))
        size = os.path.getsize(path)
        results[name] = {
            "seconds": seconds,
            "events_per_s": events / seconds,
            "calls_per_s": slices / seconds,
            "bytes_per_event": size / events,
        }
        os.unlink(path)
        print(f"  {name:11s} {seconds:7.3f} s  {events / seconds / 1e6:6.2f} M events/s "
              f"({slices / seconds / 1e6:5.2f} M calls/s)  {size / events:6.1f} B/event")
    t_events = timed(lambda: sum(1 for _ in prof.events()))
    t_events2 = timed(lambda: sum(1 for _ in prof.events()))
    results["events_iter"] = {"seconds_first": t_events, "seconds": t_events2,
                              "events_per_s": slices / t_events2}
    print(f"  events()    {t_events:7.3f} s first (builds the index), {t_events2:.3f} s after: "
          f"{slices / t_events2 / 1e6:.2f} M events/s")

    memory: dict[str, dict[str, float]] = {}
    for name in ["none", "chrome", "perfetto", "pstats", "collapsed"]:
        path = os.path.join(tmp, "m" + FORMATS.get(name, ".json"))
        out = subprocess.run([sys.executable, "-c", CHILD, str(args.n), path, name],
                             capture_output=True, text=True, check=True)
        m = json.loads(out.stdout)
        grown = m["peak"] - m["before"]
        memory[name] = {"peak_growth_mb": grown / 1e6, "buffers_mb": m["slot_bytes"] / 1e6,
                        "limit_mb": (2 * m["slot_bytes"] + 64e6) / 1e6}
        print(f"  memory {name:9s} peak +{grown / 1e6:6.1f} MB; buffers {m['slot_bytes'] / 1e6:5.1f} MB; "
              f"limit 2x buffers + 64 MB = {(2 * m['slot_bytes'] + 64e6) / 1e6:.1f} MB")
        if os.path.exists(path):
            os.unlink(path)

    peers: dict[str, object] = {}
    try:
        from viztracer import VizTracer  # type: ignore[import-not-found]

        tracer = VizTracer(tracer_entries=max(2 * slices, 1000000), verbose=0)
        tracer.start()
        fib(args.n)
        tracer.stop()
        path = os.path.join(tmp, "viz.json")
        s = timed(lambda: tracer.save(path))
        peers["viztracer_save"] = {"seconds": s, "events_per_s": events / s,
                                   "bytes_per_event": os.path.getsize(path) / events}
        print(f"  VizTracer save {s:.3f} s, {events / s / 1e6:.2f} M events/s")
    except ImportError:
        peers["viztracer_save"] = "not installed"
        print("  VizTracer: not installed")
    try:
        import torch  # type: ignore[import-not-found]

        with torch.profiler.profile(with_stack=True) as tp:
            fib(min(args.n, 22))
        path = os.path.join(tmp, "torch.json")
        s = timed(lambda: tp.export_chrome_trace(path))
        peers["torch_export_chrome_trace"] = {"seconds": s, "fib_n": min(args.n, 22),
                                              "bytes": os.path.getsize(path)}
        print(f"  torch export_chrome_trace (fib({min(args.n, 22)})) {s:.3f} s")
    except ImportError:
        peers["torch_export_chrome_trace"] = "not installed"
        print("  torch: not installed")

    targets = {"perfetto_events_per_s": 10e6, "perfetto_bytes_per_event": 16,
               "chrome_slices_per_s": 4e6, "pstats_calls_per_s": 10e6,
               "collapsed_calls_per_s": 10e6, "events_iter_per_s": 5e6}
    doc = {"python": platform.python_version(), "machine": platform.processor() or platform.machine(),
           "workload": f"fib({args.n})", "events": events, "formats": results, "memory": memory,
           "peers": peers, "targets": targets,
           "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"results: {args.output}")


if __name__ == "__main__":
    main()
