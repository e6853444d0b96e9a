"""`framescope run` never loses the trace: SIGTERM, SIGHUP and a second Ctrl-C write it and exit
as the signal would; a closed stdout, non-daemon threads and atexit work are handled as python
handles them; options after -m go to the module; bad options fail before the program runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from tests.support.programs import FORK_OUTLIVES_PARENT, LOOP, as_from_a_terminal, write
from tests.support.trace_checker import check_trace, load_trace


def framescope_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "framescope", "run", *args]


@pytest.fixture
def spawn() -> Iterator[Any]:
    """Starts a program as from a terminal (SIGINT, SIGHUP, SIGTERM at their defaults), its output piped; a watchdog
    kills it after 120 s so that a test waiting on its output fails instead of hanging."""
    started: list[tuple[subprocess.Popen[str], threading.Timer]] = []

    def start(cmd: list[str], cwd: Path) -> subprocess.Popen[str]:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, preexec_fn=as_from_a_terminal)
        watchdog = threading.Timer(120, proc.kill)
        watchdog.start()
        started.append((proc, watchdog))
        return proc

    yield start
    for proc, watchdog in started:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def names_in(path: Path) -> set[str]:
    slices = check_trace(load_trace(str(path)))
    return {e["name"] for evs in slices.values() for e in evs}


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_termination_signal_writes_the_trace(tmp_path: Path, signame: str, spawn: Any) -> None:
    write(tmp_path / "loop.py", LOOP)
    proc = spawn(framescope_cmd("-o", "t.json", "loop.py"), tmp_path)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(getattr(signal, signame))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == -getattr(signal, signame), err  # died of the signal, as python
    assert "loop.py(4): work" in names_in(tmp_path / "t.json")
    assert "trace written to t.json" in err


CATCHES_FIRST_CTRL_C = """
    import time

    def work():
        return sum(range(1000))

    while True:
        try:
            work()
            print("ready", flush=True)
            while True:
                work()
                time.sleep(0.001)
        except KeyboardInterrupt:
            print("caught", flush=True)  # a program that ignores the first Ctrl-C
