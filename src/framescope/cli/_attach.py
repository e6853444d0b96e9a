"""``framescope attach PID``: records a window of a running Python process that was started
without framescope, and writes its trace (docs/attach.md).

The command's side: checks the target (exists, is the user's, is not stopped or traced, runs
the same CPython), reaches it (its listening socket, framescope.attach._listen, else gdb:
framescope.attach._gdb), then drives the window over a Unix socket (framescope.attach._agent in
the target) and writes the trace in the format asked for, as ``framescope run -o`` does.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import socket
import sys
import tempfile
import time
from typing import Any, Callable

from framescope.attach import _gdb as _attach_gdb
from framescope.attach import _listen as _attach_listen
from framescope.attach import _bootstrap as _attach_bootstrap
from framescope.attach._bootstrap import receive, send
from framescope.attach._target import (AttachError, check_abi, check_target, our_python,
                                       python_version_of, status_of, version_mismatch)


#: The bootstrap the target runs first (by its file: the target has no framescope to import it
#: from), and the package it then imports framescope from (this installation's).
BOOTSTRAP = os.path.abspath(_attach_bootstrap.__file__)
_PACKAGE = os.path.dirname(os.path.dirname(BOOTSTRAP))
#: Seconds the target gets to answer at each step (connect, hello, start), and the longest a
#: stopped session may take to save its trace once asked to stop.
STEP_TIMEOUT = 15.0
#: Seconds the injected thread gets to connect, and then to import framescope and start the
#: window. Longer than a step: in a process whose main thread runs Python without pause, the
#: thread gets the GIL back only when it asks for it and waits (sys.getswitchinterval()), once
#: per file its imports read, and on a loaded machine each of those waits is stretched by the
#: time the two threads wait for a CPU (0.2-1 s in all on an idle machine; once over 15 s in a
#: loaded CI run). Only a GIL that is never released (a C call that does not return) takes the
#: whole time.
START_TIMEOUT = 60.0
SAVE_TIMEOUT = 120.0
#: sys.setswitchinterval in the target while the bootstrap imports framescope and starts the
#: window (its own value is put back once the window has started).
BOOTSTRAP_SWITCH_INTERVAL = 0.0005


def add_parser(sub: argparse._SubParsersAction,  # type: ignore[type-arg]
               option_groups: list[Callable[[argparse.ArgumentParser], None]]) -> None:
    """Registers ``framescope attach`` with ``framescope run``'s recording options (each of
    ``option_groups`` adds some of them, as defined in framescope.cli._options)."""
    attach = sub.add_parser(
        "attach",
        help="record a window of a running Python process (started without framescope)",
        usage="framescope attach PID [--duration S] [-o OUT] [options]",
        description="Attaches to a running CPython 3.10-3.13 process of the same version (through "
        "its socket if it was started with framescope run --listen, else with gdb), records "
        "every thread's calls for --duration seconds or until Ctrl-C, and writes the trace. "
        "The process runs on unchanged afterwards.",
    )
    attach.add_argument("pid", type=int, metavar="PID", help="the process to record")
    attach.add_argument("-d", "--duration", type=float, default=None, metavar="S",
                        help="seconds to record (default: until Ctrl-C)")
    attach.add_argument("--timeout", type=float, default=10.0, metavar="S",
                        help="longest wait for gdb to load framescope into the process "
                             "(default: %(default)s)")
    for add in option_groups:
        add(attach)


class _Channel:
    """The command's private directory: the control socket the injected bootstrap connects to,
    and the trace the target saves. Given to the target's user when that is another one (the
    command runs as root)."""

    def __init__(self, uid: int) -> None:
        self.dir = tempfile.mkdtemp(prefix="framescope-attach-")
        self.socket_path = os.path.join(self.dir, "control.sock")
        self.trace_path = os.path.join(self.dir, "window.fstrace")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.socket_path)
        self.server.listen(1)
        if uid != os.geteuid():
            os.chown(self.dir, uid, -1)
            os.chown(self.socket_path, uid, -1)

    def accept(self, timeout: float) -> socket.socket | None:
        readable, _, _ = select.select([self.server], [], [], timeout)
        if not readable:
            return None
        conn, _ = self.server.accept()
        return conn

    def close(self) -> None:
        self.server.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        state = status_of(pid).get("State", "")
    except AttachError:
        return False
    return not (state.startswith("Z") or state.startswith("X"))


def _receive(conn: socket.socket, buffered: bytearray, timeout: float | None,
             pid: int) -> dict[str, Any] | None:
    """The target's next message; None when it closed the connection. Raises AttachError at
    the timeout, or when the target died."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while b"\n" not in buffered:
        wait = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
        if wait <= 0:
            raise AttachError(f"process {pid} did not answer in {timeout:g} s")
        readable, _, _ = select.select([conn], [], [], wait)
        if readable:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            buffered += chunk
        elif not _alive(pid):
            return None
    return receive(conn, buffered)


