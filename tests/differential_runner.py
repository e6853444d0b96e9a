"""Runs one differential-test program in this (fresh) interpreter and writes both call forests.

    python differential_runner.py PROGRAM BACKEND C_CALLS MODE OUTPUT.json

PROGRAM is a module of tests/programs with ``run(make_profile) -> stopped framescope.profile``;
BACKEND is framescope's ``backend=``; C_CALLS is 0 or 1; MODE is ``both`` (the ground truth and
framescope record the same run), ``framescope`` or ``ground_truth`` (each alone, for the cases
where one hook slot cannot serve both: see test_differential.py). In ``ground_truth`` mode the
program's session records no Python frames (``with_stack=False``): it only marks the window.
The ground-truth recorder is built in $FRAMESCOPE_GT_BUILD.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "programs"))

import framescope  # noqa: E402
from ground_truth import GroundTruth, framescope_forest, load_recorder, prune  # noqa: E402


def main() -> None:
    program, backend, c_calls_arg, mode, output = sys.argv[1:6]
    c_calls = c_calls_arg == "1"
    module = importlib.import_module(program)
    gt = GroundTruth(load_recorder(Path(os.environ["FRAMESCOPE_GT_BUILD"])))

    def make_profile() -> framescope.profile:
        if mode == "ground_truth":
            return framescope.profile(with_stack=False)
        return framescope.profile(backend=backend, c_calls=c_calls)  # type: ignore[arg-type]

    if mode != "framescope":
        gt.start(c_calls)
    prof = module.run(make_profile)
    if mode != "framescope":
        gt.stop()
    window = (prof.trace.start_ns, prof.trace.stop_ns)
    own = (os.path.dirname(os.path.abspath(framescope.__file__)) + os.sep,)
    result = {
        "window": window,
        "backend": prof.backend,
        "warnings": prof.warnings,
        "main_tid": gt._rec.tid(),
        "framescope": None,
        "ground_truth": None,
    }
    if mode != "ground_truth":
        fs = prune(framescope_forest(prof), own)
        result["framescope"] = {str(t): [n.to_json() for n in roots] for t, roots in fs.items()}
    if mode != "framescope":
        truth = prune(gt.forest(window, c_calls), own)
        result["ground_truth"] = {str(t): [n.to_json() for n in roots] for t, roots in truth.items()}
    Path(output).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