"""


def test_second_ctrl_c_writes_the_trace(tmp_path: Path, spawn: Any) -> None:
    write(tmp_path / "stubborn.py", CATCHES_FIRST_CTRL_C)
    proc = spawn(framescope_cmd("-o", "t.json", "stubborn.py"), tmp_path)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGINT)
    assert proc.stdout.readline().strip() == "caught"
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGINT, err
    assert "stubborn.py(4): work" in names_in(tmp_path / "t.json")


def test_single_ctrl_c_is_reported_as_python_does(tmp_path: Path, spawn: Any) -> None:
    write(tmp_path / "loop.py", LOOP)
    results = {}
    for mode in ("plain", "framescope"):
        cmd = [sys.executable, "loop.py"] if mode == "plain" else framescope_cmd("-o", "t.json", "loop.py")
        proc = spawn(cmd, tmp_path)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        results[mode] = (proc.returncode, err)
    plain_rc, plain_err = results["plain"]
    rc, err = results["framescope"]
    assert rc == plain_rc == -signal.SIGINT
    # The same traceback (python's: the program's frames only), then framescope's report.
    assert err.startswith("Traceback (most recent call last):\n  File \"")
    # (where the interrupt landed differs from run to run: compare the file)
    assert err.splitlines()[1].split(", line")[0] == plain_err.splitlines()[1].split(", line")[0]
    assert "framescope" not in err.split("\nKeyboardInterrupt\n")[0]
    assert "loop.py(4): work" in names_in(tmp_path / "t.json")


@pytest.mark.parametrize("how", ["sys.stdout.close()", "os.close(1)"])
def test_program_that_closes_stdout(tmp_path: Path, how: str) -> None:
    write(tmp_path / "closes.py", f"""
        import os, sys
        def work():
            return 1
        work()
        print("bye", flush=True)
        {how}
        work()
    """)
    plain = subprocess.run([sys.executable, "closes.py"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120)
    out = subprocess.run(framescope_cmd("-o", "t.json", "closes.py"), cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == plain.returncode, out.stderr
    assert "Traceback" not in out.stderr.replace(plain.stderr, ""), out.stderr
    assert "closes.py(3): work" in names_in(tmp_path / "t.json")
    assert "trace written to t.json" in out.stderr


def test_work_after_the_main_module_returns_is_recorded(tmp_path: Path) -> None:
    """Non-daemon threads run on after the main module returns (python joins them at exit),
    and atexit functions run after that: the session ends after both."""
    write(tmp_path / "late.py", """
        import atexit, threading, time

        def late_work():
            return sum(range(100))

        def at_exit_work():
            return 2

        def worker():
            time.sleep(0.2)
            late_work()

        atexit.register(at_exit_work)
        threading.Thread(target=worker, name="late-worker").start()
    """)
    out = subprocess.run(framescope_cmd("-o", "t.json", "late.py"), cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    names = names_in(tmp_path / "t.json")
    assert "late.py(4): late_work" in names
    assert "late.py(7): at_exit_work" in names
    data = load_trace(str(tmp_path / "t.json"))
    thread_names = {e["args"]["name"] for e in data["traceEvents"]
                    if e.get("ph") == "M" and e.get("name") == "thread_name"}
    assert "late-worker" in thread_names


def test_options_after_the_module_go_to_the_module(tmp_path: Path) -> None:
    pkg = tmp_path / "argpkg"
    pkg.mkdir()
    write(pkg / "__init__.py", "")
    write(pkg / "__main__.py", """
        import sys
        print("argv", sys.argv[1:])
    """)
    out = subprocess.run(framescope_cmd("-o", "t.json", "-m", "argpkg", "-o", "x.json",
                                        "--limit", "3", "-m", "y"),
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "argv ['-o', 'x.json', '--limit', '3', '-m', 'y']" in out.stdout
    assert (tmp_path / "t.json").exists() and not (tmp_path / "x.json").exists()
    # -mMODULE, --opt=value and -- work as python's own parsing does
    out = subprocess.run(framescope_cmd("--output=u.json", "-margpkg", "a"), cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert "argv ['a']" in out.stdout and (tmp_path / "u.json").exists(), out.stderr
    write(tmp_path / "s.py", "import sys\nprint('argv', sys.argv)\n")
    out = subprocess.run(framescope_cmd("-o", "v.json", "--", "s.py", "-o", "w"), cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert "argv ['s.py', '-o', 'w']" in out.stdout, out.stderr


@pytest.mark.parametrize(
    "options, message",
    [
        (["--memory-limit", "banana"], "'banana' is not a size"),
        (["--memory-limit", "1KB"], "at least 256KiB"),
        (["-o", "/nonexistent-framescope-dir/x.json"], "no directory"),
        (["-o", "adir.json"], "is a directory"),
        (["-o", "x.unknown"], "cannot tell the format"),
        (["--backend", "nope"], "invalid choice"),
        (["--limit", "many"], "invalid int value"),
        (["-m"], "expected a module name"),
    ],
)
def test_bad_options_fail_before_the_program_runs(tmp_path: Path, options: list[str],
                                                  message: str) -> None:
    write(tmp_path / "marker.py", "open('ran', 'w').close()\n")
    (tmp_path / "adir.json").mkdir()
    args = options if options == ["-m"] else [*options, "marker.py"]
    out = subprocess.run(framescope_cmd(*args), cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2, out.stderr
    assert not (tmp_path / "ran").exists(), "the program must not run"
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_unwritable_output_directory(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    write(tmp_path / "marker.py", "open('ran', 'w').close()\n")
    out = subprocess.run(framescope_cmd("-o", str(locked / "t.json"), "marker.py"),
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "permission denied" in out.stderr
    assert not (tmp_path / "ran").exists()


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.isdir("/sys/kernel"),
                    reason="needs root, whom os.access lets write to /sys")
def test_output_check_really_creates_a_file(tmp_path: Path) -> None:
    # As root, os.access says /sys is writable; creating a file there fails all the same.
    write(tmp_path / "marker.py", "open('ran', 'w').close()\n")
    out = subprocess.run(framescope_cmd("-o", "/sys/framescope-x.json", "marker.py"),
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert not (tmp_path / "ran").exists(), "the program must not run"
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot write the trace to '/sys/framescope-x.json'" in lines[0]


@pytest.mark.parametrize("exit_code, status", [("", 0), ("raise SystemExit(3)", 3)])
def test_a_trace_lost_at_the_end_is_said_once(tmp_path: Path, exit_code: str,
                                              status: int) -> None:
    # The output directory goes away while the program runs: the trace cannot be written. That
    # is said on one line; the exit status stays the program's (changing it would take
    # os._exit, skipping the rest of the program's shutdown).
    (tmp_path / "out").mkdir()
    write(tmp_path / "p.py", f"import shutil\nshutil.rmtree('out')\nprint('ran')\n{exit_code}\n")
    out = subprocess.run(framescope_cmd("-o", "out/t.json", "--limit", "0", "p.py"),
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.stdout == "ran\n"
    assert out.returncode == status, out.stderr
    assert out.stderr.count("could not write the trace to out/t.json") == 1, out.stderr
    assert "[Errno" not in out.stderr, out.stderr


def test_version_is_the_package_version() -> None:
    out = subprocess.run([sys.executable, "-m", "framescope", "--version"], capture_output=True,
                         text=True, timeout=60)
    import framescope

    version = metadata.version("framescope")  # pyproject's, from src/framescope/_version.py
    assert out.stdout.strip() == f"framescope {version}"
    assert framescope.__version__ == framescope._core.__version__ == version


def test_a_forked_child_does_not_overwrite_the_trace(tmp_path: Path) -> None:
    """A child the program forks inherits framescope's exit hook; when it exits after the parent,
    it must not replace the parent's trace with its own."""
    write(tmp_path / "forks.py", FORK_OUTLIVES_PARENT)

    # --no-follow: followed, the child's part would be merged in as a process of its own
    # (tests/processes/test_follow.py); here the child only inherits the exit hook.
    out = subprocess.run(framescope_cmd("--no-follow", "-o", "t.json", "forks.py"), cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    import time

    time.sleep(1.5)  # the child has exited by now
    names = names_in(tmp_path / "t.json")
    assert "forks.py(4): parent_work" in names
    assert "forks.py(7): child_work" not in names


def test_script_with_a_syntax_error_is_reported_as_python_does(tmp_path: Path) -> None:
    write(tmp_path / "bad.py", "def broken(:\n    pass\n")
    plain = subprocess.run([sys.executable, "bad.py"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120)
    out = subprocess.run(framescope_cmd("-o", "t.json", "bad.py"), cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == plain.returncode == 1
    assert out.stderr == plain.stderr
