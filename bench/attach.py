#!/usr/bin/env python3
"""bench/attach.py: what ``framescope attach`` costs a running program, and how fast it is.

    python bench/attach.py [--phase S] [--repeat N]

In one run, on one program (a loop of small Python calls, run by the base interpreter: no
framescope in it) that prints its loop rate every 20 ms of CPU time:

* latency: from starting ``framescope attach PID`` to the first event recorded after the window
  opened (the trace's clock is CLOCK_MONOTONIC, as the bench's), target <= 1 s on 3.12;
* detach: from the end of the window (the trace's last timestamp) to the moment the target has
  no framescope thread left (/proc/PID/task polled every millisecond), target <= 0.5 s;
* throughput: the target's loop rate during the window against the same program recorded by
  ``framescope run`` (ratio target within 5%), and after the detach against before the attach,
  in the same process (within 2%). Rates are loops per second of the loop thread's CPU time
  (time.thread_time), the medians of the 20 ms CPU intervals of each phase: on a loaded
  machine the wall-clock rate measures the other processes, not the program.

Prints the figures with the load average and writes bench/results/attach.json. Not a test: the
figures depend on the machine (and its load); compare ratios from one run.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "attach.json"

PROGRAM = textwrap.dedent("""
    import os, sys, time

    def leaf(i):
        return i * 2

    def step(n):
        total = 0
        for i in range(n):
            total += leaf(i)
        return total

    def main(seconds):
        print("ready", os.getpid(), flush=True)
        end = time.monotonic() + seconds
        count = 0
        mark = time.thread_time()
        while True:
            step(20)
            count += 1
            if count % 256 == 0:
                now = time.thread_time()
                if now - mark >= 0.02:
                    # Loops per second of this thread's CPU time: the machine's load changes
                    # how much CPU the thread gets, not what a loop costs.
                    print(f"{time.monotonic_ns()} {count / (now - mark):.1f}", flush=True)
                    mark, count = now, 0
                    if time.monotonic() > end:
                        return

    main(float(sys.argv[1]))
""")


def base_python() -> str:
    return os.path.join(sys.base_prefix, "bin", "python%d.%d" % sys.version_info[:2])


class Rates:
    """Reads the program's "time_ns rate" lines in a thread."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("ready"), first
        self.samples: list[tuple[int, float]] = []
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            t, rate = line.split()
            self.samples.append((int(t), float(rate)))

    def between(self, start_ns: int, end_ns: int) -> float:
        # An interval is in the phase when it ends inside it and began after it started.
        inside = [r for t, r in self.samples if start_ns + 50_000_000 <= t <= end_ns]
        if len(inside) < 3:
            raise RuntimeError(f"only {len(inside)} rate samples in a phase")
        return statistics.median(inside)


def task_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def attach_run(phase: float, workdir: str) -> dict[str, float]:
    script = os.path.join(workdir, "loop.py")
    Path(script).write_text(PROGRAM)
    total = 8 * phase + 30
    proc = subprocess.Popen([base_python(), script, str(total)], stdout=subprocess.PIPE,
                            text=True)
    rates = Rates(proc)
    pid = proc.pid
    try:
        threads_before = task_count(pid)
        time.sleep(0.5)  # warm up
        before_start = time.monotonic_ns()
        time.sleep(phase)
        before_end = time.monotonic_ns()
        out = os.path.join(workdir, "window.fstrace")
        watching = threading.Event()
        released: list[int] = []
        watcher = threading.Thread(target=watch_release,
                                   args=(pid, threads_before, watching, released))
        watcher.start()
        t0 = time.monotonic_ns()
        attach = subprocess.run([sys.executable, "-m", "framescope", "attach", str(pid),
                                 "--duration", str(phase), "-o", out, "--limit", "0"],
                                capture_output=True, text=True, timeout=300)
        time.sleep(0.2)
        watching.set()
        watcher.join()
        if attach.returncode != 0:
            raise RuntimeError(attach.stderr)
        if not released:
            raise RuntimeError("the target's thread count never came back")
        from framescope import load

        prof = load(out)
        events = prof.events()
        starts = [e.start_ns for e in events]
        window_start = min(starts)
        # Slices open from the start begin at the window's first instant; the first call made
        # in the window is the first recorded event.
        first_event = min(s for s in starts if s > window_start)
        window_end = max(e.start_ns + e.duration_ns for e in events)
        during = rates.between(window_start, window_end)
        after_start = time.monotonic_ns() + 300_000_000
        time.sleep(phase + 0.3)
        after_end = time.monotonic_ns()
        return {
            "latency_s": (first_event - t0) / 1e9,
            "detach_s": (released[-1] - window_end) / 1e9,
            "rate_before": rates.between(before_start, before_end),
            "rate_during": during,
            "rate_after": rates.between(after_start, after_end),
        }
    finally:
        proc.kill()
        proc.wait()


def watch_release(pid: int, baseline: int, stop: threading.Event,
                  released: list[int]) -> None:
    """Notes each moment the target's thread count comes back down to ``baseline`` (the
    injected thread's exit), polling every millisecond until ``stop``."""
    above = False
    while not stop.is_set():
        try:
            n = task_count(pid)
        except OSError:
            return
        if n > baseline:
            above = True
        elif above:
            released.append(time.monotonic_ns())
            above = False
        time.sleep(0.001)


def run_rate(phase: float, workdir: str) -> float:
    """The program's loop rate recorded by ``framescope run`` (median of its middle phase)."""
    script = os.path.join(workdir, "loop.py")
    Path(script).write_text(PROGRAM)
    proc = subprocess.Popen([sys.executable, "-m", "framescope", "run", "--limit", "0", "-o",
                             os.path.join(workdir, "run.fstrace"), script, str(phase + 1.0)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    rates = Rates(proc)
    start = time.monotonic_ns() + 500_000_000
    proc.wait(timeout=600)
    rates.thread.join()
    return rates.between(start, start + int(phase * 1e9))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phase", type=float, default=4.0, help="seconds per phase")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as workdir:
        for i in range(args.repeat):
            run = attach_run(args.phase, workdir)
            run["rate_run"] = run_rate(args.phase, workdir)
            runs.append(run)
            print(f"run {i + 1}: " + ", ".join(f"{k} {v:.3f}" for k, v in run.items()),
                  flush=True)
    load_after = os.getloadavg()

    def median(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    figures = {
        "latency_s": median("latency_s"),
        "detach_s": median("detach_s"),
        "during_vs_run": statistics.median(r["rate_during"] / r["rate_run"] for r in runs),
        "after_vs_before": statistics.median(r["rate_after"] / r["rate_before"] for r in runs),
    }
    print(f"\nPython {platform.python_version()}, load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after ({os.cpu_count()} CPUs)")
    print(f"attach -> first recorded event: {figures['latency_s']:.3f} s   (target <= 1 s)")
    print(f"window end -> target released:  {figures['detach_s']:.3f} s   (target <= 0.5 s)")
    print(f"loop rate during the window / under framescope run: "
          f"{figures['during_vs_run']:.3f}   (target 0.95-1.05)")
    print(f"loop rate after detach / before attach:             "
          f"{figures['after_vs_before']:.3f}   (target 0.98-1.02)")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "phase_seconds": args.phase,
        "figures": figures,
        "runs": runs,
    }, indent=2) + "\n")
    print(f"written to {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