def _connect_listening(pid: int, uid: int) -> socket.socket | None:
    for path in _attach_listen.socket_paths(pid, uid):
        if not os.path.exists(path):
            continue
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(2.0)
        try:
            conn.connect(path)
        except OSError:
            conn.close()
            continue
        conn.settimeout(None)
        return conn
    return None


def _bootstrap_source(channel: _Channel) -> str:
    args = {"socket": channel.socket_path, "package": _PACKAGE}
    return (
        "def _framescope_attach():\n"
        # A busy main thread gives the GIL back only when asked, after the switch interval
        # (5 ms) of waiting, and the bootstrap's imports give it up at every file access: a
        # shorter interval until the window has started (_attach_bootstrap.SwitchInterval).
        "    import sys\n"
        "    interval = sys.getswitchinterval()\n"
        f"    sys.setswitchinterval(min(interval, {BOOTSTRAP_SWITCH_INTERVAL!r}))\n"
        f"    path = {BOOTSTRAP!r}\n"
        "    with open(path, 'rb') as f:\n"
        "        code = compile(f.read(), path, 'exec')\n"
        "    namespace = {'__name__': '_framescope_attach_bootstrap', '__file__': path,\n"
        "                 '__builtins__': __builtins__}\n"
        "    exec(code, namespace)\n"
        f"    return namespace['main']({args!r}, interval)\n"
        # called by the injected C code once this has run (see _attach_bootstrap.main)
        "_framescope_finally = _framescope_attach()\n"
    )


