"""Multi-rank jobs on the real launchers: torch.distributed (gloo) under torchrun and mpi4py
under Open MPI's mpirun, two ranks each, one of them with an injected clock skew of hundreds of
milliseconds. Each rank saves its own trace; `framescope merge` puts them on rank 0's clock with
the offsets measured through the job (torch.distributed's store, MPI messages); the collective
calls of the two ranks then overlap, as they must (neither returns before both have called).

Heavy (torch, MPI): run on Python 3.11 only, where CI installs torch, Open MPI and mpi4py
(scripts/test_all.sh); there a missing one fails rather than skips."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from framescope.processes import _merge as merge
from framescope.processes import _process_table as processes
from tests.support.optional import require

LAUNCHER_VERSION = (3, 11)
SKEW_NS = 300_000_000

pytestmark = pytest.mark.skipif(
    sys.version_info[:2] != LAUNCHER_VERSION,
    reason=f"launcher tests run on Python {LAUNCHER_VERSION[0]}.{LAUNCHER_VERSION[1]}",
)


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", **extra)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.pop("FRAMESCOPE_FOLLOW", None)
    return env


def _collective_calls(prof: Any, suffix: str) -> dict[int, list[tuple[int, int]]]:
    """(start, end) of the calls whose name ends with ``suffix``, per rank, in time order."""
    rank_of = {p.pid: p.rank for p in processes.read(prof.trace)}
    out: dict[int, list[tuple[int, int]]] = {}
    for e in prof.events():
        if e.name.endswith(suffix):
            rank = rank_of[prof.trace.threads[e.thread][0]]
            out.setdefault(rank, []).append((e.start_ns, e.end_ns))
    return {r: sorted(v) for r, v in out.items()}


def _overlaps(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[bool]:
    return [min(x[1], y[1]) > max(x[0], y[0]) for x, y in zip(a, b)]


def _check_merged(tmp_path: Path, suffix: str, calls: int, via: str) -> None:
    paths = [str(tmp_path / "rank0.fstrace"), str(tmp_path / "rank1.fstrace")]
    prof, placed, warnings = merge.merge_files(paths)
    assert not warnings, warnings
    # The offset was measured through the job, and is the injected skew within its error bound.
    assert [p.method for p in placed] == ["reference", "measured offset"], placed
    assert placed[1].error_ns is not None and placed[1].error_ns < 5_000_000
    assert abs(placed[1].offset_ns + SKEW_NS) <= placed[1].error_ns + 1_000_000, placed[1]
    rank1 = next(p for p in processes.read(prof.trace) if p.rank == 1)
    assert {m["via"] for m in rank1.metadata["clock"]["measured"]} == {via}
    # Each rank's collective calls overlap the other rank's, call by call...
    merged = _collective_calls(prof, suffix)
    assert sorted(merged) == [0, 1] and len(merged[0]) == len(merged[1]) == calls
    assert all(_overlaps(merged[0], merged[1])), merged
    # ... which they did not before the merge shifted rank 1 back by the skew.
    raw = [_collective_calls(processes_only(p), suffix) for p in paths]
    assert not any(_overlaps(raw[0][0], raw[1][1]))


def processes_only(path: str) -> Any:
    import framescope

    return framescope.load(path)


ALL_REDUCE = """
    import torch
    import torch.distributed as dist

    def train_step(t):
        dist.all_reduce(t)

    def main():
        dist.init_process_group("gloo")
        t = torch.ones(1 << 18)
        for _ in range(20):
            train_step(t)
        assert int(t[0]) == 2 ** 20
        dist.destroy_process_group()

    main()
