#!/usr/bin/env python3
"""bench/attach.py: what ``framescope attach`` costs a running program, and how fast it is.

    python bench/attach.py [--phase S] [--repeat N] [--pythonmalloc malloc] [--output JSON]
    python bench/attach.py --latency N      # the latency only, N attaches to the target alone

In one run, on one program (a loop of small Python calls, run by the base interpreter: no
framescope in it) that prints its loop rate every 20 ms of CPU time:

* latency: from starting ``framescope attach PID`` to the first event recorded after the window
  opened (the trace's clock is CLOCK_MONOTONIC, as the bench's), target <= 1 s on 3.12;
* detach: from the end of the window (the trace's last timestamp) to the moment the target has
  no framescope thread left (/proc/PID/task polled every millisecond), target <= 0.5 s;
* throughput: the target's loop rate during the window against the same program recorded by
  ``framescope run`` at the same time (ratio target within 5%), and after the detach against
  before the attach, in the same process (within 2%). After/before is the ratio of the phases'
  medians of the target's rate divided by a control's at the same moment (the same program,
  plain python, never attached; its interval that ended nearest in time), which takes the
  second-to-second changes of the machine's load out; the same figure for the `framescope run`
  companion, which nothing attaches to, shows how far the machine's noise alone moves it. Rates are loops per second of the loop thread's CPU time
  (time.thread_time), the medians of the 20 ms CPU intervals of each phase: on a loaded
  machine the wall-clock rate measures the other processes, not the program.

Prints the figures with the load average and writes bench/results/attach.json (or --output).
Not a test: the figures depend on the machine (and its load); compare ratios from one run.
After/before also depends on which pool of pymalloc the loop's short-lived ints land in after
the window, a state any thread's allocations change (docs/attach.md, "What is left of
after/before"); --pythonmalloc malloc runs the three loops without pymalloc.
"""
from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

from _results import machine_info, write_results  # bench/_results.py (this script's directory)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "attach.json"

