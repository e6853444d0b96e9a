"""The trace is what ran: framescope's call trees against CPython's own hooks, program by program.

Each program of tests/programs runs in a fresh interpreter under both recorders at once: the
ground truth (ground_truth_recorder.c: sys.monitoring on 3.12+, a C function in every thread's
trace slot on 3.10/3.11) and framescope, with every backend and with and without ``c_calls``.
Per thread, the calls, the parent -> child edges and the ordered trees must be the same, and each
framescope slice must contain the ground truth's slice of the same call.

On 3.10/3.11 with ``c_calls``, builtins are seen only by a profile function, and a thread has one
profile slot: the two recorders then record two runs of the program each alone, and the
comparison is of the trees only (threads matched by content, not by id; no timing).

A difference from the ground truth that is the right answer is stated in EXPECTED below, per
program, with the reason (docs/tracing.md says the same); there is no blanket tolerance.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import pytest

from differential_compare import by_content, compare
from ground_truth import Forest, Node, load_recorder

HERE = Path(__file__).resolve().parent
PROGRAMS = sorted(p.stem for p in (HERE / "programs").glob("*.py") if not p.stem.startswith("_"))
CONFIGS = [("frame_hook", False), ("frame_hook", True), ("fallback", False), ("fallback", True)]
SHARED_SLOT = sys.version_info < (3, 12)  # 3.10/3.11: builtins only through the profile slot

# program -> function(backend, c_calls) -> (reason, transformation of the ground truth forest),
# or None where framescope must show exactly what the ground truth shows.
Expectation = Callable[[str, bool], "tuple[str, Callable[[Forest], Forest]] | None"]
EXPECTED: dict[str, Expectation] = {}


class Runs:
    """Runs every (program, backend, c_calls) in subprocesses, a few at a time, on first use."""

    def __init__(self, build_dir: Path) -> None:
        self.build_dir = build_dir
        self.pool = ThreadPoolExecutor(max_workers=4)
        self.futures: dict[tuple[str, str, bool], Future[dict[str, Any]]] = {}

    def start_all(self) -> None:
        if self.futures:
            return
        load_recorder(self.build_dir)  # build once, before the subprocesses import it
        for program in PROGRAMS:
            for backend, c_calls in CONFIGS:
                key = (program, backend, c_calls)
                self.futures[key] = self.pool.submit(self._run, *key)

    def result(self, program: str, backend: str, c_calls: bool) -> dict[str, Any]:
        self.start_all()
        return self.futures[(program, backend, c_calls)].result()

    def _run(self, program: str, backend: str, c_calls: bool) -> dict[str, Any]:
        separate = c_calls and SHARED_SLOT
        modes = ["framescope", "ground_truth"] if separate else ["both"]
        out: dict[str, Any] = {"separate": separate}
        env = dict(os.environ, FRAMESCOPE_GT_BUILD=str(self.build_dir))
        for mode in modes:
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "result.json"
                cmd = [sys.executable, str(HERE / "differential_runner.py"), program, backend,
                       "1" if c_calls else "0", mode, str(path)]
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
                if proc.returncode != 0:
                    raise AssertionError(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
                data = json.loads(path.read_text())
            for side in ("framescope", "ground_truth"):
                if data[side] is None:
                    continue
                forest = {int(t): [Node.from_json(n) for n in roots] for t, roots in data[side].items()}
                out[side] = by_content(forest, data["main_tid"]) if separate else forest
            if mode != "ground_truth":
                out["backend"] = data["backend"]
                out["warnings"] = data["warnings"]
        return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    r = Runs(tmp_path_factory.mktemp("ground_truth"))
    yield r
    r.pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("backend,c_calls", CONFIGS, ids=[f"{b}-{'c' if c else 'py'}" for b, c in CONFIGS])
@pytest.mark.parametrize("program", PROGRAMS)
def test_trace_is_what_ran(program: str, backend: str, c_calls: bool, runs: Runs) -> None:
    r = runs.result(program, backend, c_calls)
    truth: Forest = r["ground_truth"]
    expectation = EXPECTED.get(program)
    expected = expectation(backend, c_calls) if expectation else None
    if expected:
        _reason, transform = expected
        truth = transform(truth)
    problems = compare(truth, r["framescope"], timing=not r["separate"])
    assert not problems, (
        f"{program} with backend={backend} ({r['backend']}), c_calls={c_calls}: "
        f"framescope's trace is not what ran\n" + "\n".join(problems)
    )
