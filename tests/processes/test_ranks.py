"""Ranks of a job without a launcher: rank detection from each launcher's environment, the
rank's output name, and `framescope merge` aligning ranks whose clocks differ (an injected skew)
by the wall-clock fallback. The real launchers (torchrun, mpirun) are in test_launchers.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import framescope
from framescope.processes import _clock_sync as clock_sync
from framescope.processes import _merge as merge
from framescope.processes import _process_table as processes
from framescope.processes import _ranks as ranks

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

SKEW_NS = 300_000_000


# ---- which rank --------------------------------------------------------------------------------

@pytest.mark.parametrize("env, expected", [
    ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"},
     ranks.RankInfo(3, 4, 1, 2, "torchrun")),
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
      "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
     ranks.RankInfo(1, 2, 1, 2, "Open MPI")),
    ({"PMI_RANK": "5", "PMI_SIZE": "8"}, ranks.RankInfo(5, 8, None, None, "PMI")),
    ({"RANK": "0"}, None),  # RANK alone is not a launcher's
    ({}, None),
])
def test_rank_from_each_launchers_environment(env: dict[str, str], expected: ranks.RankInfo | None) -> None:
    assert ranks.current(env) == expected


@pytest.mark.parametrize("env", [
    {"RANK": "x", "WORLD_SIZE": "2"},
    {"RANK": "2", "WORLD_SIZE": "2"},
    {"PMI_RANK": "0", "PMI_SIZE": "0"},
])
def test_invalid_launcher_environment_warns_and_is_ignored(env: dict[str, str]) -> None:
    with pytest.warns(UserWarning, match="ignoring the"):
        assert ranks.current(env) is None


def test_single_host_from_local_world_size() -> None:
    assert ranks.RankInfo(0, 2, 0, 2, "torchrun").single_host is True
    assert ranks.RankInfo(0, 4, 0, 2, "torchrun").single_host is False
    assert ranks.RankInfo(0, 4, None, None, "PMI").single_host is None


@pytest.mark.parametrize("path, expected", [
    (None, "rank1.fstrace"),
    ("out/trace.json", "out/trace.rank1.json"),
    ("trace.json.gz", "trace.rank1.json.gz"),
    ("t.speedscope.json", "t.rank1.speedscope.json"),
    ("job-{rank}.pftrace", "job-1.pftrace"),
    ("noext", "noext.rank1"),
])
def test_rank_output_names(path: str | None, expected: str) -> None:
    assert ranks.rank_output(path, ranks.RankInfo(1, 2, 1, 2, "torchrun")) == expected


def test_test_skew_per_rank() -> None:
    assert clock_sync.test_skew_ns({}) == 0
    assert clock_sync.test_skew_ns({"FRAMESCOPE_TEST_CLOCK_SKEW_NS": "5"}) == 5
    env = {"FRAMESCOPE_TEST_CLOCK_SKEW_NS": "0, -7", "RANK": "1", "WORLD_SIZE": "2"}
    assert clock_sync.test_skew_ns(env) == -7
    with pytest.raises(ValueError, match="integers expected"):
        clock_sync.test_skew_ns({"FRAMESCOPE_TEST_CLOCK_SKEW_NS": "soon"})


# ---- clock offsets ------------------------------------------------------------------------------

def meta(host: str, start: tuple[int, int], stop: tuple[int, int],
         measured: list[int] | None = None) -> dict[str, object]:
    return {"host_id": host, "clock": {
        "start": list(start), "stop": list(stop),
        "measured": [{"at_ns": 0, "offset_ns": m, "error_ns": 10, "via": "test"}
                     for m in (measured or [])]}}


def test_clock_offset_methods() -> None:
    ref = meta("A", (100, 1_000_100), (200, 1_000_200), measured=[0, 0])
    # measured on both: the difference of the means
    assert merge.clock_offset(meta("B", (0, 0), (0, 0), measured=[-50, -70]), ref) == (-60, "measured offset", 20)
    # same host: CLOCK_MONOTONIC is shared
    assert merge.clock_offset(meta("A", (5, 7), (9, 11)), ref)[:2] == (0, "same host")
    # other host, no measurement: (realtime - monotonic) differences
    other = meta("B", (400, 1_000_100), (500, 1_000_200))  # its monotonic reads 300 ns later
    assert merge.clock_offset(other, ref)[:2] == (-300, "wall clock")
    assert merge.clock_offset(None, ref)[:2] == (0, "none (no clock data)")


def test_every_trace_describes_its_process() -> None:
    with framescope.profile() as prof:
        sum(range(10))
    (entry,) = processes.read(prof.trace)
    assert entry.pid == os.getpid()
    assert entry.metadata["host_id"] == clock_sync.host_id()
    start, stop = entry.metadata["clock"]["start"], entry.metadata["clock"]["stop"]
    # the pairs bracket the session, and realtime - monotonic stays put within it
    assert start[0] <= prof.trace.start_ns and stop[0] >= prof.trace.stop_ns
    assert abs((stop[1] - stop[0]) - (start[1] - start[0])) < 50_000_000


# ---- framescope merge with the wall-clock fallback ----------------------------------------------

RANK_SCRIPT = """
    import sys, time

    def aligned_marker():
        return 1

    wake_at = float(sys.argv[1])          # a wall-clock time both ranks wait for
    time.sleep(max(0.0, wake_at - time.time()))
    aligned_marker()