PROGRAM = textwrap.dedent("""
    import os, sys, time

    def leaf(i):
        x = i
        for _ in range(30):  # some work per call: about a million events per CPU second
            x = (x * 3 + 1) & 0xFFFF
        return x

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
            step(4)
            count += 1
            if count % 16 == 0:
                now = time.thread_time()
                if now - mark >= 0.02 and count >= 64:
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
            try:
                t, rate = line.split()
                self.samples.append((int(t), float(rate)))
            except ValueError:
                continue  # (another line: e.g. an in-process session's output)

    def between(self, start_ns: int, end_ns: int) -> float:
        # An interval is in the phase when it ends inside it and began after it started.
        inside = [r for t, r in self.samples if start_ns + 50_000_000 <= t <= end_ns]
        if len(inside) < 3:
            print(f"  (only {len(inside)} rate samples in a phase: not measured)", flush=True)
            return math.nan
        return statistics.median(inside)


def paired_ratios(target: Rates, control: Rates, start_ns: int, end_ns: int) -> list[float]:
    """For each of the target's intervals in the phase, its rate divided by the rate of the
    control's interval that ended nearest in time: the load of the machine changes from second
    to second, and both loops feel it alike at the same moment."""
    inside = [(t, r) for t, r in target.samples if start_ns + 50_000_000 <= t <= end_ns]
    times = [t for t, _ in control.samples]
    ratios = []
    for t, rate in inside:
        i = bisect.bisect_left(times, t)
        near = [j for j in (i - 1, i) if 0 <= j < len(times)]
        if near:
            j = min(near, key=lambda k: abs(times[k] - t))
            ratios.append(rate / control.samples[j][1])
    return ratios


def paired_ratio(target: Rates, control: Rates, start_ns: int, end_ns: int) -> float:
    """The median of paired_ratios() (nan below 3 intervals)."""
    ratios = paired_ratios(target, control, start_ns, end_ns)
    return statistics.median(ratios) if len(ratios) >= 3 else math.nan


def task_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


# The environment of the three loops (--pythonmalloc sets PYTHONMALLOC in it).
LOOP_ENV = dict(os.environ)


def start(cmd: list[str]) -> tuple[subprocess.Popen[str], Rates]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=LOOP_ENV)
    return proc, Rates(proc)


def attach_run(phase: float, workdir: str, probe_line: str | None = None) -> dict[str, float]:
    """One attach of the target, with two companions running the same loop at the same time:
    a control (plain python, never attached) and the program under ``framescope run``. The
    machine's load changes all three alike, so the ratios compare like with like."""
    script = os.path.join(workdir, "loop.py")
    Path(script).write_text(PROGRAM)
    total = str(6 * phase + 60)
    procs = []
    try:
        target, rates = start([base_python(), script, total])
        procs.append(target)
        control, control_rates = start([base_python(), script, total])
        procs.append(control)
        recorded, run_rates = start([sys.executable, "-m", "framescope", "run", "--limit", "0",
                                     "--memory-limit", "3GiB", "-o",
                                     os.path.join(workdir, "run.fstrace"), script, total])
        procs.append(recorded)
        pid = target.pid
        threads_before = task_count(pid)
        time.sleep(0.5)  # warm up
        before_start = time.monotonic_ns()
        time.sleep(phase)
        before_end = time.monotonic_ns()
        window = attach_once(pid, threads_before, phase, workdir)
        window_start, window_end = window["window_start"], window["window_end"]
        released = window["released"]
        after_start = max(released, time.monotonic_ns()) + 300_000_000
        time.sleep((after_start - time.monotonic_ns()) / 1e9 + phase)
        after_end = time.monotonic_ns()
        probed = {}
        if probe_line:  # after the phases: gdb stops the target while it counts
            from attach_after_factors import probe

            probed["after_pool_unlinks_per_call"] = probe(pid, probe_line, workdir)
        phases = {"before": (before_start, before_end), "during": (window_start, window_end),
                  "after": (after_start, after_end)}
        # The first attach's latency (framescope not yet imported in the target), measured
        # with the companions running.
        result = {f"first_{k}": v for k, v in window.items()
                  if k not in ("window_start", "window_end", "released")}
        result.update(probed)
        for name, (a, b) in phases.items():
            result[f"target_{name}"] = rates.between(a, b)
            result[f"control_{name}"] = control_rates.between(a, b)
        result["run_during"] = run_rates.between(window_start, window_end)
        for name in ("before", "after"):
            result[f"paired_{name}"] = paired_ratio(rates, control_rates, *phases[name])
            # The same for the `framescope run` companion, which nothing attaches to: its
            # after/before is 1 but for the noise of the machine (the null figure).
            result[f"null_paired_{name}"] = paired_ratio(run_rates, control_rates,
                                                         *phases[name])
        # Latency and detach from one more attach with the companions stopped (they would
        # compete with the attach command and the target for the CPUs); framescope is imported
        # in the target by then.
        control.kill()
        recorded.kill()
        time.sleep(0.5)
        quiet = attach_once(pid, threads_before, 1.0, workdir)
        result.update((k, v) for k, v in quiet.items()
                      if k not in ("window_start", "window_end", "released"))
        return result
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def attach_once(pid: int, threads_before: int, duration: float,
                workdir: str) -> dict[str, float]:
    """Attaches for ``duration`` s: the window's bounds, when the target was released, the
    latency to the first recorded event and its parts (from the command's timings)."""
    out = os.path.join(workdir, "window.fstrace")
    watching = threading.Event()
    released: list[int] = []
    watcher = threading.Thread(target=watch_release,
                               args=(pid, threads_before, watching, released))
    watcher.start()
    env = dict(os.environ, FRAMESCOPE_ATTACH_TIMINGS="1")
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic_ns()
    attach = subprocess.run([sys.executable, "-m", "framescope", "attach", str(pid),
                             "--duration", str(duration), "-o", out, "--limit", "0"],
                            capture_output=True, text=True, timeout=300, env=env)
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    time.sleep(0.2)
    watching.set()
    watcher.join()
    if attach.returncode != 0:
        raise RuntimeError(attach.stderr)
    if not released:
        raise RuntimeError("the target's thread count never came back")
    marks = json.loads(attach.stderr.split("attach timings (monotonic ns): ", 1)[1]
                       .splitlines()[0])
    from framescope import load

    events = load(out).events()
    starts = [e.start_ns for e in events]
    window_start = min(starts)
    # Slices open from the start begin at the window's first instant; the first call made in
    # the window is the first recorded event.
    first_event = min(s for s in starts if s > window_start)
    window_end = max(e.start_ns + e.duration_ns for e in events)
    return {
        "window_start": window_start, "window_end": window_end, "released": released[-1],
        "latency_s": (first_event - t0) / 1e9,
        "detach_s": (released[-1] - window_end) / 1e9,
        "events": float(len(events)),
        # CPU time of the command and of gdb (its child), the whole command: on a machine
        # whose CPUs are busy, the wall-clock latency is mostly waiting for a CPU.
        "command_and_gdb_cpu_s": (cpu_after.ru_utime + cpu_after.ru_stime
                                  - cpu_before.ru_utime - cpu_before.ru_stime),
        "part_command_start_s": (marks["command"] - t0) / 1e9,
        "part_checks_s": (marks["gdb"] - marks["command"]) / 1e9,
        "part_gdb_s": (marks["gdb_done"] - marks["gdb"]) / 1e9,
        "part_thread_connects_s": (marks["hello"] - marks["gdb_done"]) / 1e9,
        "part_import_and_start_s": (first_event - marks["hello"]) / 1e9,
    }


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

def latency_only(count: int) -> None:
    """``--latency N``: the target alone (no companions), attached N times in a row for 0.5 s
    each, the first attach importing framescope there: each latency and its parts, with the
    load average at the time. Writes bench/results/attach_latency.json."""
    attaches = []
    with tempfile.TemporaryDirectory() as workdir:
        script = os.path.join(workdir, "loop.py")
        Path(script).write_text(PROGRAM)
        target, _ = start([base_python(), script, "600"])
        try:
            baseline = task_count(target.pid)
            time.sleep(1.0)
            for i in range(count):
                load = os.getloadavg()[0]
                window = attach_once(target.pid, baseline, 0.5, workdir)
                window = {k: v for k, v in window.items()
                          if k not in ("window_start", "window_end", "released")}
                window["load_average"] = load
                attaches.append(window)
                print(f"attach {i + 1} (load {load:.2f}): {window['latency_s']:.3f} s; " + ", ".join(
                    f"{k[5:-2]} {v:.3f} s" for k, v in window.items() if k.startswith("part_")),
                    flush=True)
                time.sleep(1.0)
        finally:
            target.kill()
            target.wait()
    write_results(RESULTS.with_name("attach_latency.json"),
                  {"machine": machine_info(), "attaches": attaches})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phase", type=float, default=4.0, help="seconds per phase")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--latency", type=int, metavar="N",
                        help="only the latency: N attaches in a row to the target alone")
    parser.add_argument("--pythonmalloc", metavar="ALLOCATOR",
                        help="PYTHONMALLOC for the three loops (malloc: no pymalloc, whose pool "
                             "list a window reorders; see docs/attach.md)")
    parser.add_argument("--output", type=Path, default=RESULTS, help="results JSON")
    parser.add_argument("--probe-line", metavar="WHERE",
                        help="after the after phase, count how often the target passes this "
                             "CPython source line or (inlined) function per loop call "
                             "(bench/attach_after_factors.py): pymalloc_pool_extend (any "
                             "version) or 3.13.0's obmalloc.c:1940, pymalloc's pool-full unlink")
    args = parser.parse_args()
    if args.pythonmalloc:
        LOOP_ENV["PYTHONMALLOC"] = args.pythonmalloc
    if args.latency:
        latency_only(args.latency)
        return
    runs = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as workdir:
        for i in range(args.repeat):
            run = attach_run(args.phase, workdir, args.probe_line)
            run["during_vs_run"] = run["target_during"] / run["run_during"]
            run["after_vs_before"] = run["paired_after"] / run["paired_before"]
            run["null_after_vs_before"] = run["null_paired_after"] / run["null_paired_before"]
            run["after_vs_before_phase_medians"] = (
                (run["target_after"] / run["control_after"])
                / (run["target_before"] / run["control_before"]))
            runs.append(run)
            print(f"run {i + 1}: " + ", ".join(f"{k} {v:.3f}" for k, v in run.items()),
                  flush=True)
    load_after = os.getloadavg()

    def median(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    figures = {
        "latency_s": median("latency_s"),
        "command_and_gdb_cpu_s": median("command_and_gdb_cpu_s"),
        **{k: median(k) for k in runs[0] if k.startswith("part_")},
        "first_latency_s": median("first_latency_s"),
        "first_detach_s": median("first_detach_s"),
        **{k: median(k) for k in runs[0] if k.startswith("first_part_")},
        "detach_s": median("detach_s"),
        "during_vs_run": median("during_vs_run"),
        "after_vs_before": median("after_vs_before"),
        "after_vs_before_phase_medians": median("after_vs_before_phase_medians"),
        "null_after_vs_before": median("null_after_vs_before"),
        "after_vs_before_uncorrected": statistics.median(
            r["target_after"] / r["target_before"] for r in runs),
    }
    print(f"\nPython {platform.python_version()}, load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after ({os.cpu_count()} CPUs)")
    print(f"attach -> first recorded event: {figures['latency_s']:.3f} s   (target <= 1 s)")
    print(f"  CPU time of the command and gdb (whole command): "
          f"{figures['command_and_gdb_cpu_s']:.3f} s")
    print("  of which: " + ", ".join(f"{k[5:-2]} {figures[k]:.3f} s" for k in figures
                                      if k.startswith("part_")))
    print(f"first attach (companions running, framescope imported by it): "
          f"{figures['first_latency_s']:.3f} s; " + ", ".join(
              f"{k[11:-2]} {figures[k]:.3f} s" for k in figures if k.startswith("first_part_")))
    print(f"window end -> target released:  {figures['detach_s']:.3f} s   (target <= 0.5 s)")
    print(f"loop rate during the window / under framescope run: "
          f"{figures['during_vs_run']:.3f}   (target 0.95-1.05)")
    print(f"loop rate after detach / before attach:             "
          f"{figures['after_vs_before']:.3f}   (target 0.98-1.02; against the control "
          f"moment by moment; phase medians {figures['after_vs_before_phase_medians']:.3f}, "
          f"uncorrected {figures['after_vs_before_uncorrected']:.3f})")
    print("  runs: " + ", ".join(f"{r['after_vs_before']:.3f}" for r in runs)
          + "; the same figure for the `framescope run` companion, never attached (noise): "
          + ", ".join(f"{r['null_after_vs_before']:.3f}" for r in runs))
    write_results(args.output, {
        "machine": machine_info(),
        "pythonmalloc": args.pythonmalloc,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "phase_seconds": args.phase,
        "figures": figures,
        "runs": runs,
    })


if __name__ == "__main__":
    main()
