"""eval_frame cache hits under callgrind: instructions per call beyond a plain call, by part.

bench/cache_lookup.py times a cache hit; time on a shared 2-core machine moves by several ns from
one process to the next, instruction counts do not. This bench runs one process under
`valgrind --tool=callgrind` that calls ``f(1)`` N times in each configuration:

- ``plain``: no hook; ``noop_hook``: framescope's no-op PEP 523 hook (the floor of any hook);
- ``hook_skip``: the eval_frame API's callback set, f's code skipped (its stored action SKIP);
- ``hit_c``: a cached entry running f's own code, guarded by a C callable (``bool``, whose
  result the eval_frame API reads from the frame without calling it: see docs/performance.md);
- ``hit_c_call``: the same guarded by another C callable, called as any guard is
  (``operator.truth``, a builtin function);
- ``hit_py``: the same with a trivial Python guard (``lambda f_locals: True``);
- ``hit_guard``: the same guarded by a :class:`framescope.eval_frame.Guard` (``type(x) is int and
  x == 1``, torch's TYPE_MATCH and EQUALS_MATCH of an int argument), whose checks run no code: the
  hit is decided from the frame by the Guard's program;
- ``shadow_c``: a cached entry running another code object (a shadow call), C guard;
- ``session_hit_c`` / ``session_hit_guard``: ``hit_c`` / ``hit_guard`` inside a session that records ranges only (``with_stack=False``):
  each lookup's ``Cache Lookup`` range is recorded (compared with ``hit_c``: the range's cost);
- ``traced_plain`` / ``traced_hit_c``: the same calls inside a session that records Python calls
  too (``with_stack=True``).

Each configuration's loop is a callgrind part of its own (``--dump-before=getpgrp`` around it),
so the figures are the loop alone. Per call: (instructions of the loop - those of ``plain``) / N.
The breakdown by function (self instructions per call, beyond ``noop_hook``, or beyond the
configuration each is compared with) says what each part of the hit path costs:
the hook's dispatch and code-extra lookup (``eval_api_frame``), the lookup (``intercept``: the
callback taken out and put back, the Cache Lookup range, the f_locals view, the guard's call and
its result), the guard itself (``bool`` -> ``FrameLocals.__len__``), and running the frame
(``run_frame``). With a build made with ``FRAMESCOPE_PROFILING_SYMBOLS=ON`` ``--lines`` adds the
eval_frame sources' instructions per source line.

    python bench/cache_hit_instructions.py [--python .venvs/py3.12/bin/python] [-n 20000]

Writes bench/results/cache_hit_instructions.json under the Python version.
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
from typing import Any

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

from _callgrind import parse_part  # noqa: E402

RESULTS = os.path.join(BENCH_DIR, "results", "cache_hit_instructions.json")
CONFIGS = ("plain", "noop_hook", "hook_skip", "hit_c", "hit_c_call", "hit_guard", "hit_py",
           "shadow_c", "session_hit_c", "session_hit_guard", "traced_plain", "traced_hit_c")
#: Each configuration whose breakdown is reported, and the one it is compared with.
BASES = {"hit_c": "noop_hook", "hit_c_call": "noop_hook", "hit_guard": "noop_hook",
         "hit_py": "noop_hook", "session_hit_guard": "hit_guard",
         "hook_skip": "noop_hook",
         "shadow_c": "noop_hook",
         "session_hit_c": "hit_c", "traced_hit_c": "traced_plain"}
#: Source files whose lines --lines reports (the eval_frame API and what it inlines).
LINE_SOURCES = ("eval_frame_lookup.cpp", "eval_frame_internal.h", "eval_frame_guard.h", "eval_frame_locals.cpp",
                "eval_frame_run.cpp", "code_extra.h", "record_function.h", "thread_buffer.h",
                "frame_hook.cpp", "frame_hook.h", "py_compat.h", "clock.h")

WORKER = r"""
import operator, os, sys
from itertools import repeat
import framescope
from framescope import _core
from framescope import eval_frame as ef

N = {n}
CONFIGS = {configs!r}

def f(x):
    return x + 1

def calls(n):
    # repeat(), not range(): range's ints past 256 are allocated, and where the allocator's
    # pools stand differs between loops by a few instructions per call.
    for _ in repeat(None, n):
        f(1)

def f_other(x):
    return x + 1

def py_guard(f_locals):
    return True

def caching(guard, code=f.__code__):
    def callback(frame, entry, state):
        if frame.f_code is f.__code__:
            return ef.GuardedCode(code=code, check_fn=guard)
        return None
    return callback

def int_guard():
    guard = ef.Guard()
    guard.local("x").type_is(int).equals(1)
    return guard

def skipping(frame, entry, state):
    return None

def setup(config):
    ef.reset_code(f.__code__)
    if config == "noop_hook":
        _core._noop_eval_hook(True)
        return lambda: _core._noop_eval_hook(False)
    session = None
    if config.startswith(("session", "traced")):
        session = framescope.profile(with_stack=config.startswith("traced"), cpu_time=False)
        session.start()
    cb = {{"hook_skip": skipping, "hit_c": caching(bool), "hit_c_call": caching(operator.truth),
           "hit_py": caching(py_guard), "hit_guard": caching(int_guard()),
           "session_hit_guard": caching(int_guard()),
           "shadow_c": caching(bool, f_other.__code__),
           "session_hit_c": caching(bool), "traced_hit_c": caching(bool)}}.get(config)
    prior = ef.set_eval_frame(cb) if cb is not None else None
    def teardown():
        if cb is not None:
            ef.set_eval_frame(prior)
        if session is not None:
            session.stop()
    return teardown

