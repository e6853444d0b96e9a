#!/usr/bin/env python3
"""bench/attach_instructions.py: does a program run the same instructions after a framescope
window as before it? Counted by callgrind, so the machine's load does not enter.

    python bench/attach_instructions.py [--loops N]

bench/attach.py measures the attached program's loop rate after the detach against before, in
CPU time, which a machine shared with other jobs moves by several percent either way. This
counts instead, under valgrind's callgrind, the instructions the same loop of small Python calls
executes in N loops before and in N loops after a window, in one process, with callgrind client
requests marking the phases (a small C helper built here with cc). Two ways of opening the
window, each against a run with no window (its after/before is the noise floor, ~0.1%):

* ``thread``: as an attach does: another thread imports framescope, records a window while the
  main thread loops (its frames run at the window's start), stops, and ends;
* ``in-loop``: a session started and stopped inside the loop's innermost function (framescope
  imported before both phases).

Besides the whole process's instructions per phase, the interpreter loop's own
(_PyEval_EvalFrameDefault, where a lost specialization or superinstruction shows) and the small
object allocator's (obmalloc: its cost depends on the heap's layout, which importing framescope
and the window's own objects change) are printed apart. Writes
bench/results/attach_instructions_<python>.json. Needs valgrind and a C compiler.
"""
from __future__ import annotations

import argparse
import glob
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from _results import machine_info, write_results  # bench/_results.py (this script's directory)

ROOT = Path(__file__).resolve().parent.parent

HELPER = """
#include <valgrind/callgrind.h>
void mark_zero(void) { CALLGRIND_ZERO_STATS; }
void mark_dump(const char* name) { CALLGRIND_DUMP_STATS_AT(name); }
"""

PROGRAM = textwrap.dedent("""
    import ctypes, os, sys, threading, time
    marks = ctypes.CDLL(sys.argv[1])
    mode, loops = sys.argv[2], int(sys.argv[3])
    armed = False
    if mode == "in-loop":
        import framescope

    def window():
        if mode == "thread":
            import framescope
            prof = framescope.profile()
            prof.start()
            time.sleep(0.3)
            prof.stop()

    def in_loop_window():
        global armed
        armed = False
        prof = framescope.profile()
        prof.start()
        for _ in range(20):
            step(4)
        prof.stop()

    def leaf(i):
        x = i
        for _ in range(30):
            x = (x * 3 + 1) & 0xFFFF
        if armed and i == 3:
            in_loop_window()
        return x

    def step(n):
        total = 0
        for i in range(n):
            total += leaf(i)
        return total

    def phase(name):
        marks.mark_zero()
        for _ in range(loops):
            step(4)
        marks.mark_dump(name.encode())

    def main():
        global armed
        for _ in range(300):  # warm up: specialization settles
            step(4)
        phase("warm-up")  # (phase's own first run specializes it)
        phase("before")
        if mode == "thread":
            t = threading.Thread(target=window)
            t.start()
            while t.is_alive():
                step(4)
            t.join()
        elif mode == "in-loop":
            armed = True
            step(4)  # the session starts in leaf: leaf, step, main run at its start
        phase("settle")  # one-time costs after the window (garbage, first calls) land here
        phase("after")

    main()
    sys.stdout.flush()
    os._exit(0)  # no exit handlers: nothing runs after the phases
""")


def counts(dump: str) -> tuple[int, int, int]:
    """Whole-process, interpreter-loop and allocator instructions of one callgrind dump."""
    annotate = subprocess.run(["callgrind_annotate", "--threshold=100", dump],
                              capture_output=True, text=True, check=True).stdout
    total = loop = alloc = 0
    for line in annotate.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*)$", line)
        if not m:
            continue
        n, where = int(m.group(1).replace(",", "")), m.group(2)
        if "PROGRAM TOTALS" in where:
            total = n
        elif "_PyEval_EvalFrameDefault" in where:
            loop += n
        elif "obmalloc.c:" in where or re.search(r":_?PyObject_(Malloc|Free|Calloc|Realloc)\b",
                                                   where):
            alloc += n
    return total, loop, alloc


def run(mode: str, loops: int, helper: str, workdir: str) -> dict[str, float]:
    script = os.path.join(workdir, "loop.py")
    Path(script).write_text(PROGRAM)
    out = os.path.join(workdir, f"cg.{mode}")
    for old in glob.glob(out + "*"):
        os.remove(old)
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                    "--dump-instr=no", "--collect-jumps=no", sys.executable, script, helper,
                    mode, str(loops)], check=True, capture_output=True)
    phases = {}
    for dump in glob.glob(out + ".*"):
        text = Path(dump).read_text()
        m = re.search(r"^desc: Trigger: Client Request: (\S+)", text, re.M)
        if m:
            phases[m.group(1)] = counts(dump)
    (bt, bl, ba), (at, al, aa) = phases["before"], phases["after"]
    return {"before": bt, "after": at, "after_vs_before": at / bt,
            "eval_loop_before": bl, "eval_loop_after": al, "eval_loop_after_vs_before": al / bl,
            "allocator_before": ba, "allocator_after": aa,
            "allocator_delta_share": (aa - ba) / bt}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loops", type=int, default=300, help="loops per phase")
    args = parser.parse_args()
    for tool in ("valgrind", "callgrind_annotate", "cc"):
        if shutil.which(tool) is None:
            sys.exit(f"bench/attach_instructions.py needs {tool}")
    results = {}
    with tempfile.TemporaryDirectory() as workdir:
        helper = os.path.join(workdir, "libmarks.so")
        source = os.path.join(workdir, "marks.c")
        Path(source).write_text(HELPER)
        subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", helper, source], check=True)
        for mode in ("none", "thread", "in-loop"):
            results[mode] = run(mode, args.loops, helper, workdir)
            r = results[mode]
            print(f"{mode:8} after/before: whole process {r['after_vs_before']:.4f}, interpreter "
                  f"loop {r['eval_loop_after_vs_before']:.4f}; allocator change "
                  f"{100 * r['allocator_delta_share']:+.2f}% of the phase", flush=True)
    print(f"Python {platform.python_version()}; {args.loops} loops per phase; "
          "target: the interpreter loop's instructions unchanged (1.000)")
    tag = "py%d%d" % sys.version_info[:2]
    write_results(ROOT / "bench" / "results" / f"attach_instructions_{tag}.json",
                  {"machine": machine_info(), "loops": args.loops, "modes": results})


if __name__ == "__main__":
    main()
