"""Runs differential-test programs, each run in a forked copy of this interpreter, and writes both
call forests of each run.

    python -m tests.support.differential_runner JOBS.json   (from the repository's root)

JOBS.json is a list of jobs ``[program, backend, c_calls, mode, output]``: PROGRAM is a module of
tests/tracer/programs with ``run(make_profile) -> stopped framescope.profile``, or with ``work()``
alone, which run_work() then runs (warm, then recorded); BACKEND is framescope's
``backend=``; C_CALLS is a bool; MODE is ``both`` (the ground truth and framescope record the same
run) or ``ground_truth`` (the ground truth alone, with the builtins that on 3.10/3.11 only a
profile function sees, while framescope, in the same slot, records the ``both`` run: see
test_differential.py). In ``ground_truth`` mode the program's session records no Python frames
(``with_stack=False``): it only marks the window. OUTPUT gets the JSON result.

This process imports framescope, the recorder and the programs once, then forks a child per run
(two at a time): each run starts from the same fresh state, at no interpreter start-up cost.
The ground-truth recorder is built in $FRAMESCOPE_GT_BUILD.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

import framescope
from tests.support.ground_truth import GroundTruth, forest_to_json, framescope_forest, load_recorder, prune

RUN_TIMEOUT_S = 60
PROGRAMS_PACKAGE = "tests.tracer.programs"
PARALLEL_RUNS = 2


def run_work(work: Callable[[], object], make_profile: Callable[[], framescope.profile]
             ) -> framescope.profile:
    """What most programs do: ``work()`` once unrecorded (imports, specialization, first calls),
    then once in a profile, which is returned stopped."""
    work()
    prof = make_profile()
    with prof:
        work()
    return prof


def run_job(recorder: Any, program: str, backend: str, c_calls: bool, mode: str) -> dict[str, Any]:
    module = importlib.import_module(f"{PROGRAMS_PACKAGE}.{program}")
    gt = GroundTruth(recorder)

    def make_profile() -> framescope.profile:
        if mode == "ground_truth":
            return framescope.profile(with_stack=False)
        return framescope.profile(backend=backend, c_calls=c_calls)  # type: ignore[arg-type]

    # A thread has one profile slot on 3.10/3.11: sharing a run, the ground truth takes the trace
    # slot, which sees no builtins.
    gt_c_calls = c_calls and (mode == "ground_truth" or sys.version_info >= (3, 12))
    gt.start(gt_c_calls)
    prof = (module.run(make_profile) if hasattr(module, "run")
            else run_work(module.work, make_profile))
    gt.stop()
    window = (prof.trace.start_ns, prof.trace.stop_ns)
    own = (os.path.dirname(os.path.abspath(framescope.__file__)) + os.sep,)
    result: dict[str, Any] = {
        "window": window,
        "backend": prof.backend,
        "warnings": prof.warnings,
        "main_tid": recorder.tid(),
        "framescope": None,
    }
    if mode != "ground_truth":
        fs = prune(framescope_forest(prof), own)
        result["framescope"] = {str(t): forest_to_json(roots) for t, roots in fs.items()}
    truth = prune(gt.forest(window, gt_c_calls), own)
    result["ground_truth"] = {str(t): forest_to_json(roots) for t, roots in truth.items()}
    return result


def child(recorder: Any, job: list[Any]) -> None:
    program, backend, c_calls, mode, output = job
    signal.alarm(RUN_TIMEOUT_S)  # a hung run dies of SIGALRM
    try:
        result = run_job(recorder, program, backend, c_calls, mode)
    except BaseException:
        result = {"error": traceback.format_exc()}
    Path(output).write_text(json.dumps(result))


def main() -> None:
    sys.setrecursionlimit(50_000)  # the trees of deep-recursion programs are walked recursively
    jobs = json.loads(Path(sys.argv[1]).read_text())
    recorder = load_recorder(Path(os.environ["FRAMESCOPE_GT_BUILD"]))
    for program in sorted({job[0] for job in jobs}):
        importlib.import_module(f"{PROGRAMS_PACKAGE}.{program}")  # imported once, before the forks
    running: dict[int, list[Any]] = {}
    pending = list(jobs)
    while pending or running:
        while pending and len(running) < PARALLEL_RUNS:
            job = pending.pop(0)
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                try:
                    child(recorder, job)
                finally:
                    os._exit(0)
            running[pid] = job
        pid, status = os.wait()
        job = running.pop(pid)
        if status != 0 and not Path(job[4]).exists():
            Path(job[4]).write_text(json.dumps({"error": f"the run died (wait status {status})"}))


if __name__ == "__main__":
    main()