for config in CONFIGS:
    teardown = setup(config)
    calls(100)  # warm: the miss that caches f, specialization, the session's registrations
    os.getpgrp()  # callgrind dumps here: the next part is the loop alone
    calls(N)
    os.getpgrp()
    teardown()
    print("DONE", config, flush=True)
"""


def run(python: str, n: int, configs: list[str], lines: bool, tmp: str) -> dict[str, Any]:
    out = os.path.join(tmp, "hit.cg")
    cmd = ["valgrind", "--tool=callgrind", "--dump-before=getpgrp", f"--callgrind-out-file={out}"]
    cmd += ["--compress-strings=no", "--compress-pos=no"]
    src = WORKER.format(n=n, configs=tuple(configs))
    proc = subprocess.run(cmd + [python, "-c", src], capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"callgrind run failed: {proc.stderr[-1500:]}")
    version = subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True, check=True).stdout.strip()
    cells: dict[str, Any] = {}
    for i, config in enumerate(configs):
        part = f"{out}.{2 * i + 2}"  # odd parts: start-up and set-ups; even: the loops
        total, funcs, by_line = parse_part(part, LINE_SOURCES)
        cells[config] = {"ir": total, "functions": funcs}
        if lines:
            cells[config]["lines"] = by_line
    return {"python": version, "calls": n, "cells": cells}


def per_call(cells: dict[str, Any], config: str, base: str, n: int) -> float:
    return (cells[config]["ir"] - cells[base]["ir"]) / n


def breakdown(cells: dict[str, Any], config: str, base: str, n: int,
              min_per_call: float = 0.5) -> list[tuple[str, float]]:
    """Self instructions per call of each function, `config` minus `base`."""
    a, b = cells[config]["functions"], cells[base]["functions"]
    rows = [(name, (a.get(name, 0) - b.get(name, 0)) / n) for name in set(a) | set(b)]
    return sorted([r for r in rows if abs(r[1]) >= min_per_call], key=lambda r: -abs(r[1]))


def report(doc: dict[str, Any], against: str, show_lines: bool) -> None:
    cells, n = doc["cells"], doc["calls"]
    print(f"eval_frame cache hits under callgrind, Python {doc['python']}, {n} calls per loop")
    print("  instructions per call beyond a plain call:")
    for config in cells:
        if config != "plain":
            print(f"    {config:16s} {per_call(cells, config, 'plain', n):8.1f}")
    for config, base in BASES.items():
        if base == "noop_hook":
            base = against
        if config not in cells or base not in cells:
            continue
        print(f"  {config} beyond {base}: {per_call(cells, config, base, n):.1f} per call; "
              "by function (self):")
        for name, v in breakdown(cells, config, base, n):
            print(f"    {v:7.1f}  {name}")
        if show_lines and "lines" in cells[config]:
            la, lb = cells[config]["lines"], cells[base].get("lines", {})
            rows = sorted(((k, (la.get(k, 0) - lb.get(k, 0)) / n) for k in set(la) | set(lb)),
                          key=lambda r: -abs(r[1]))
            print("    by source line:")
            for key, v in rows[:40]:
                if abs(v) >= 0.5:
                    print(f"      {v:6.1f}  {key}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=sys.executable, help="interpreter with framescope")
    ap.add_argument("-n", type=int, default=20_000, help="calls per loop")
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--against", default="noop_hook", choices=list(CONFIGS),
                    help="configuration the breakdown subtracts (default: the no-op hook)")
    ap.add_argument("--lines", action="store_true",
                    help="per source line (needs FRAMESCOPE_PROFILING_SYMBOLS=ON)")
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--output", default=RESULTS)
    args = ap.parse_args(argv)
    if not shutil.which("valgrind") or not shutil.which("callgrind_annotate"):
        print("cache_hit_instructions: valgrind is not installed (apt install valgrind)",
              file=sys.stderr)
        return 2
    configs = ["plain"] + [c for c in args.configs if c != "plain"]
    with tempfile.TemporaryDirectory(prefix="fs-hit-cg-") as tmp:
        doc = run(args.python, args.n, configs, args.lines, tmp)
    report(doc, args.against, args.lines)
    if args.no_save:
        return 0
    cells, n = doc["cells"], doc["calls"]
    summary = {
        "python": doc["python"],
        "calls_per_loop": n,
        "per_call_beyond_plain": {c: per_call(cells, c, "plain", n) for c in cells if c != "plain"},
        "beyond_base": {c: {"base": b, "per_call": per_call(cells, c, b, n),
                            "by_function": dict(breakdown(cells, c, b, n))}
                        for c, b in BASES.items() if c in cells and b in cells},
    }
    data: dict[str, Any] = {}
    if os.path.exists(args.output):
        with open(args.output) as fh:
            data = json.load(fh)
    data[".".join(doc["python"].split(".")[:2])] = summary
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
    print(f"results: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
