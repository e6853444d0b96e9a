"""How ``framescope run`` ends when things go wrong around the program: a streamed trace on a
file system that fills up, the children's folder removed during the run, SIGQUIT. Each is said
on one line (never a traceback at exit), and SIGQUIT writes the trace as SIGTERM does."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.programs import LOOP, as_from_a_terminal
from tests.support.trace_checker import check_trace, load_trace

WORK = """
def work(n):
    return sum(i for i in range(n))
for k in range(300000):
    work(5)
print("done")
"""


def _no_traceback(err: str) -> None:
    assert "Traceback" not in err and "Exception ignored" not in err, err


def _can_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("unshare") is not None and \
        subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _can_mount(), reason="needs root and unshare -m (a private tmpfs)")
@pytest.mark.parametrize("output", ["t.fstrace", "t.json"])
def test_stream_onto_a_file_system_that_fills_up(tmp_path: Path, output: str) -> None:
    # A 512 KiB tmpfs mounted in a private mount namespace (the machine's mounts are untouched):
    # the stream's writer runs out of space. It used to end in "RuntimeError: no trace yet"
    # from an atexit function, after the core's own OSError, both as tracebacks.
    (tmp_path / "prog.py").write_text(WORK)
    (tmp_path / "mnt").mkdir()
    script = textwrap.dedent(f"""
        set -e
        mount -t tmpfs -o size=512k tmpfs {tmp_path}/mnt
        cd {tmp_path}
        set +e
        {sys.executable} -m framescope run --stream --limit 0 --no-follow -o mnt/{output} prog.py
        echo "status=$?"
    """)
    out = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                         capture_output=True, text=True, timeout=300)
    assert "status=0" in out.stdout, out.stdout + out.stderr  # the program's own status
    assert "done" in out.stdout
    _no_traceback(out.stderr)
    lines = [line for line in out.stderr.splitlines() if line.startswith("framescope")]
    assert len(lines) == 1, out.stderr
    assert f"could not write the trace to mnt/{output}" in lines[0]
    assert "No space left on device" in lines[0]


REMOVES_FOLLOW_DIR = """
import json, os, shutil, subprocess, sys
folder = json.loads(os.environ["FRAMESCOPE_FOLLOW"])["dir"]
subprocess.run([sys.executable, "-c", "print('child 1')"], check=True)
shutil.rmtree(folder)
subprocess.run([sys.executable, "-c", "print('child 2')"], check=True)
def work():
    return 1
work()
print("done")
"""


def test_children_folder_removed_during_the_run(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(REMOVES_FOLLOW_DIR)
    out = subprocess.run([sys.executable, "-m", "framescope", "run", "--limit", "0", "-o",
                          "t.json", "prog.py"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["child", "1", "child", "2", "done"]
    _no_traceback(out.stderr)
    assert "was removed during the run: their parts are missing" in out.stderr
    assert "trace written to t.json" in out.stderr
    names = {e["name"] for e in load_trace(str(tmp_path / "t.json"))["traceEvents"]}
    assert any(str(n).endswith("work") for n in names)


def test_sigquit_writes_the_trace_then_ends_as_sigquit(tmp_path: Path) -> None:
    (tmp_path / "loop.py").write_text(LOOP)
    proc = subprocess.Popen([sys.executable, "-m", "framescope", "run", "--limit", "0",
                             "--no-follow", "-o", "t.json", "loop.py"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=as_from_a_terminal)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGQUIT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == -signal.SIGQUIT, err  # as python without framescope
    assert "trace written to t.json" in err
    slices = check_trace(load_trace(str(tmp_path / "t.json")))
    assert any(e["name"] == "loop.py(4): work" for evs in slices.values() for e in evs)


def test_sigquit_can_still_be_the_dump_signal(tmp_path: Path) -> None:
    # --dump-on SIGQUIT (a JVM's thread-dump signal) keeps working: the flight recorder's
    # handler is installed first and the finisher leaves a handled signal alone.
    (tmp_path / "p.py").write_text(
        "import os, signal\nos.kill(os.getpid(), signal.SIGQUIT)\nprint('still running')\n")
    out = subprocess.run([sys.executable, "-m", "framescope", "run", "--dump-on", "SIGQUIT",
                          "--limit", "0", "--no-follow", "-o", "t.json", "p.py"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, preexec_fn=as_from_a_terminal)
    assert out.returncode == 0, out.stderr
    assert "still running" in out.stdout
    assert (tmp_path / "t.dump1.json").exists() and (tmp_path / "t.json").exists()
