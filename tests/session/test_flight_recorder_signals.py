"""The flight recorder's signal under load: dumps coalesce (never nest, never wait inside a
handler), and the signal cannot end the program until its final trace is on disk, nor after."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.programs import RECORDING_ON_SIGUSR1
from tests.support.trace_checker import check_trace, load_trace

PROGRAM = """
import os, time
def work(n):
    return sum(i * i for i in range(n))
open("started", "w").close()
t = time.monotonic()
while time.monotonic() - t < 0.5:
    work(2000)
print("done")
"""


def _storm(tmp_path: Path, period_s: float, program: str = PROGRAM) -> tuple[int, str, int]:
    """Runs PROGRAM under ``framescope run --dump-on SIGUSR1`` and sends it SIGUSR1 every
    ``period_s`` from its start until it exits (so also while the trace is written, and
    after). Returns (exit status, stderr, signals sent)."""
    (tmp_path / "prog.py").write_text(program)
    proc = subprocess.Popen(
        [sys.executable, "-m", "framescope", "run", "--dump-on", "SIGUSR1", "--limit", "0",
         "--no-follow", "-o", "t.json", "prog.py"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "started").exists():  # the handler is installed by then
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.01)
        sent = 0
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                os.kill(proc.pid, signal.SIGUSR1)
            except ProcessLookupError:
                break
            sent += 1
            time.sleep(period_s)
        _, err = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, err, sent


def test_a_signal_storm_neither_nests_dumps_nor_kills_the_run(tmp_path: Path) -> None:
    # SIGUSR1 every 0.5 ms: each handler used to write a dump inside the previous one (until
    # RecursionError, or a wait on its own lock), and the signals that came after the trace
    # was written ended the program (status -SIGUSR1) once python's finalization put back
    # the default action.
    status, err, sent = _storm(tmp_path, 0.0005)
    assert sent > 100
    assert status == 0, err[-3000:]
    assert "RecursionError" not in err and "Traceback" not in err, err[-3000:]
    assert "trace written to t.json" in err
    check_trace(load_trace(str(tmp_path / "t.json")))
    dumps = sorted(tmp_path.glob("t.dump*.json"))
    assert dumps, err[-3000:]
    # requests that came during a dump were answered by it: far fewer dumps than signals
    assert len(dumps) < sent
    assert "that came while it was written" in err
    check_trace(load_trace(str(dumps[-1])))


NESTED = RECORDING_ON_SIGUSR1 + """
depth = 0
deepest = 0

def dump_with_signals_inside(path, format=None):
    global depth, deepest
    depth += 1
    deepest = max(deepest, depth)
    for _ in range(50):  # each handler runs at the next bytecode: inside this dump
        os.kill(os.getpid(), signal.SIGUSR1)
    real_dump(path, format)
    depth -= 1

prof.dump = dump_with_signals_inside
os.kill(os.getpid(), signal.SIGUSR1)
for _ in range(100):
    pass
prof.stop()
print("deepest", deepest)
"""


def test_signals_during_a_dump_are_answered_by_it(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(NESTED)
    out = subprocess.run([sys.executable, "prog.py"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "deepest 1" in out.stdout, out.stdout + out.stderr
    assert "it also answers 50 more SIGUSR1 that came while it was written" in out.stderr
    assert [p.name for p in tmp_path.glob("t.dump*.json")] == ["t.dump1.json"]


def test_the_handler_stays_until_the_trace_is_written_then_the_signal_is_ignored(
        tmp_path: Path) -> None:
    # The program sends SIGUSR1 from its own atexit function (which runs before framescope's
    # finisher) and from a module object's finalizer (after it, while python tears down): the
    # first is handled (the session is stopping: no dump), the second must not kill it.
    program = PROGRAM + """
import atexit, os, signal
class LastWord:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGUSR1)
        print("after the trace", flush=True)
last_word = LastWord()
atexit.register(lambda: os.kill(os.getpid(), signal.SIGUSR1))
"""
    (tmp_path / "prog.py").write_text(program)
    out = subprocess.run([sys.executable, "-m", "framescope", "run", "--dump-on", "SIGUSR1",
                          "--limit", "0", "--no-follow", "-o", "t.json", "prog.py"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "trace written to t.json" in out.stderr
    check_trace(load_trace(str(tmp_path / "t.json")))


THREADS_FAIL_AT_ONCE = """
import threading
def work(n):
    return sum(range(n))
for _ in range(2000):
    work(100)
barrier = threading.Barrier(40)
def fail():
    barrier.wait()
    raise RuntimeError("worker failed")
threads = [threading.Thread(target=fail) for _ in range(40)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("joined")
"""


def test_threads_failing_at_once_share_their_dumps(tmp_path: Path) -> None:
    # 40 unhandled exceptions at the same moment: each thread's request waits for the dump in
    # progress, and those waiting together are answered by one dump after it.
    (tmp_path / "prog.py").write_text(THREADS_FAIL_AT_ONCE)
    out = subprocess.run([sys.executable, "-m", "framescope", "run", "--dump-on", "SIGUSR1",
                          "--limit", "0", "--no-follow", "-o", "t.json", "prog.py"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "joined" in out.stdout
    assert "RuntimeError: worker failed" in out.stderr  # reported as python does (the 40
    # threads' reports interleave on stderr, so they are not counted here)
    dumps = list(tmp_path.glob("t.dump*.json"))
    assert 1 <= len(dumps) <= 20, len(dumps)
    check_trace(load_trace(str(max(dumps, key=lambda p: int(p.name[6:-5])))))