"""


def run_rank(tmp_path: Path, rank: int, wake_at: float, extra_env: dict[str, str],
             options: tuple[str, ...] = ()) -> subprocess.Popen[str]:
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
               LOCAL_WORLD_SIZE="2", **extra_env)
    env.pop("FRAMESCOPE_FOLLOW", None)
    return subprocess.Popen(
        [sys.executable, "-m", "framescope", "run", "--limit", "0", *options, "rank.py",
         repr(wake_at)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def process_names(path: Path) -> dict[int, tuple[str, list[str]]]:
    trace = pb.Trace()
    trace.ParseFromString(path.read_bytes())
    return {p.track_descriptor.process.pid: (p.track_descriptor.process.process_name,
                                             list(p.track_descriptor.process.process_labels))
            for p in trace.packet
            if p.HasField("track_descriptor") and p.track_descriptor.HasField("process")}


def markers(prof: framescope.profile) -> list[framescope.Event]:
    return [e for e in prof.events() if e.name.endswith(": aligned_marker")]


@pytest.mark.parametrize("options", [(), ("--stream",)], ids=["memory", "stream"])
def test_merge_aligns_a_skewed_rank_by_the_wall_clock(tmp_path: Path, options: tuple[str, ...]) -> None:
    # GIVEN two "ranks" (launcher variables, no launcher) whose rank 1 clock runs 300 ms ahead,
    # which wake at the same wall-clock instant and call aligned_marker() (recorded in memory,
    # or streamed to rankN.fstrace: the streamed file gets the rank and clock data at the end)
    (tmp_path / "rank.py").write_text(textwrap.dedent(RANK_SCRIPT))
    wake_at = time.time() + 3.0
    env = {"FRAMESCOPE_TEST_CLOCK_SKEW_NS": f"0,{SKEW_NS}", "FRAMESCOPE_CLOCK_SYNC": "wall"}
    procs = [run_rank(tmp_path, r, wake_at, env, options) for r in (0, 1)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    # THEN each rank wrote its own trace, named by its rank; only rank 0 printed a summary...
    assert sorted(f.name for f in tmp_path.glob("*.fstrace")) == ["rank0.fstrace", "rank1.fstrace"]
    unmerged = framescope.load(tmp_path / "rank1.fstrace")
    (entry,) = processes.read(unmerged.trace)
    assert entry.name == "rank 1" and entry.rank == 1
    # WHEN merged
    r = subprocess.run([sys.executable, "-m", "framescope", "merge", "rank1.fstrace", "rank0.fstrace",
                        "-o", "job.pftrace"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "rank 1" in r.stderr and "by wall clock" in r.stderr
    # THEN one process per rank, named `rank N`, rank 0 first
    names = process_names(tmp_path / "job.pftrace")
    assert sorted(n for n, _ in names.values()) == ["rank 0", "rank 1"]
    # AND the markers the ranks ran at the same instant line up again (skew 300 ms, tolerance 50)
    prof, placed, warnings = merge.merge_files([str(tmp_path / "rank0.fstrace"),
                                                 str(tmp_path / "rank1.fstrace")])
    assert not warnings
    assert [p.method for p in placed] == ["reference", "wall clock"]
    assert abs(placed[1].offset_ns + SKEW_NS) < 5_000_000
    starts = {prof.trace.threads[e.thread][0]: e.start_ns for e in markers(prof)}
    assert len(starts) == 2
    a, b = starts.values()
    assert abs(a - b) < 50_000_000, (a, b)
    # ... while the unshifted rank 1 trace is 300 ms off
    raw = [e.start_ns for e in markers(unmerged)]
    assert abs(abs(raw[0] - min(a, b)) - SKEW_NS) < 50_000_000


def test_merge_warns_for_missing_and_duplicate_ranks(tmp_path: Path) -> None:
    env = dict(os.environ, RANK="1", WORLD_SIZE="3")
    env.pop("FRAMESCOPE_FOLLOW", None)
    code = "import framescope\nwith framescope.profile() as p:\n    pass\np.save('r{rank}.fstrace')\n"
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, check=True, timeout=60)
    assert (tmp_path / "r1.fstrace").exists()
    _, placed, warnings = merge.merge_files([str(tmp_path / "r1.fstrace")] * 2)
    assert any("are both rank 1" in w for w in warnings)
    assert any("no trace of rank(s) [0, 2] of 3" in w for w in warnings)
    assert [p.rank for p in placed] == [1, 1]


def test_streamed_profile_of_a_rank_is_named_by_rank_and_described(tmp_path: Path) -> None:
    # GIVEN a rank's script that streams with profile(stream_to="s{rank}.fstrace")
    env = dict(os.environ, RANK="1", WORLD_SIZE="3")
    env.pop("FRAMESCOPE_FOLLOW", None)
    code = ("import framescope\n"
            "def streamed_work():\n    return sum(range(100))\n"
            "with framescope.profile(stream_to='s{rank}.fstrace'):\n    streamed_work()\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    # THEN the file is the rank's own, and carries what framescope merge needs: rank, clock data
    assert [f.name for f in tmp_path.glob("*.fstrace")] == ["s1.fstrace"]
    prof = framescope.load(tmp_path / "s1.fstrace")
    (entry,) = processes.read(prof.trace)
    assert entry.name == "rank 1" and entry.rank == 1
    assert entry.metadata["clock"]["start"] and entry.metadata["clock"]["stop"]
    assert any(e.name.endswith(": streamed_work") for e in prof.events())


def test_merged_traces_keep_pids_apart(tmp_path: Path) -> None:
    # Two traces of this process stand for two hosts' processes with the same pid.
    with framescope.profile() as prof:
        sum(range(10))
    prof.save(tmp_path / "a.fstrace")
    prof.save(tmp_path / "b.fstrace")
    merged, _, _ = merge.merge_files([str(tmp_path / "a.fstrace"), str(tmp_path / "b.fstrace")])
    pids = [t[0] for t in merged.trace.threads]
    assert len(set(pids)) == 2
    assert {p.pid for p in processes.read(merged.trace)} == set(pids)
    merged.save(tmp_path / "m.fstrace")
    again = framescope.load(tmp_path / "m.fstrace")
    assert [t[0] for t in again.trace.threads] == pids


def test_merge_cli_errors(tmp_path: Path) -> None:
    (tmp_path / "bad.fstrace").write_bytes(b"not a trace")
    r = subprocess.run([sys.executable, "-m", "framescope", "merge", "bad.fstrace", "-o", "x.json"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "framescope merge:" in r.stderr
    r = subprocess.run([sys.executable, "-m", "framescope", "merge", "missing.fstrace"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "missing.fstrace" in r.stderr
