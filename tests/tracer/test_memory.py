"""profile_memory=True: Python allocations counted per thread and charged to the running function
or range, a counter track in the trace, and coexistence with tracemalloc."""

from __future__ import annotations

import threading
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

import framescope
from framescope import _core
from tests.support import perfetto_reader
from tests.support.trace_checker import check_trace, load_trace

MB = 1 << 20
BACKENDS = ["frame_hook", "fallback"]


def one_mb() -> bytearray:
    return bytearray(MB)


def two_mb() -> bytearray:
    return bytearray(2 * MB)


def caller() -> list[bytearray]:
    return [one_mb(), two_mb(), bytearray(MB // 2)]  # the last one is caller's own


def short(key: str) -> str:
    return key.rsplit(": ", 1)[-1].split(".")[-1]


def by_name(prof: framescope.profile) -> dict[str, Any]:
    return {short(e.key): e for e in prof.key_averages()}


@pytest.mark.parametrize("backend", BACKENDS)
def test_allocations_are_charged_to_the_running_function(backend: str) -> None:
    with framescope.profile(profile_memory=True, backend=backend) as prof:
        kept = caller()
        with framescope.record_function("in_range"):
            kept.append(bytearray(3 * MB))
    avgs = by_name(prof)
    # object headers, and what the interpreter allocates around the calls (3.10/3.11 setprofile
    # materializes frame objects)
    slack = 16384
    for name, size in (("one_mb", MB), ("two_mb", 2 * MB), ("in_range", 3 * MB)):
        assert size <= avgs[name].self_cpu_memory_usage <= size + slack, name
        assert avgs[name].cpu_memory_usage == avgs[name].self_cpu_memory_usage
    c = avgs["caller"]
    assert MB // 2 <= c.self_cpu_memory_usage <= MB // 2 + slack
    assert c.cpu_memory_usage == c.self_cpu_memory_usage + avgs["one_mb"].cpu_memory_usage + \
        avgs["two_mb"].cpu_memory_usage
    table = prof.key_averages().table(sort_by="self_cpu_memory_usage", row_limit=3)
    assert "CPU Mem" in table and "Self CPU Mem" in table
    assert "in_range" in table.splitlines()[3]  # the biggest self allocation first
    text = prof.summary(sort_by="memory", limit=2)
    assert "self alloc" in text and "in_range" in text.splitlines()[3]


def test_allocations_of_each_thread_stay_on_it() -> None:
    def worker() -> None:
        one_mb()

    with framescope.profile(profile_memory=True) as prof:
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        two_mb()
    per_thread = prof.summary(by_thread=True, sort_by="memory", limit=1)
    sections = per_thread.split("== ")[1:]
    worker_section = next(s for s in sections if "one_mb" in s)
    main_section = next(s for s in sections if "two_mb" in s)
    assert worker_section is not main_section
    assert "two_mb" not in worker_section


def test_counter_track_in_chrome_and_perfetto(tmp_path: Path) -> None:
    with framescope.profile(profile_memory=True) as prof:
        caller()
    prof.export(tmp_path / "t.json")
    data = load_trace(str(tmp_path / "t.json"))
    check_trace(data)
    counters = [e for e in data["traceEvents"] if e.get("ph") == "C"
                and e["name"].startswith("Python allocated bytes")]
    values = [e["args"]["bytes"] for e in counters]
    assert values and values == sorted(values)  # allocations only: never goes down
    assert values[-1] >= 3.5 * MB
    assert not [e for e in data["traceEvents"] if e.get("name") == "[memory]"]
    prof.export(tmp_path / "t.pftrace")
    perfetto = perfetto_reader.read(str(tmp_path / "t.pftrace"))
    tracks = [uuid for uuid, t in perfetto.tracks.items()
              if t.counter and t.name == "Python allocated bytes"]
    assert len(tracks) == 1
    assert perfetto.tracks[tracks[0]].parent in perfetto.tracks  # under the thread's track
    values = [v for _, v in perfetto.counters[tracks[0]]]
    assert values and values == sorted(values) and values[-1] >= 3.5 * MB


def test_no_memory_events_without_profile_memory() -> None:
    with framescope.profile() as prof:
        caller()
    assert not prof.trace.memory
    assert all(e.cpu_memory_usage == 0 for e in prof.key_averages())
    with pytest.raises(ValueError, match="memory"):
        prof.summary(sort_by="memory")


def test_allocators_restored_and_tracemalloc_keeps_working() -> None:
    assert _core._allocators_wrapped() == (False, False)
    tracemalloc.start()
    try:
        with framescope.profile(profile_memory=True) as prof:
            assert _core._allocators_wrapped() == (True, True)
            before = tracemalloc.get_traced_memory()[0]
            kept = one_mb()
            assert tracemalloc.get_traced_memory()[0] - before >= MB  # still traced under us
        assert _core._allocators_wrapped() == (False, False)
        assert MB <= by_name(prof)["one_mb"].self_cpu_memory_usage
        before = tracemalloc.get_traced_memory()[0]
        kept2 = one_mb()
        assert tracemalloc.get_traced_memory()[0] - before >= MB
        del kept, kept2
    finally:
        tracemalloc.stop()


def test_tracemalloc_started_during_the_session() -> None:
    with framescope.profile(profile_memory=True) as prof:
        tracemalloc.start()  # wraps our wrappers
        one_mb()
    # ours stay under tracemalloc's, counting nothing, and the trace says so
    assert any("tracemalloc" in w for w in prof.warnings)
    assert _core._allocators_wrapped() == (False, False)
    tracemalloc.stop()  # restores ours as the installed allocator...
    assert _core._allocators_wrapped() == (True, True)
    with framescope.profile(profile_memory=True) as again:  # ...which counts again
        two_mb()
    assert 2 * MB <= by_name(again)["two_mb"].self_cpu_memory_usage
    assert _core._allocators_wrapped() == (False, False)
    with framescope.profile(profile_memory=True) as third:
        one_mb()
    assert MB <= by_name(third)["one_mb"].self_cpu_memory_usage


def test_memory_dump_and_saved_trace(tmp_path: Path) -> None:
    with framescope.profile(profile_memory=True) as prof:
        caller()
        snap = prof.snapshot()
    assert by_name(snap)["two_mb"].self_cpu_memory_usage >= 2 * MB
    prof.save(tmp_path / "m.fstrace")
    loaded = framescope.load(tmp_path / "m.fstrace")
    assert by_name(loaded)["two_mb"].self_cpu_memory_usage == \
        by_name(prof)["two_mb"].self_cpu_memory_usage
    assert prof.memory_events() == []  # record_memory() samples only: none here


def _calls(n: int) -> int:
    return 1 if n < 2 else _calls(n - 1) + _calls(n - 2)


def _busy() -> int:
    total = 0
    for i in range(200_000):
        total += i * i
    return total


@pytest.mark.parametrize("backend", BACKENDS)
def test_streamed_session_keeps_allocations_and_cpu_times(tmp_path: Path, backend: str) -> None:
    # 1 MiB of buffers: most chunks (with their kAllocDelta events) go to the file while the
    # session runs; the CPU readings are written with the thread tables at the stop.
    path = tmp_path / "s.fstrace"
    with framescope.profile(profile_memory=True, backend=backend, stream_to=path,
                            memory_limit="1MiB") as prof:
        _calls(24)  # ~150,000 calls (2.4 MB of events): chunks handed to the writer before the allocations
        kept = caller()
        _busy()
    assert len(kept) == 3 and prof.trace.dropped_events == 0
    assert path.stat().st_size > 1 << 20  # the events went through the file
    loaded = framescope.load(path)
    for trace in (prof, loaded):
        avgs = by_name(trace)
        for name, size in (("one_mb", MB), ("two_mb", 2 * MB)):
            assert size <= avgs[name].self_cpu_memory_usage <= size + 16384, name
        busy = avgs["_busy"]
        assert busy.on_cpu_time_total is not None and busy.on_cpu_time_total > 0
        # CPU time is never above the wall time of the same slices (readings interpolated).
        assert busy.on_cpu_time_total <= busy.cpu_time_total * 1.001 + 1
    assert by_name(loaded)["two_mb"].self_cpu_memory_usage == \
        by_name(prof)["two_mb"].self_cpu_memory_usage


def test_stream_and_flight_recorder_are_refused_together(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="keep_newest"):
        framescope.profile(stream_to=tmp_path / "x.fstrace", on_limit="keep_newest")


def test_cli_sort_memory_records_memory_and_saved_summaries(tmp_path: Path) -> None:
    import subprocess
    import sys

    (tmp_path / "prog.py").write_text(
        "def one_mb():\n    return bytearray(1 << 20)\n\n"
        "def main():\n    return [one_mb() for _ in range(3)]\n\nmain()\n")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "framescope", *args], capture_output=True,
                              text=True, cwd=tmp_path, timeout=120)

    # --sort memory turns profile_memory on (it used to fail at exit: no memory samples)
    out = cli("run", "-o", "t.fstrace", "--sort", "memory", "--limit", "3", "prog.py")
    assert out.returncode == 0, out.stderr
    # (framescope run prints its summary to stderr: stdout is the program's)
    assert "self alloc" in out.stderr and "one_mb" in out.stderr.splitlines()[3], out.stderr
    summary = cli("summary", "t.fstrace", "--sort", "memory", "--by-thread", "--limit", "2")
    assert summary.returncode == 0 and "one_mb" in summary.stdout, summary.stderr
    # a trace without CPU times: one clear line, no traceback
    out = cli("run", "-o", "n.fstrace", "--no-cpu-time", "--limit", "0", "prog.py")
    assert out.returncode == 0, out.stderr
    no_cpu = cli("summary", "n.fstrace", "--sort", "on_cpu")
    assert no_cpu.returncode == 1 and "Traceback" not in no_cpu.stderr
    assert "CPU" in no_cpu.stderr
    bad = cli("run", "--no-cpu-time", "--sort", "on_cpu", "prog.py")
    assert bad.returncode == 2 and "--no-cpu-time" in bad.stderr and "Traceback" not in bad.stderr
    both = cli("run", "--stream", "--dump-on", "SIGUSR1", "prog.py")
    assert both.returncode == 2 and "--stream" in both.stderr and "--dump-on" in both.stderr


def test_snapshot_of_a_streamed_session_is_refused(tmp_path: Path) -> None:
    prof = framescope.profile(stream_to=tmp_path / "s.fstrace")
    with prof:
        with pytest.raises(RuntimeError, match="streamed session"):
            prof.dump(tmp_path / "d.json")
    assert by_name(prof)  # the session itself is intact
