"""Streaming capture: profile(stream_to=...) writes full event chunks to a .fstrace file while the
session runs; at stop the trace reads from the file. Checked against the same workload recorded
in memory, through the file's own reader and Perfetto's protos."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import Counter

import pytest

import framescope
from framescope import _core

perfetto_reader = pytest.importorskip("tests.support.perfetto_reader", reason="needs perfetto + protobuf")


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def fib_calls(n: int) -> int:
    a, b = 1, 1  # calls of fib(0), fib(1)
    for _ in range(n - 1):
        a, b = b, a + b + 1
    return b if n >= 1 else a


def ranged_worker(n: int) -> None:
    # Ranges with inputs (side records), marks and memory samples on every iteration, so that
    # side records cross many chunk hand-offs.
    for i in range(n):
        with framescope.record_function(f"step{i % 7}", f"arg{i % 3}"):
            fib(6)
        if i % 10 == 0:
            framescope.mark(f"mark{i % 4}")
            framescope.record_memory(0x1000 + i, 64, i, i * 2)


def workload() -> None:
    threads = [
        threading.Thread(target=fib, args=(23,), name="fib-a"),
        threading.Thread(target=fib, args=(22,), name="fib-b"),
        threading.Thread(target=ranged_worker, args=(3000,), name="ranges"),
    ]
    for t in threads:
        t.start()
    fib(24)
    for t in threads:
        t.join()
    # Short-lived threads hand their partial chunks to the writer as they exit.
    for i in range(6):
        t = threading.Thread(target=fib, args=(10 + i,), name=f"short-{i}")
        t.start()
        t.join()


def shape(prof: framescope.profile) -> Counter[tuple[str, str, int, str]]:
    """(thread name, event name, depth below the workload, parent name) of the workload's events."""
    threads = {i: name for i, (_, _, _, name) in enumerate(prof.trace.threads)}
    events = list(prof.events())
    out: Counter[tuple[str, str, int, str]] = Counter()
    for e in events:
        name = e.name
        if not (name.endswith((": fib", ": ranged_worker")) or name.startswith(("step", "mark"))):
            continue
        parent = events[e.parent].name if e.parent is not None else ""
        parent = parent if parent.endswith(": fib") or parent.startswith("step") else "-"
        out[(threads[e.thread], name.rsplit(": ", 1)[-1], e.duration_ns >= 0, parent)] += 1
    return out


@pytest.fixture
def stream_path(tmp_path):
    return str(tmp_path / "run.fstrace")


def test_streamed_trace_equals_the_in_memory_one(stream_path):
    with framescope.profile(record_shapes=True, profile_memory=True) as memory_prof:
        workload()
    # 1 MiB of buffers (4 chunks) for 7 threads: chunks go to the file all the time, and threads
    # wait for the writer to give chunks back.
    with framescope.profile(record_shapes=True, profile_memory=True, stream_to=stream_path,
                            memory_limit="1MiB") as prof:
        workload()
    assert prof.trace.dropped_events == 0, prof.warnings
    assert not [w for w in prof.warnings if "memory limit" in w]
    assert os.path.getsize(stream_path) > 4 * (1 << 20)  # far more than the buffers held
    assert shape(prof) == shape(memory_prof)
    counts = Counter(e.name.rsplit(": ", 1)[-1] for e in prof.events())
    assert counts["fib"] == sum(fib_calls(n) for n in (23, 22, 24)) + 3000 * fib_calls(6) + sum(
        fib_calls(10 + i) for i in range(6))
    assert {f"step{i}" for i in range(7)} <= set(counts)
    assert sum(counts[f"mark{i}"] for i in range(4)) == 300
    memory = prof.memory_events()
    assert [m.address for m in memory] == [0x1000 + i for i in range(0, 3000, 10)]
    # Range inputs survived the hand-offs: every step range has its args.
    events = prof.events()
    steps = [i for i in range(len(events)) if events[i].name.startswith("step")]
    assert len(steps) == 3000
    assert {prof.trace.detail(i)[3][0] for i in steps[:50]} == {"arg0", "arg1", "arg2"}
    assert len(prof.trace.threads) == 1 + 3 + 6  # short-lived threads included


def test_stream_file_loads_and_converts_with_every_event(stream_path, tmp_path):
    with framescope.profile(stream_to=stream_path, memory_limit="1MiB") as prof:
        workload()
    n = len(prof.events())
    loaded = framescope.load(stream_path)
    assert len(loaded.events()) == n
    assert loaded.stats() == prof.stats()
    out = str(tmp_path / "run.pftrace")
    prof.export(out)
    trace = perfetto_reader.read(out)
    assert len(trace.slices) == sum(1 for e in prof.events() if e.duration_ns >= 0)
    assert Counter(s.name for s in trace.slices) == Counter(
        e.name for e in prof.events() if e.duration_ns >= 0)


def test_stream_errors_are_clear(tmp_path):
    with pytest.raises(OSError) as err:
        framescope.profile(stream_to=str(tmp_path / "missing" / "x.fstrace")).start()
    assert err.value.errno is not None
    assert not _core.is_enabled()
    with pytest.raises(ValueError):
        framescope.profile(stream_to=str(tmp_path / "x.fstrace"), on_limit="keep_newest")
    with pytest.raises(ValueError):
        framescope.profile(stream_to=str(tmp_path / "x\0.fstrace"))
    # A failed start leaves nothing behind, and a session can start afterwards.
    assert os.listdir(tmp_path) == []
    with framescope.profile() as prof:
        fib(5)
    assert len(prof.events()) >= fib_calls(5)


