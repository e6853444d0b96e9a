#!/usr/bin/env python3
"""bench/attach_after_factors.py: which part of an attach moves the target's loop rate after it?

    python bench/attach_after_factors.py [--runs N] [--phase S] [--actions a,b,...]
                                         [--probe-line obmalloc.c:1940] [--tag T]

bench/attach.py's after/before figure (the target's loop rate after the detach over before the
attach, each against a never-attached control running the same loop at the same time) read
0.97 on 3.13 against 1.00 on 3.11. This runs the same loop (bench/attach.py's PROGRAM, plus one
Python thread that sleeps until the action time and then does the in-process part of an
action, or nothing) beside a control, and times after/before around one action of:

* ``none``: the program's thread only writes its end mark (a file of a few bytes);
* ``thread-import``: the program's thread imports framescope mid-program, by its location, as
  the attach bootstrap does (no session);
* ``thread-session``: ... and records a 1 s window (profile().start(), stop()), as the attach
  agent does, without gdb;
* ``gdb-detach``: gdb attaches (as the attach command starts it) and detaches, nothing else;
* ``gdb-breaks``: gdb attaches, adds the pending call and the entry breakpoints of the attach
  script, continues until one is hit, removes them, detaches (no inferior call but the pending
  call's);
* ``gdb-pass``: the attach's whole gdb part (framescope.attach._gdb.inject): inferior calls,
  dlopen of libframescope_inject.so, the C-created thread that takes the GIL, with ``pass`` as
  the bootstrap (nothing of framescope in the target);
* ``attach``: ``framescope attach PID --duration 1``.

``ACTION@malloc`` runs both loops with PYTHONMALLOC=malloc (no pymalloc). ``--probe-line``
also counts, under gdb, before the first phase and after the last, how often the target passes
a line of CPython's source (or an inlined function) per call of range_iter (once per call of
the loop's functions): with 3.13.0's ``obmalloc.c:1940`` (pymalloc unlinking a pool of used
blocks that has just become full: see docs/attach.md, "What is left of after/before"), or
``pymalloc_pool_extend`` on any version, it tells the allocator's state.

Actions are interleaved (each round runs every action once, in a shuffled order). Prints, per
action, the median after/before (the target's rate over the control's nearest in time, median
per phase, as bench/attach.py) with the runs and the load average, and writes
bench/results/attach_after_factors_<python><tag>.json. Not a test.
"""
from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from _results import machine_info, write_results  # bench/_results.py

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from attach import PROGRAM as LOOP  # noqa: E402  (the bench's loop, unchanged)
from attach import Rates, base_python, paired_ratios  # noqa: E402

import framescope  # noqa: E402
from framescope.attach import _gdb  # noqa: E402

PACKAGE = os.path.dirname(os.path.abspath(framescope.__file__))
BOOTSTRAP = os.path.join(PACKAGE, "attach", "_bootstrap.py")

# The loop of bench/attach.py, with a thread that sleeps until argv[3] (monotonic seconds) and
# then does argv[2]'s in-process part; it writes "start_ns end_ns" into argv[6] when done.
THREAD = textwrap.dedent("""
    import threading as _threading

    def _action(kind, at, package, bootstrap, marks):
        time.sleep(max(0.0, at - time.monotonic()))
        start = time.monotonic_ns()
        if kind.startswith("thread-"):
            # As the attach bootstrap: a shorter switch interval until the window has started
            # (the import gives the GIL up at every file it reads).
            interval = sys.getswitchinterval()
            sys.setswitchinterval(0.0005)
            namespace = {"__name__": "_exp_bootstrap", "__file__": bootstrap}
            with open(bootstrap, "rb") as f:
                exec(compile(f.read(), bootstrap, "exec"), namespace)
            namespace["import_framescope"](package)
            if kind.startswith("thread-session"):
                from framescope.profiler._profile import profile
                prof = profile()
                prof.start()
                sys.setswitchinterval(interval)
                time.sleep(1.0)
                prof.stop()
            sys.setswitchinterval(interval)
        # Into a file of its own: a print here could land inside a line of the loop's.
        with open(marks, "w") as f:
            f.write(f"{start} {time.monotonic_ns()}")

    _threading.Thread(target=_action, args=(sys.argv[2], float(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]),
                      daemon=True).start()
""")


def target_program() -> str:
    head, tail = LOOP.rsplit("main(float(sys.argv[1]))", 1)
    return head + THREAD + "main(float(sys.argv[1]))" + tail


def paired(target: Rates, control: Rates, start: int, end: int) -> tuple[float, int]:
    ratios = paired_ratios(target, control, start, end)
    return (statistics.median(ratios) if len(ratios) >= 3 else float("nan")), len(ratios)