def profile_arguments(opts: argparse.Namespace) -> dict[str, Any]:
    """The target's profile(...) arguments, as framescope run builds them (globs made absolute
    here: the target's working directory is its own)."""
    from framescope.profiler._options import file_globs as _file_globs

    return dict(with_stack=True, c_calls=opts.c_calls, backend=opts.backend,
                memory_limit=opts.memory_limit, torch_ops=opts.torch_ops,
                record_shapes=opts.record_shapes, cpu_time=not opts.no_cpu_time,
                profile_memory=opts.profile_memory or opts.sort == "memory",
                include_files=_file_globs(opts.include_files, "--include-files") or None,
                exclude_files=_file_globs(opts.exclude_files, "--exclude-files") or None,
                on_limit=opts.on_limit or "stop")


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class _Session:
    """One attach: reaching the target, the window, the trace."""

    def __init__(self, opts: argparse.Namespace, output: str, output_format: str) -> None:
        self.opts = opts
        self.pid: int = opts.pid
        self.output = output
        self.format = output_format
        self.channel: _Channel | None = None
        self.where = ""  # where gdb loaded framescope (a thread, and what it was doing)
        # Moments of the attach (CLOCK_MONOTONIC ns), for bench/attach.py
        # (FRAMESCOPE_ATTACH_TIMINGS=1 prints them).
        self.timings: dict[str, int] = {"command": time.monotonic_ns()}

    def connect(self, uid: int) -> tuple[socket.socket, bool]:
        """The control connection, and whether it is the target's own listener."""
        conn = _connect_listening(self.pid, uid)
        if conn is not None:
            self.channel = _Channel(uid)
            return conn, True
        version = python_version_of(self.pid)
        if version is not None and version != our_python():
            raise version_mismatch(self.pid, version)
        self.channel = _Channel(uid)
        self.timings["gdb"] = time.monotonic_ns()
        try:
            self.where = _attach_gdb.inject(self.pid, _bootstrap_source(self.channel), BOOTSTRAP,
                               timeout=self.opts.timeout)
        except _attach_gdb.InjectError as exc:
            raise AttachError(str(exc)) from None
        self.timings["gdb_done"] = time.monotonic_ns()
        conn = self.channel.accept(START_TIMEOUT)
        if conn is None:
            raise AttachError(
                f"framescope was loaded into process {self.pid} but its thread did not run in "
                f"{START_TIMEOUT:g} s (a C call holding the GIL? files of {_PACKAGE} unreadable "
                "to the process's user?); it stays idle in the process and starts nothing later")
        return conn, False

    def run(self) -> int:
        uid = check_target(self.pid)
        try:
            conn, listening = self.connect(uid)
        except BaseException:
            if self.channel is not None:
                self.channel.close()
            raise
        assert self.channel is not None
        try:
            return self._window(conn, listening)
        finally:
            conn.close()
            self.channel.close()

    def _window(self, conn: socket.socket, listening: bool) -> int:
        assert self.channel is not None
        buffered = bytearray()
        hello = _receive(conn, buffered, STEP_TIMEOUT, self.pid)
        self.timings["hello"] = time.monotonic_ns()
        if hello is None or "hello" not in hello:
            raise AttachError(f"process {self.pid} closed the connection before the window")
        if not listening:
            try:
                check_abi(self.pid, hello["hello"])
            except AttachError:
                send(conn, {"bye": "version"})
                raise
        request = {"profile": profile_arguments(self.opts), "trace": self.channel.trace_path,
                   "stream": bool(self.opts.stream), "duration": self.opts.duration}
        send(conn, {"go": request})
        started = _receive(conn, buffered, START_TIMEOUT, self.pid)
        self.timings["started"] = time.monotonic_ns()
        if os.environ.get("FRAMESCOPE_ATTACH_TIMINGS") == "1":
            _say("framescope: attach timings (monotonic ns): " + json.dumps(self.timings))
        if started is None:
            raise AttachError(f"process {self.pid} exited before the window started")
        if "error" in started:
            raise AttachError(f"the window could not start in process {self.pid}: "
                              f"{started['error']}")
        how = "its listening socket" if listening else f"gdb: {self.where}"
        span = f"for {self.opts.duration:g} s" if self.opts.duration is not None else \
            "until Ctrl-C"
        _say(f"framescope: recording process {self.pid} (Python {hello['hello']['version']}, "
             f"through {how}) {span}")
        result = self._wait(conn, buffered)
        return self._write(result)

    def _wait(self, conn: socket.socket, buffered: bytearray) -> dict[str, Any] | None:
        """The target's last message (saved or error), None when it died without one."""
        stop_at = None
        if self.opts.duration is not None:
            stop_at = time.monotonic() + self.opts.duration + 2.0  # the target stops itself
        asked = False
        while True:
            try:
                timeout = None
                if stop_at is not None and not asked:
                    timeout = max(0.01, stop_at - time.monotonic())
                elif asked:
                    timeout = SAVE_TIMEOUT
                try:
                    return _receive(conn, buffered, timeout, self.pid)
                except AttachError:
                    if asked:
                        raise
            except KeyboardInterrupt:
                if asked:
                    raise
            asked = True
            try:
                send(conn, {"stop": True})
            except OSError:
                pass

    def _write(self, result: dict[str, Any] | None) -> int:
        from framescope.cli._output import error_text
        from framescope.profiler._profile import load

        pid = self.pid
        if result is None:
            # A killed process closes its sockets before it becomes a zombie: give it a moment.
            deadline = time.monotonic() + 3.0
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.02)
            if not _alive(pid):
                raise AttachError(f"process {pid} exited during the capture, without running "
                                  "its exit handlers (killed, or os._exit): no trace")
            raise AttachError(f"process {pid} closed the connection during the capture")
        if "error" in result:
            raise AttachError(f"process {pid}: {result['error']}")
        opts = self.opts
        try:
            prof = load(result["saved"], min_duration_ns=opts.min_duration,
                        max_depth=opts.max_depth)
            prof.export(self.output, format=self.format)
        except (OSError, ValueError) as exc:
            raise AttachError(f"could not write the trace to {self.output}: "
                              f"{error_text(exc)}") from None
        for warning in result.get("warnings", []):
            _say(warning)
        if opts.limit != 0:
            try:
                _say(prof.summary(limit=opts.limit, sort_by=opts.sort, by_thread=opts.by_thread))
            except ValueError as exc:
                _say(f"framescope: no summary: {exc}")
        if result.get("exited"):
            _say(f"framescope attach: process {pid} exited during the capture; the trace up to "
                 f"its exit is in {self.output}")
            return 1
        _say(f"framescope: trace of process {pid} written to {self.output} "
             f"(backend: {result.get('backend', prof.backend)})")
        return 0


def attach(opts: argparse.Namespace) -> int:
    """Runs ``framescope attach``; every failure is one line on stderr and status 1 (2 for
    bad options)."""
    from framescope.cli._output import check_output as _check_output
    from framescope.cli._output import resolve_output

    try:
        output, output_format = resolve_output(opts.output, opts.format)
    except ValueError as exc:
        _say(f"framescope attach: error: {exc}")
        return 2
    problem = _check_output(output)
    if getattr(opts, "dump_on", None) is not None:
        problem = "--dump-on is for framescope run (a flight recorder of the whole run)"
    elif opts.duration is not None and not opts.duration > 0:
        problem = f"--duration must be positive, not {opts.duration:g}"
    elif opts.stream and opts.on_limit == "keep_newest":
        problem = "--stream keeps every event: it cannot be combined with --on-limit keep_newest"
    elif opts.sort == "on_cpu" and opts.no_cpu_time:
        problem = "--sort on_cpu needs the CPU times that --no-cpu-time turns off"
    if problem is not None:
        _say(f"framescope attach: error: {problem}")
        return 2
    try:
        return _Session(opts, output, output_format).run()
    except AttachError as exc:
        _say(f"framescope attach: {exc}")
        return 1
    except KeyboardInterrupt:
        _say(f"framescope attach: interrupted before the window started; process {opts.pid} "
             "runs on unchanged")
        return 130
