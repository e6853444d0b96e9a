"""framescope attach: real target processes (an interpreter without framescope), real gdb and
ptrace, real Unix sockets. Each failure mode is one line, a non-zero status, a target that runs
on unharmed."""

from __future__ import annotations

import functools
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.programs import as_from_a_terminal
from tests.support.trace_checker import check_trace, load_trace

TARGET = str(Path(__file__).parents[1] / "support" / "attach_target.py")
VERSION = "%d.%d" % sys.version_info[:2]
BASE_PYTHON = os.path.join(sys.base_prefix, "bin", f"python{VERSION}")
ATTACH_TIMEOUT = 180  # the whole command, on a loaded machine


@functools.lru_cache(maxsize=None)
def _ptrace_problem() -> str | None:
    """Why gdb cannot attach to a process of ours here, or None."""
    if shutil.which("gdb") is None:
        return "gdb is not installed"
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        out = subprocess.run(["gdb", "-batch", "-nx", "-p", str(sleeper.pid),
                              "-iex", "set auto-solib-add off", "-ex", "detach"],
                             capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "gdb did not attach in 120 s"
    finally:
        sleeper.kill()
        sleeper.wait()
    if "ptrace" in out.stdout + out.stderr and "not permitted" in out.stdout + out.stderr:
        return "ptrace is not permitted here (kernel.yama.ptrace_scope, or no CAP_SYS_PTRACE)"
    return None


@pytest.fixture
def needs_ptrace() -> None:
    problem = _ptrace_problem()
    if problem is not None:
        pytest.skip(problem)


class Target:
    """attach_target.py run by the base interpreter (no framescope installed there)."""

    def __init__(self, *args: str, python: str = BASE_PYTHON, prefix: tuple[str, ...] = (),
                 env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen([*prefix, python, TARGET, *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("ready "), line + self.proc.stderr.read()  # type: ignore[union-attr]
        self.pid = int(line.split()[1])

    def command(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def finish(self, command: str | None = "stop") -> tuple[int, str, str]:
        if command is not None:
            self.command(command)
        out, err = self.proc.communicate(timeout=120)
        return self.proc.returncode, out, err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


@pytest.fixture
def targets():
    started: list[Target] = []

    def start(*args: str, **kwargs: Any) -> Target:
        started.append(Target(*args, **kwargs))
        return started[-1]

    yield start
    for t in started:
        t.kill()


def attach(pid: int, *args: str, prefix: tuple[str, ...] = (),
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, sys.executable, "-m", "framescope", "attach", str(pid),
                           *args], capture_output=True, text=True, timeout=ATTACH_TIMEOUT,
                          env=env)


def one_error_line(result: subprocess.CompletedProcess[str], *words: str) -> str:
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("framescope attach: "), lines
    for word in words:
        assert word in lines[0], lines[0]
    assert "Traceback" not in result.stderr
    return lines[0]


def assert_unharmed(target: Target, status: int = 7) -> None:
    code, out, err = target.finish()
    assert err == "", err
    assert out.splitlines()[-2:] == ["state unchanged", "worked True"], out
    assert code == status


def threads_and_slices(path: Path) -> tuple[dict[int, str], dict[int, list[dict[str, Any]]]]:
    data = load_trace(str(path))
    slices = check_trace(data)
    names = {e["tid"]: e["args"]["name"] for e in data["traceEvents"]
             if e.get("ph") == "M" and e["name"] == "thread_name"}
    return names, {tid: evs for (_, tid), evs in slices.items()}


def short(name: str) -> str:
    return name.rsplit(": ", 1)[-1]


def test_target_interpreter_has_no_framescope() -> None:
    result = subprocess.run([BASE_PYTHON, "-c", "import framescope"], capture_output=True,
                            text=True)
    assert result.returncode != 0 and "No module named 'framescope'" in result.stderr


def test_attach_records_threads_and_running_frames(needs_ptrace, targets, tmp_path) -> None:
    target = targets()
    out = tmp_path / "window.json"
    result = attach(target.pid, "--duration", "1", "-o", str(out), "--limit", "0")
    assert result.returncode == 0, result.stderr
    assert f"recording process {target.pid}" in result.stderr
    assert "through gdb" in result.stderr
    names, slices = threads_and_slices(out)
    by_name = {name: tid for tid, name in names.items()}
    for thread in ("MainThread", "spin-worker", "sleepy-waiter", "commands"):
        assert thread in by_name, names
    # Frames running before the attach are slices open from the window's start, per thread.
    opened = {thread: [short(e["name"]) for e in slices.get(by_name[thread], [])
                       if e["args"].get("Open at stop")]
              for thread in ("MainThread", "spin-worker", "sleepy-waiter", "commands")}
    assert {"<module>", "main", "long_running_frame"} <= set(opened["MainThread"]), opened
    assert "spin_worker" in opened["spin-worker"], opened
    assert "sleepy_waiter" in opened["sleepy-waiter"], opened
    assert "read_commands" in opened["commands"], opened
    # ... and the calls made during the window are recorded on their threads.
    calls = {short(e["name"]) for e in slices[by_name["spin-worker"]]}
    assert "spin_step" in calls
    # Nothing of framescope's own work in the target is in the trace.
    everything = [e["name"] for evs in slices.values() for e in evs]
    assert not any("json" in n or "socket" in n or "framescope" in n for n in everything)
    assert_unharmed(target)


def test_attach_to_a_busy_main_thread_alone(needs_ptrace, targets, tmp_path) -> None:
    """No thread waits in a system call: gdb loads framescope at a function entry instead, and
    the injected thread gets the GIL from a main thread that never waits (docs/attach.md)."""
    stop_file = tmp_path / "stop"
    target = targets("--single", "--stop-file", str(stop_file))
    out = tmp_path / "window.pftrace"
    result = attach(target.pid, "--duration", "1", "-o", str(out), "--limit", "0")
    assert result.returncode == 0, result.stderr
    assert "blocked in" not in result.stderr and " at " in result.stderr, result.stderr
    assert out.stat().st_size > 0
    stop_file.touch()
    code, stdout, err = target.finish(command=None)
    assert (code, err) == (7, "") and "state unchanged" in stdout, (stdout, err)


def test_attach_while_the_main_thread_waits_in_join(needs_ptrace, targets, tmp_path) -> None:
    """The main thread runs no Python code (it waits in join()): attach works all the same."""
    target = targets("--main-waits")
    out = tmp_path / "window.json"
    result = attach(target.pid, "--duration", "0.5", "-o", str(out), "--limit", "0")
    assert result.returncode == 0, result.stderr
    names, slices = threads_and_slices(out)
    by_name = {name: tid for tid, name in names.items()}
    main_open = {short(e["name"]) for e in slices[by_name["MainThread"]]
                 if e["args"].get("Open at stop")}
    # (3.10's code objects have no qualname: "join" there)
    assert "main" in main_open and main_open & {"Thread.join", "join"}, main_open
    assert "long_running_frame" in {short(e["name"]) for e in slices[by_name["looper"]]}
    assert_unharmed(target)


def test_attach_twice_gives_two_windows(needs_ptrace, targets, tmp_path) -> None:
    target = targets()
    spans = []
    for i in range(2):
        out = tmp_path / f"window{i}.fstrace"
        result = attach(target.pid, "--duration", "0.5", "-o", str(out), "--limit", "0")
        assert result.returncode == 0, result.stderr
        from framescope import load  # noqa: PLC0415

        prof = load(str(out))
        starts = [e.start_ns for e in prof.events()]
        ends = [e.end_ns for e in prof.events()]
        assert starts, "no events"
        spans.append((min(starts), max(ends)))
    # Each trace holds its own window only: the second starts after the first ended.
    assert spans[1][0] >= spans[0][1]
    assert_unharmed(target)


def test_attach_options_and_formats(needs_ptrace, targets, tmp_path) -> None:
    import pstats

    target = targets()
    out = tmp_path / "window.prof"
    result = attach(target.pid, "--duration", "0.5", "-o", str(out), "--c-calls",
                    "--include-files", TARGET, "--limit", "3", "--sort", "calls", "--stream",
                    "--memory-limit", "64MiB")
    assert result.returncode == 0, result.stderr
    functions = {f[2] for f in pstats.Stats(str(out)).stats}  # type: ignore[attr-defined]
    assert "spin_step" in functions
    assert "is_set" not in functions  # threading.py is not included
    assert "calls" in result.stderr  # the summary
    assert os.listdir(tmp_path) == ["window.prof"]  # no stream file left next to it
    assert_unharmed(target)


def start_window(pid: int, out: Path, *options: str) -> tuple[subprocess.Popen[str], str]:
    """``framescope attach PID -o OUT --limit 0 OPTIONS`` running in the background, and the
    first line it printed (the window's start, or why there is none). The command starts as
    from a terminal, with SIGINT at its default: a suite run in the background by a
    non-interactive shell starts every child with SIGINT ignored."""
    proc = subprocess.Popen([sys.executable, "-m", "framescope", "attach", str(pid),
                             "-o", str(out), "--limit", "0", *options],
                            stderr=subprocess.PIPE, text=True, preexec_fn=as_from_a_terminal)
    assert proc.stderr is not None
    return proc, proc.stderr.readline()


def window_ends_with_target_exit(target: Target, out: Path, channel: str) -> str:
    """Starts a 120 s window on `target` (the first line naming `channel`), makes the target exit
    by itself (status 5, no framescope thread left at its exit) and returns the attach command's
    stderr once it has ended with status 1."""
    proc, line = start_window(target.pid, out, "--duration", "120")
    assert channel in line, line + proc.stderr.read()
    code, stdout, err = target.finish("exit")
    assert (code, err) == (5, ""), err
    assert stdout.splitlines()[-2:] == ["exiting by itself", "framescope threads at exit: 0"]
    _, err = proc.communicate(timeout=ATTACH_TIMEOUT)
    assert proc.returncode == 1, err
    return err


def test_stop_with_ctrl_c(needs_ptrace, targets, tmp_path) -> None:
    target = targets()
    out = tmp_path / "window.json"
    proc, line = start_window(target.pid, out)
    assert "recording process" in line, line + proc.stderr.read()
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=ATTACH_TIMEOUT)
    finally:
        if proc.poll() is None:  # never left attached to the next test's machine
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "written to" in err
    load_trace(str(out))
    assert_unharmed(target)


def test_target_exits_during_the_capture(needs_ptrace, targets, tmp_path) -> None:
    """The program exits by itself during the window: its own status, the trace up to its
    exit, and no thread of framescope's left when its own exit handlers run (one that woke
    during the interpreter's finalization crashed the process once)."""
    target = targets()
    out = tmp_path / "window.json"
    err = window_ends_with_target_exit(target, out, "recording process")
    assert err.strip().splitlines()[-1] == (
        f"framescope attach: process {target.pid} exited during the capture; the trace up to "
        f"its exit is in {out}")
    names, slices = threads_and_slices(out)
    assert "MainThread" in names.values()


def test_target_killed_during_the_capture(needs_ptrace, targets, tmp_path) -> None:
    target = targets()
    proc = subprocess.Popen([sys.executable, "-m", "framescope", "attach", str(target.pid),
                             "--duration", "120", "-o", str(tmp_path / "w.json")],
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    assert "recording process" in proc.stderr.readline()
    target.proc.kill()
    _, err = proc.communicate(timeout=ATTACH_TIMEOUT)
    assert proc.returncode == 1
    assert err.strip() == (f"framescope attach: process {target.pid} exited during the capture, "
                           "without running its exit handlers (killed, or os._exit): no trace")


def test_no_such_process(tmp_path) -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()  # reaped: its pid is free (and not reused this soon)
    one_error_line(attach(proc.pid, "--duration", "1"), f"no process {proc.pid}")


def test_not_a_python_process(targets) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        one_error_line(attach(sleeper.pid, "--duration", "1"), "is not a Python process")
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_another_users_process() -> None:
    """The attach command (root without CAP_SYS_PTRACE here) may not trace nobody's process."""
    setpriv = shutil.which("setpriv")
    if setpriv is None or os.geteuid() != 0:
        pytest.skip("needs root and setpriv to run a process as another user")
    sleeper = subprocess.Popen([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
                                "sleep", "60"])
    try:
        time.sleep(0.2)
        result = attach(sleeper.pid, "--duration", "1",
                        prefix=(setpriv, "--inh-caps=-sys_ptrace", "--bounding-set=-sys_ptrace"))
        one_error_line(result, f"process {sleeper.pid} belongs to user", "CAP_SYS_PTRACE")
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_stopped_target(targets) -> None:
    target = targets()
    os.kill(target.pid, signal.SIGSTOP)
    try:
        for _ in range(100):
            with open(f"/proc/{target.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "T":
                    break
            time.sleep(0.01)
        one_error_line(attach(target.pid, "--duration", "1"), "is stopped")
    finally:
        os.kill(target.pid, signal.SIGCONT)
    assert_unharmed(target)


def test_target_in_a_debugger(needs_ptrace, targets, tmp_path) -> None:
    target = targets()
    release = tmp_path / "release"
    debugger = subprocess.Popen(["gdb", "-batch", "-nx", "-p", str(target.pid),
                                 "-iex", "set auto-solib-add off", "-ex",
                                 f"shell while [ ! -e {release} ]; do sleep 0.1; done"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(1200):
            with open(f"/proc/{target.pid}/status") as f:
                if "TracerPid:\t0\n" not in f.read():
                    break
            time.sleep(0.1)
        one_error_line(attach(target.pid, "--duration", "1"), "is being traced by process")
    finally:
        release.touch()  # gdb's command ends, and gdb detaches at its exit: the target runs on
        debugger.wait(timeout=120)
    assert_unharmed(target)


def _other_version() -> str | None:
    for version in ("3.12", "3.11", "3.13", "3.10"):
        if version == VERSION:
            continue
        found = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/"
                                                    f"python{version}")))
        if found:
            return found[-1]
    return None


def test_version_mismatch(targets) -> None:
    python = _other_version()
    if python is None:
        pytest.skip("no other CPython version installed")
    target = targets(python=python)
    other = os.path.basename(python)[len("python"):]
    line = one_error_line(attach(target.pid, "--duration", "1"))
    assert f"runs Python {other}" in line and f"installed for Python {VERSION}" in line, line
    assert_unharmed(target)


def test_without_gdb(targets, tmp_path) -> None:
    target = targets()
    env = dict(os.environ, PATH=str(tmp_path))
    one_error_line(attach(target.pid, "--duration", "1", env=env), "gdb is not installed")
    assert_unharmed(target)


def test_bad_options() -> None:
    result = attach(os.getpid(), "--duration", "0")
    assert result.returncode == 2 and "--duration must be positive" in result.stderr
    result = attach(1, "--dump-on", "SIGUSR1")
    assert result.returncode == 2 and "--dump-on" in result.stderr


def _listen_socket(pid: int) -> str:
    from framescope.attach._listen import socket_paths  # noqa: PLC0415

    for _ in range(200):
        for path in socket_paths(pid, os.getuid()):
            if os.path.exists(path):
                return path
        time.sleep(0.05)
    raise AssertionError("no listening socket")


def test_listen_mode_needs_no_ptrace(tmp_path) -> None:
    """framescope run --listen: attach goes through the socket; works without gdb on PATH."""
    listener = Target.__new__(Target)
    listener.proc = subprocess.Popen(
        [sys.executable, "-m", "framescope", "run", "--listen", TARGET], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert listener.proc.stdout is not None
        line = listener.proc.stdout.readline()
        listener.pid = int(line.split()[1])
        assert listener.pid == listener.proc.pid  # framescope run became the program
        path = _listen_socket(listener.pid)
        assert os.stat(path).st_mode & 0o777 == 0o600
        assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700
        out = tmp_path / "window.json"
        env = dict(os.environ, PATH=str(tmp_path))  # no gdb: the socket is enough
        result = attach(listener.pid, "--duration", "0.5", "-o", str(out), "--limit", "0",
                        env=env)
        assert result.returncode == 0, result.stderr
        assert "through its listening socket" in result.stderr
        names, _ = threads_and_slices(out)
        assert {"MainThread", "spin-worker"} <= set(names.values())
        code, stdout, err = listener.finish()
        assert (code, err) == (7, ""), err
        assert "worked True" in stdout
        assert not os.path.exists(path)  # removed at exit
    finally:
        if listener.proc.poll() is None:
            listener.proc.kill()
        listener.proc.communicate()


def test_listening_target_exits_during_the_capture(tmp_path) -> None:
    """As test_target_exits_during_the_capture, through the listening socket: the listener's
    thread has ended too when the program's own exit handlers run."""
    listener = Target.__new__(Target)
    listener.proc = subprocess.Popen(
        [sys.executable, "-m", "framescope", "run", "--listen", TARGET], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert listener.proc.stdout is not None
        listener.pid = int(listener.proc.stdout.readline().split()[1])
        _listen_socket(listener.pid)
        out = tmp_path / "window.json"
        err = window_ends_with_target_exit(listener, out, "through its listening socket")
        assert "exited during the capture; the trace up to its exit" in err
        names, _ = threads_and_slices(out)
        assert "MainThread" in names.values()
    finally:
        if listener.proc.poll() is None:
            listener.proc.kill()
        listener.proc.communicate()


def test_listen_from_the_environment(tmp_path) -> None:
    code = ("import framescope, sys, time\n"
            "print('ready', flush=True)\n"
            "sys.stdin.readline()\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, FRAMESCOPE_LISTEN="1"))
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        _listen_socket(proc.pid)
        out = tmp_path / "w.json"
        result = attach(proc.pid, "--duration", "0.3", "-o", str(out), "--limit", "0")
        assert result.returncode == 0, result.stderr
        assert "through its listening socket" in result.stderr
        proc.communicate("\n", timeout=60)
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