GDB_BREAKS = textwrap.dedent("""
    import gdb
    gdb.execute("set confirm off")
    for lib in ("libc.so", "libc-", "libpthread", "libdl", "libpython"):
        try:
            gdb.execute(f"sharedlibrary {lib}", to_string=True)
        except gdb.error:
            pass
    try:
        gdb.execute("call (int)Py_AddPendingCall((void*)PyCallable_Check, (void*)0)",
                    to_string=True)
    except gdb.error:
        pass
    bps = []
    for name in ["malloc", "calloc", "realloc", "free", "PyMem_Malloc", "PyMem_Calloc",
                 "PyMem_Realloc", "PyMem_Free", "PyObject_Malloc", "PyObject_Free",
                 "PyErr_CheckSignals", "PyCallable_Check"]:
        try:
            bps.append(gdb.Breakpoint(name, internal=True))
        except (gdb.error, RuntimeError):
            pass
    gdb.execute("continue", to_string=True)
    for bp in bps:
        bp.delete()
    print("FRAMESCOPE: stopped", gdb.selected_frame().name())
""")


def gdb_cmd(pid: int, script: str | None) -> list[str]:
    cmd = [_gdb.gdb_path(), "-batch", "-nx", "-nw", "--readnever", "-p", str(pid),
           "-iex", "set auto-solib-add off", "-iex", "set auto-load off",
           "-iex", "set debuginfod enabled off", "-iex", "set startup-with-shell off"]
    if script:
        cmd += ["-ex", f"python exec(compile(open({script!r}).read(), {script!r}, 'exec'))"]
    return cmd


def external(action: str, pid: int, workdir: str) -> None:
    if action == "gdb-detach":
        subprocess.run(gdb_cmd(pid, None), capture_output=True, timeout=60, check=True)
    elif action == "gdb-breaks":
        script = os.path.join(workdir, "breaks.gdbpy")
        Path(script).write_text(GDB_BREAKS)
        out = subprocess.run(gdb_cmd(pid, script), capture_output=True, text=True, timeout=60)
        if "FRAMESCOPE: stopped" not in out.stdout:
            raise RuntimeError(out.stdout + out.stderr)
    elif action == "gdb-pass":
        _gdb.inject(pid, "pass\n", "<experiment>")
        time.sleep(0.3)  # the injected thread runs and ends
    elif action == "attach":
        out = subprocess.run([sys.executable, "-m", "framescope", "attach", str(pid),
                              "--duration", "1", "-o", os.path.join(workdir, "w.fstrace"),
                              "--limit", "0"], capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(out.stderr)


PROBE = textwrap.dedent("""
    import os, signal, threading
    import gdb
    gdb.execute("set pagination off")
    gdb.execute("handle SIGINT stop nopass")
    bp = gdb.Breakpoint(os.environ["PROBE_LINE"], internal=False)
    bp.ignore_count = 10**9
    # Each pass costs the same trap whatever the line, so the ratio of the two counts is the
    # ratio of how often the lines run: range_iter runs once per loop of leaf() (and of step()).
    ref = gdb.Breakpoint("range_iter", internal=False)
    ref.ignore_count = 10**9
    threading.Timer(float(os.environ["PROBE_SECONDS"]),
                    lambda: os.kill(gdb.selected_inferior().pid, signal.SIGINT)).start()
    gdb.execute("continue")
    print("PROBE", bp.hit_count, ref.hit_count)
""")


def probe(pid: int, line: str, workdir: str, seconds: float = 1.0) -> float:
    """How many times the target's threads pass ``line`` (CPython source, read from
    libpython's debug information) per call of range_iter (one per call of the loop's leaf()
    or step()), counted for ``seconds`` under gdb: nan when gdb could not tell."""
    script = os.path.join(workdir, "probe.gdbpy")
    Path(script).write_text(PROBE)
    env = dict(os.environ, PROBE_LINE=line, PROBE_SECONDS=str(seconds))
    env.pop("PYTHONPATH", None)
    out = subprocess.run([_gdb.gdb_path(), "-batch", "-nx", "-p", str(pid), "-ex",
                          f"python exec(compile(open({script!r}).read(), {script!r}, 'exec'))"],
                         capture_output=True, text=True, timeout=120, env=env)
    for text in out.stdout.splitlines():
        if text.startswith("PROBE "):
            hits, ref = map(int, text.split()[1:3])
            return hits / ref if ref else float("nan")
    return float("nan")


def one_run(action: str, phase: float, workdir: str,
            probe_line: str | None = None) -> dict[str, float]:
    script = os.path.join(workdir, "loop.py")
    Path(script).write_text(target_program())
    slack = 8.0 if probe_line else 0.0  # for the probe before the phase
    total = 1.0 + slack + phase + 12.0 + phase + slack
    at = time.monotonic() + 1.0 + slack + phase + 0.6  # (start-up takes about 0.05 s)
    env = dict(os.environ)
    env.pop("PYTHONMALLOC", None)
    action, _, variant = action.partition("@")
    if variant == "malloc":  # both loops allocate with the C library's malloc, not pymalloc
        env["PYTHONMALLOC"] = "malloc"
    inprocess = action if action.startswith("thread-") else "none"
    marks = os.path.join(workdir, "marks")
    if os.path.exists(marks):
        os.unlink(marks)
    args = [str(total), inprocess, repr(at), PACKAGE, BOOTSTRAP, marks]
    procs = []
    try:
        target = subprocess.Popen([base_python(), script, *args], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, env=env)
        procs.append(target)
        control = subprocess.Popen([base_python(), script, str(total), "none", repr(at),
                                    PACKAGE, BOOTSTRAP, marks + ".control"], stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True,
                                   env=env)
        procs.append(control)
        t_rates, c_rates = Rates(target), Rates(control)
        probes = {}
        if probe_line:
            time.sleep(0.5)
            probes["probe_before"] = probe(target.pid, probe_line, workdir)
            if time.monotonic() + 0.3 + phase > at:
                raise RuntimeError("the probe took too long")
            before = (max(time.monotonic_ns() + 300_000_000,
                          int(at * 1e9) - 50_000_000 - int(phase * 1e9)),
                      int(at * 1e9) - 50_000_000)
        else:
            before = (time.monotonic_ns() + 1_000_000_000, int(at * 1e9) - 50_000_000)
        time.sleep(max(0.0, at - time.monotonic()))
        start = time.monotonic_ns()
        external(action, target.pid, workdir)
        deadline = time.monotonic() + 30
        while not os.path.exists(marks) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.01)
        try:
            done = int(Path(marks).read_text().split()[1])
        except (OSError, IndexError, ValueError):
            raise RuntimeError(f"{action}: the target's thread did not finish") from None
        end = max(time.monotonic_ns(), done)
        after = (end + 300_000_000, end + 300_000_000 + int(phase * 1e9))
        time.sleep(max(0.0, after[1] / 1e9 - time.monotonic()) + 0.1)
        if probe_line:
            probes["probe_after"] = probe(target.pid, probe_line, workdir)
        b, nb = paired(t_rates, c_rates, *before)
        a, na = paired(t_rates, c_rates, *after)
        return {"after_vs_before": a / b, "before": b, "after": a, "n_before": nb,
                "n_after": na, "action_s": (end - start) / 1e9, "load": os.getloadavg()[0],
                **probes}
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