def test_stream_replaces_a_file_only_at_stop(stream_path):
    with open(stream_path, "wb") as f:
        f.write(b"old")
    prof = framescope.profile(stream_to=stream_path).start()
    fib(15)
    with open(stream_path, "rb") as f:
        assert f.read() == b"old"  # the stream goes to a temporary next to it until the stop
    prof.stop()
    assert framescope.load(stream_path).stats() == prof.stats()
    assert [p for p in os.listdir(os.path.dirname(stream_path)) if p.endswith(".tmp")] == []


CHILD = r"""
import os, sys, framescope
def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)
path = sys.argv[1]
prof = framescope.profile(stream_to=path, memory_limit="1MiB").start()
fib(18)
pid = os.fork()
if pid == 0:
    # The writer thread does not exist here: the child must neither hang nor touch the file.
    fib(18)
    fib(18)
    os._exit(0)
fib(17)
_, status = os.waitpid(pid, 0)
prof.stop()
loaded = framescope.load(path)
print(os.waitstatus_to_exitcode(status), len(loaded.events()) == len(prof.events()))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_during_a_streamed_session(stream_path):
    out = subprocess.run([sys.executable, "-c", CHILD, stream_path], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "True"], out.stderr


MEMORY = r"""
import resource, sys, framescope
def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)
def peak_mb(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
fib(20)
base = peak_mb()
with framescope.profile(stream_to=sys.argv[1], memory_limit="4MiB") as prof:
    fib(31)
n = next(calls for name, calls, *_ in prof.trace.stats() if name.endswith(": fib"))
prof.export(sys.argv[2])
print(n, prof.trace.slot_bytes, peak_mb() - base)
"""


def test_streamed_session_memory_stays_flat(stream_path, tmp_path):
    # 4.3 M calls, ~70 MB of slots: recorded, counted and exported with a few MB of buffers (the
    # file is mapped, and a trace this big lets go of its pages as each replay passes).
    out = subprocess.run([sys.executable, "-c", MEMORY, stream_path, str(tmp_path / "x.pftrace")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    events, slot_bytes, growth_mb = out.stdout.split()
    assert int(events) == fib_calls(31)
    assert int(slot_bytes) > 64 << 20
    assert float(growth_mb) < int(slot_bytes) / 3e6, out.stdout


def test_cli_run_stream(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)\nfib(16)\n")
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-m", "framescope", "run", "--stream", "-o",
                          str(tmp_path / "t.fstrace"), "--limit", "0", str(script)],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    prof = framescope.load(str(tmp_path / "t.fstrace"))
    assert sum(1 for e in prof.events() if e.name.endswith(": fib")) == fib_calls(16)
    # Another format: streamed to a temporary .fstrace, converted at the end, which is removed.
    out = subprocess.run([sys.executable, "-m", "framescope", "run", "--stream", "-o",
                          str(tmp_path / "t.pftrace"), "--limit", "0", str(script)],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    trace = perfetto_reader.read(str(tmp_path / "t.pftrace"))
    assert sum(1 for s in trace.slices if s.name.endswith(": fib")) == fib_calls(16)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prog.py", "t.fstrace", "t.pftrace"]


def test_threads_that_record_nothing_survive_save_load_and_streaming(tmp_path):
    # Threads blocked through the whole session (running Python code at its start) are threads
    # of the trace with no buffer: any number of them in a saved or streamed file.
    release = threading.Event()
    started = threading.Barrier(4)

    def blocked() -> None:
        started.wait()
        release.wait()

    threads = [threading.Thread(target=blocked) for _ in range(3)]
    for t in threads:
        t.start()
    started.wait()
    try:
        with framescope.profile() as prof:
            fib(8)
        with framescope.profile(stream_to=str(tmp_path / "s.fstrace")) as streamed:
            fib(8)
    finally:
        release.set()
        for t in threads:
            t.join()
    for p in (prof, streamed):
        n = len(p.trace.threads)
        assert n >= 4
        p.save(str(tmp_path / "t.fstrace"))
        loaded = framescope.load(str(tmp_path / "t.fstrace"))
        assert len(loaded.trace.threads) == n
        assert [(e.name, e.thread) for e in loaded.events()] == [
            (e.name, e.thread) for e in p.events()]


def test_cli_run_stream_to_fstrace_keeps_children_and_the_process_description(tmp_path):
    # The streamed .fstrace is the output itself: the followed child's trace and this process's
    # name, merged after the stream was completed at stop, must be in the file too.
    script = tmp_path / "prog.py"
    script.write_text(
        "import subprocess, sys\n"
        "def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
        "subprocess.run([sys.executable, '-c',\n"
        "    'def g(n): return n if n < 2 else g(n - 1) + g(n - 2)\\ng(10)'], check=True)\n"
        "fib(12)\n")
    out = subprocess.run([sys.executable, "-m", "framescope", "run", "--stream", "-o",
                          str(tmp_path / "t.fstrace"), "--limit", "0", str(script)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    prof = framescope.load(str(tmp_path / "t.fstrace"))
    assert sum(1 for e in prof.events() if e.name.endswith(": fib")) == fib_calls(12)
    assert sum(1 for e in prof.events() if e.name.endswith(": g")) == fib_calls(10)
    pids = {t[0] for t in prof.trace.threads}
    assert len(pids) == 2
    names = {pid: name for pid, name, *_ in prof.trace._processes()}
    assert set(names) == pids
    assert any("prog.py" in name for name in names.values()), names
    # the file converts to Perfetto with both processes' events
    pf = tmp_path / "t.pftrace"
    subprocess.run([sys.executable, "-m", "framescope", "convert", str(tmp_path / "t.fstrace"),
                    str(pf)], check=True, capture_output=True, timeout=120)
    trace = perfetto_reader.read(str(pf))
    assert sum(1 for s in trace.slices if s.name.endswith(": g")) == fib_calls(10)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prog.py", "t.fstrace", "t.pftrace"]