"""


def test_torchrun_gloo_framescope_run(tmp_path: Path) -> None:
    require("torch")
    # GIVEN a two-rank gloo job whose rank 1 clock runs 300 ms ahead
    (tmp_path / "train.py").write_text(textwrap.dedent(ALL_REDUCE))
    env = _env(FRAMESCOPE_TEST_CLOCK_SKEW_NS=f"0,{SKEW_NS}", FRAMESCOPE_CLOCK_SYNC="collective")
    # WHEN run as `torchrun --no-python framescope run train.py`
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                        "--no-python", "framescope", "run", "train.py"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    # THEN each rank saved its own trace, named by its rank, with its rank
    for rank in (0, 1):
        (entry,) = [p for p in processes.read(processes_only(str(tmp_path / f"rank{rank}.fstrace")).trace)
                    if p.role == "main"]
        assert entry.name == f"rank {rank}" and entry.metadata["rank"]["launcher"] == "torchrun"
        # measured right after init_process_group and right before destroy_process_group
        assert len(entry.metadata["clock"]["measured"]) == 2
    # AND framescope merge aligns them
    r = subprocess.run([sys.executable, "-m", "framescope", "merge", "rank0.fstrace", "rank1.fstrace",
                        "-o", "job.pftrace"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    _check_merged(tmp_path, ": all_reduce", 20, "torch.distributed store")


IN_SCRIPT = """
    import torch
    import torch.distributed as dist
    import framescope

    def train_step(t):
        dist.all_reduce(t)

    dist.init_process_group("gloo")
    t = torch.ones(1 << 18)
    with framescope.profile() as prof:
        for _ in range(10):
            train_step(t)
    prof.save("rank{rank}.fstrace")
    dist.destroy_process_group()
"""


def test_torchrun_gloo_profile_inside_the_script(tmp_path: Path) -> None:
    require("torch")
    (tmp_path / "train.py").write_text(textwrap.dedent(IN_SCRIPT))
    env = _env(FRAMESCOPE_TEST_CLOCK_SKEW_NS=f"0,{SKEW_NS}", FRAMESCOPE_CLOCK_SYNC="collective")
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                        "train.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    for rank in (0, 1):
        entry = processes.read(processes_only(str(tmp_path / f"rank{rank}.fstrace")).trace)[0]
        assert entry.name == f"rank {rank}"
        assert len(entry.metadata["clock"]["measured"]) == 2  # at the session's start and stop
    _check_merged(tmp_path, ": all_reduce", 10, "torch.distributed store")


MPI_ALLREDUCE = """
    import array
    from mpi4py import MPI

    def train_step(comm, buf, out):
        comm.Allreduce(buf, out, op=MPI.SUM)

    comm = MPI.COMM_WORLD
    buf, out = array.array("d", [1.0] * (1 << 16)), array.array("d", [0.0] * (1 << 16))
    for _ in range(20):
        train_step(comm, buf, out)
    assert out[0] == 2.0
"""


def test_mpirun_mpi4py_framescope_run(tmp_path: Path) -> None:
    require("mpi4py")
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        if os.environ.get("CI"):
            pytest.fail("mpirun (Debian's openmpi-bin) is not installed")
        pytest.skip("mpirun is not installed")
    (tmp_path / "job.py").write_text(textwrap.dedent(MPI_ALLREDUCE))
    env = _env()
    r = subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe", "-n", "2",
                        "-x", f"FRAMESCOPE_TEST_CLOCK_SKEW_NS=0,{SKEW_NS}",
                        "-x", "FRAMESCOPE_CLOCK_SYNC=collective", "-x", "PATH",
                        "framescope", "run", "job.py"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-4000:])
    for rank in (0, 1):
        entry = processes.read(processes_only(str(tmp_path / f"rank{rank}.fstrace")).trace)[0]
        assert entry.name == f"rank {rank}" and entry.metadata["rank"]["launcher"] == "Open MPI"
        # measured after MPI's initialisation (import of mpi4py.MPI) and at the session's stop
        assert len(entry.metadata["clock"]["measured"]) == 2
    _check_merged(tmp_path, ": train_step", 20, "MPI")


ONLY_RANK_0 = """
    import torch
    import torch.distributed as dist
    import framescope

    dist.init_process_group("gloo")
    if dist.get_rank() == 0:            # a session on rank 0 only: rank 1 never syncs
        with framescope.profile() as prof:
            sum(range(100))
        prof.save("rank{rank}.fstrace")
    t = torch.ones(4)
    dist.all_reduce(t)                  # the job's own collective still matches up afterwards
    assert int(t[0]) == 2
    dist.destroy_process_group()
"""


def test_a_rank_that_does_not_sync_costs_a_timeout_not_a_hang(tmp_path: Path) -> None:
    require("torch")
    (tmp_path / "job.py").write_text(textwrap.dedent(ONLY_RANK_0))
    env = _env(FRAMESCOPE_CLOCK_SYNC="collective", FRAMESCOPE_CLOCK_SYNC_TIMEOUT="2")
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                        "job.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    assert r.stderr.count("did not reach sync round") == 2, r.stderr[-4000:]  # start and stop
    entry = processes.read(processes_only(str(tmp_path / "rank0.fstrace")).trace)[0]
    assert entry.name == "rank 0"
