"""bench/memory_limit.py: what a session holds beyond memory_limit (issue 31, item 5).

Cases, each in a fresh process (RSS is per process):
  names    record_function(f"req-{k}") on 4 threads with an 8 MiB limit: RSS growth per second
           once the limit is reached (on_limit stop and keep_newest);
  threads  10,000 short threads, one after another, 200 ranges each: RSS growth and warning
           lines (stop with 8 MiB, keep_newest with 64 MiB);
  stream   300 live threads streaming 20,000 ranges each with the default limit (64 MiB): the
           share of events dropped.
Targets: ~0 MiB/s after the limit (names); growth near the limit (threads); 0% dropped (stream).

Usage: python bench/memory_limit.py [--python PY] [names threads stream]
Writes bench/results/memory_limit.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def case_names(on_limit: str, seconds: float = 4.0) -> dict[str, Any]:
    import framescope

    prof = framescope.profile(memory_limit="8MiB", on_limit=on_limit)  # type: ignore[arg-type]
    stop = False

    def work(t: int) -> None:
        k = 0
        while not stop:
            with framescope.record_function(f"req-{t}-{k}"):
                pass
            k += 1

    prof.start()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(1.0)  # the limit is reached long before
    r0, t0 = rss(), time.time()
    time.sleep(seconds)
    r1, dt = rss(), time.time() - t0
    stop = True
    for t in threads:
        t.join()
    prof.stop()
    return {"case": "names", "on_limit": on_limit, "rss_growth_mib_per_s": (r1 - r0) / dt / 2**20}


def case_threads(on_limit: str, limit: str) -> dict[str, Any]:
    import framescope

    prof = framescope.profile(memory_limit=limit, on_limit=on_limit)  # type: ignore[arg-type]

    def work() -> None:
        for _ in range(200):
            with framescope.record_function("x"):
                pass

    r0 = rss()
    prof.start()
    for _ in range(10000):
        t = threading.Thread(target=work)
        t.start()
        t.join()
    r1 = rss()
    prof.stop()
    return {"case": "threads", "on_limit": on_limit, "limit": limit,
            "rss_growth_mib": (r1 - r0) / 2**20, "warning_lines": len(prof.warnings)}


def case_stream(n: int = 300, ranges: int = 20000) -> dict[str, Any]:
    import framescope

    folder = tempfile.mkdtemp()
    prof = framescope.profile(stream_to=os.path.join(folder, "s.fstrace"))
    go = threading.Event()

    def work() -> None:
        go.wait()
        for _ in range(ranges):
            with framescope.record_function("x"):
                pass

    threads = [threading.Thread(target=work) for _ in range(n)]
    prof.start()
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join()
    prof.stop()
    recorded, dropped = prof.trace.recorded_events, prof.trace.dropped_events
    os.unlink(os.path.join(folder, "s.fstrace"))
    os.rmdir(folder)
    return {"case": "stream", "threads": n, "recorded": recorded, "dropped": dropped,
            "dropped_percent": 100.0 * dropped / max(1, recorded + dropped)}


def child(which: str) -> list[dict[str, Any]]:
    if which == "names":
        return [case_names("stop"), case_names("keep_newest")]
    if which == "threads":
        return [case_threads("stop", "8MiB"), case_threads("keep_newest", "64MiB")]
    return [case_stream()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", default=["names", "threads", "stream"])
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        print(json.dumps(child(opts.child)))
        return
    results = []
    for which in opts.cases:
        out = subprocess.run([opts.python, __file__, "--child", which], capture_output=True,
                             text=True, timeout=1200)
        if out.returncode != 0:
            print(f"{which}: failed: {out.stderr[-500:]}")
            continue
        for r in json.loads(out.stdout.splitlines()[-1]):
            results.append(r)
            print(json.dumps(r))
    record = {"python": opts.python, "load_average": os.getloadavg(), "results": results}
    path = Path(__file__).resolve().parent / "results" / "memory_limit.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"written to {path}")


if __name__ == "__main__":
    main()