ACTIONS = ["none", "thread-import", "thread-session", "gdb-detach", "gdb-breaks", "gdb-pass",
           "attach"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--phase", type=float, default=4.0)
    parser.add_argument("--actions", default=",".join(ACTIONS))
    parser.add_argument("--tag", default="")
    parser.add_argument("--probe-line", metavar="WHERE",
                        help="count, before and after, the passes of the target's threads on "
                             "this CPython source line or (inlined) function (gdb, libpython's "
                             "debug information): 3.13.0's obmalloc.c:1940 is pymalloc "
                             "unlinking a pool that just became full; pymalloc_pool_extend, "
                             "entered then or to carve a fresh block, works on any version")
    args = parser.parse_args()
    actions = args.actions.split(",")
    results: dict[str, list[dict[str, float]]] = {a: [] for a in actions}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as workdir:
        for round_ in range(args.runs):
            order = actions[:]
            random.shuffle(order)
            for action in order:
                try:
                    run = one_run(action, args.phase, workdir, args.probe_line)
                except (RuntimeError, subprocess.SubprocessError, _gdb.InjectError) as exc:
                    print(f"round {round_ + 1} {action}: failed: {exc}", flush=True)
                    continue
                results[action].append(run)
                probed = (f", pool unlinks per range_iter {run['probe_before']:.2f} before, "
                          f"{run['probe_after']:.2f} after" if "probe_after" in run else "")
                print(f"round {round_ + 1} {action:22s} after/before {run['after_vs_before']:.3f}"
                      f" (action {run['action_s']:.2f} s, load {run['load']:.1f}{probed})",
                      flush=True)
    load_after = os.getloadavg()
    print(f"\nPython {platform.python_version()}, load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after; medians of {args.runs} runs")
    figures = {}
    for action in actions:
        values = [r["after_vs_before"] for r in results[action]]
        figures[action] = statistics.median(values) if values else float("nan")
        print(f"  {action:22s} {figures[action]:.3f}   runs: "
              + ", ".join(f"{v:.3f}" for v in values))
    name = f"attach_after_factors_py{sys.version_info[0]}{sys.version_info[1]}{args.tag}.json"
    write_results(ROOT / "bench" / "results" / name, {
        "machine": machine_info(), "load_average_before": load_before,
        "load_average_after": load_after, "phase_seconds": args.phase, "figures": figures,
        "runs": results})


if __name__ == "__main__":
    main()
