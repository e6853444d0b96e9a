"""The trace is what ran: framescope's call trees against CPython's own hooks, program by program.

Each program of tests/tracer/programs runs in a fresh interpreter under both recorders at once: the
ground truth (ground_truth_recorder.c: sys.monitoring on 3.12+, a C function in every thread's
trace slot on 3.10/3.11) and framescope, with every backend and with and without ``c_calls``.
Per thread, the calls, the parent -> child edges and the ordered trees must be the same, and each
framescope slice must contain the ground truth's slice of the same call.

On 3.10/3.11 with ``c_calls``, builtins are seen only by a profile function, and a thread has one
profile slot, which framescope takes: the ground truth then records the same run's Python frames
from the trace slot (compared with framescope's frames, timing included), and the builtins in a
second run of its own (compared with framescope's trees, threads matched by content; no timing).
Programs whose threads' calls depend on scheduling cannot be compared across two runs:
SCHEDULING_DEPENDENT names them, with the reason.

A difference from the ground truth that is the right answer is stated in EXPECTED below, per
program, with the reason (docs/tracing.md says the same); there is no blanket tolerance.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from tests.support.differential_compare import by_content, compare
from tests.support.ground_truth import Forest, Node, drop_builtins, forest_from_json, load_recorder

HERE = Path(__file__).resolve().parent
PROGRAMS = sorted(p.stem for p in (HERE / "programs").glob("*.py") if not p.stem.startswith("_"))
# FRAMESCOPE_DIFF_PROGRAMS=a,b runs only those programs (while working on them).
if os.environ.get("FRAMESCOPE_DIFF_PROGRAMS"):
    PROGRAMS = [p for p in PROGRAMS if p in os.environ["FRAMESCOPE_DIFF_PROGRAMS"].split(",")]
CONFIGS = [("frame_hook", False), ("frame_hook", True), ("fallback", False), ("fallback", True)]
SHARED_SLOT = sys.version_info < (3, 12)  # 3.10/3.11: builtins only through the profile slot

# program -> function(backend, c_calls) -> (reason, transformation of the ground truth forest),
# or None where framescope must show exactly what the ground truth shows.
Expectation = Callable[[str, bool], "tuple[str, Callable[[Forest], Forest]] | None"]
EXPECTED: dict[str, Expectation] = {}

# Programs whose threads make other calls from one run to the next (whether a wait blocks, how
# many times a loop turns before another thread stops it): their builtins cannot be compared
# between two runs (3.10/3.11 with c_calls; their Python frames are still compared in one run).
SCHEDULING_DEPENDENT = {
    "session_in_thread": "the main thread is in start() or already in join() at the session's start",
    "second_session_on_thread": "the main thread is in start() or already in join() then",
    "daemon_thread_at_stop": "the daemon thread's loop turns as often as scheduling lets it",
    "busy_thread_before_session": "the worker's loop turns as often as scheduling lets it",
    "thread_pool": "submit() checks an idle semaphore whose state depends on the worker",
    "threads_sync": "the consumer waits on the queue only when it is ahead of the producer",
    "threads_raw": "a finished thread's weakref callback (WeakSet._remove of threading._dangling)"
    " runs in whichever thread drops its last reference, the thread itself or the main thread",
    "asyncio_threads": "weakref callbacks (WeakSet._remove) run where the executor's threads and"
    " the loop's objects die: in the thread that drops them last, or in an automatic collection",
    "worker_across_sessions": "the worker's calls after it signals its last job run before or"
    " after the session's stop",
}


# What threading's synchronization calls depends on whether another thread waits at that moment
# (Thread.start() waits for the new thread only when it has not signalled yet; Event.set()
# wakes waiters only when there are some). Across two runs, these calls keep their slices but
# not their children.
SYNC_CALLS = ("wait", "set", "notify", "notify_all", "_wait_for_tstate_lock", "acquire", "release")


def without_sync_internals(forest: Forest) -> Forest:
    def cut(nodes: list[Node]) -> list[Node]:
        out = []
        for n in nodes:
            name, _, where = n.key.partition(" (")
            sync = name in SYNC_CALLS and where.rsplit(":", 1)[0].endswith("threading.py")
            out.append(Node(n.key, n.kind, n.start, n.end, [] if sync else cut(n.children)))
        return out

    return {tid: cut(roots) for tid, roots in forest.items()}


def across_runs(forest: Forest, main_tid: int) -> Forest:
    """A run's forest as two runs can share it: threading's synchronization internals cut, threads
    numbered by content (OS thread ids differ between runs)."""
    return by_content(without_sync_internals(forest), main_tid)


class Runs:
    """Every (program, backend, c_calls) run, made by one differential_runner.py process that
    forks a child per run; started on first use."""

    def __init__(self, build_dir: Path, out_dir: Path) -> None:
        self.build_dir = build_dir
        self.out_dir = out_dir
        self.proc: subprocess.Popen[str] | None = None
        self.outputs: dict[tuple[str, str, bool], list[tuple[str, Path]]] = {}

    def start_all(self) -> None:
        if self.proc:
            return
        load_recorder(self.build_dir)  # build once, before the runner imports it
        jobs = []
        for program in PROGRAMS:
            for backend, c_calls in CONFIGS:
                modes = ["both", "ground_truth"] if c_calls and SHARED_SLOT else ["both"]
                for mode in modes:
                    out = self.out_dir / f"{program}-{backend}-{int(c_calls)}-{mode}.json"
                    jobs.append([program, backend, c_calls, mode, str(out)])
                    self.outputs.setdefault((program, backend, c_calls), []).append((mode, out))
        jobs_file = self.out_dir / "jobs.json"
        jobs_file.write_text(json.dumps(jobs))
        env = dict(os.environ, FRAMESCOPE_GT_BUILD=str(self.build_dir))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.differential_runner", str(jobs_file)],
            cwd=HERE.parents[1], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )

    def result(self, program: str, backend: str, c_calls: bool) -> dict[str, Any]:
        self.start_all()
        assert self.proc is not None
        if self.proc.returncode is None:
            log, _ = self.proc.communicate(timeout=1200)
            assert self.proc.returncode == 0, f"differential_runner.py failed:\n{log}"
        separate = c_calls and SHARED_SLOT
        out: dict[str, Any] = {"separate": separate}
        for mode, path in self.outputs[(program, backend, c_calls)]:
            data = json.loads(path.read_text())
            if "error" in data:
                raise AssertionError(f"{program} ({backend}, c_calls={c_calls}, {mode}):\n{data['error']}")
            for side in ("framescope", "ground_truth"):
                if data.get(side) is None:
                    continue
                forest = {int(t): forest_from_json(rows) for t, rows in data[side].items()}
                if mode == "ground_truth":
                    out["ground_truth_builtins"] = across_runs(forest, data["main_tid"])
                else:
                    out[side] = forest
                    if separate and side == "framescope":
                        out["framescope_across_runs"] = across_runs(forest, data["main_tid"])
            if mode == "both":
                out["backend"] = data["backend"]
                out["warnings"] = data["warnings"]
        return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    r = Runs(tmp_path_factory.mktemp("ground_truth"), tmp_path_factory.mktemp("runs"))
    yield r
    if r.proc and r.proc.returncode is None:
        r.proc.kill()
        r.proc.wait()


@pytest.mark.parametrize("backend,c_calls", CONFIGS, ids=[f"{b}-{'c' if c else 'py'}" for b, c in CONFIGS])
@pytest.mark.parametrize("program", PROGRAMS)
def test_trace_is_what_ran(program: str, backend: str, c_calls: bool, runs: Runs) -> None:
    r = runs.result(program, backend, c_calls)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 50_000))  # deep trees are walked recursively
    truth: Forest = r["ground_truth"]
    expectation = EXPECTED.get(program)
    expected = expectation(backend, c_calls) if expectation else None
    if expected:
        _reason, transform = expected
        truth = transform(truth)
    where = f"{program} with backend={backend} ({r['backend']}), c_calls={c_calls}"
    seen: Forest = r["framescope"]
    if r["separate"]:
        seen = {tid: drop_builtins(roots) for tid, roots in seen.items()}
    problems = compare(truth, seen, timing=True)
    assert not problems, f"{where}: framescope's trace is not what ran\n" + "\n".join(problems)
    if r["separate"]:
        if program in SCHEDULING_DEPENDENT:
            pytest.skip(f"builtins not compared across two runs: {SCHEDULING_DEPENDENT[program]}")
        problems = compare(r["ground_truth_builtins"], r["framescope_across_runs"], timing=False)
        assert not problems, (
            f"{where}: framescope's builtins differ from a run of the ground truth alone\n"
            + "\n".join(problems)
        )
