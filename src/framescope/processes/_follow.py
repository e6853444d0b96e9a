"""Following child processes under ``framescope run``: every Python child records with the
parent's options, and the parent merges their traces into its own, a process track per pid.

How (parent, :class:`Follower`): before the program runs, ``framescope run`` creates a private
folder and sets ``FRAMESCOPE_FOLLOW`` (the folder, the profile options) and ``PYTHONPATH``
(framescope's bootstrap folder first, whose ``sitecustomize`` chains to any other). Every Python
started from then on with that environment, directly or not (``multiprocessing`` spawn and
forkserver workers, ``subprocess`` of ``sys.executable``, their own children), runs
:func:`child_start` at start-up: it leaves a marker ``<pid>-<token>.started``, starts a
session, and at exit saves ``<pid>-<token>.fstrace``. A process forked from a recording one
(``os.fork()``, multiprocessing's fork start method) goes on recording into its own trace, which
starts at the fork (the core's fork handlers: only the forking thread exists in the child, its
frames open at the fork are open slices from the child's start); :func:`_after_fork_in_child`
makes it a followed child the same way. The parent, once its program ended, merges every saved
part (same host: no clock shift) and warns for each marker without a trace: a child that
crashed or was killed loses its own part only.

When a child saves: at interpreter exit (atexit, which multiprocessing's spawned processes
reach through ``sys.exit``), in ``os._exit`` (forked processes end that way: the forkserver's
workers, multiprocessing's fork children), and on SIGTERM (``Pool.terminate()``, and so
``with Pool() as p:``, ends idle workers with it) when the child has no SIGTERM handler of
its own: a C handler wakes a thread of framescope's (cpp/python/integrations/term_signal.cpp)
that saves, then lets SIGTERM end the process as before (same exit status). A child whose main
thread holds the GIL in a long C call saves when the call returns (after 10 s it dies unsaved).
SIGKILL loses the child's part.

Not followed: Pythons started with ``-E``, ``-I`` or ``-S``, with an environment that drops
these variables, or without framescope installed (another interpreter); multiprocessing's
resource tracker and the forkserver process itself (infrastructure; the forkserver's workers
are followed); a nested ``framescope run`` (it records on its own).
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from typing import Any, Callable

from framescope import _core
from framescope.processes import _clock_sync as clock_sync
from framescope.processes import _process_table as processes
from framescope.profiler import _session
from framescope._unrecorded import unrecorded

ENV = "FRAMESCOPE_FOLLOW"
BOOTSTRAP_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bootstrap")
#: How long the parent waits, at its end, for children that are still running to save.
WAIT_FOR_CHILDREN_S = 3.0


# ---- parent ----------------------------------------------------------------------------------

class Follower:
    """The parent's side: sets the environment children inherit, then merges their traces.

    Args:
        prof: the parent's profile (its forked children go on with its session).
        profile_kwargs: the keywords of the parent's ``profile(...)``, given to every child's.
    """

    def __init__(self, prof: Any, profile_kwargs: dict[str, Any]) -> None:
        self.dir = tempfile.mkdtemp(prefix="framescope-children-")
        _follow_forks(prof, self.dir)
        self._saved_env = {k: os.environ.get(k) for k in (ENV, "PYTHONPATH")}
        config = {"dir": self.dir, "root": os.getpid(), "profile": profile_kwargs}
        os.environ[ENV] = json.dumps(config)
        old = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = BOOTSTRAP_DIR + (os.pathsep + old if old else "")

    def close(self) -> None:
        """Restores the environment and removes the folder, merging nothing."""
        self._restore_env()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _restore_env(self) -> None:
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    def collect(self, trace: Any) -> list[str]:
        """Merges the children's saved traces into ``trace`` (the parent's, a _core.Trace) and
        removes the folder; returns warnings for children whose trace is missing."""
        self._restore_env()
        warnings: list[str] = []
        try:
            unregistered = await_forked_children()
            if unregistered:
                warnings.append(f"framescope: {unregistered} forked child process(es) ended "
                                "before they could record: their parts are missing")
            if not os.path.isdir(self.dir):
                warnings.append(f"framescope: the folder of the child processes' traces "
                                f"({self.dir}) was removed during the run: their parts are "
                                "missing")
                return warnings
            markers = self._markers()
            self._wait_for(markers)
            parts = []
            for token, info in markers.items():
                path = os.path.join(self.dir, token + ".fstrace")
                if not os.path.exists(path):
                    warnings.append(
                        f"framescope: child process {info.get('pid')} "
                        f"({info.get('command') or processes.command_line(info.get('argv') or [])}) ended without "
                        "saving its trace (it crashed, was killed, or still runs): its part "
                        "is missing")
                    continue
                from framescope.profiler._profile import load

                try:
                    parts.append(load(path).trace)
                except (OSError, ValueError) as exc:
                    warnings.append(f"framescope: the trace of child process "
                                    f"{info.get('pid')} is unreadable: {exc}")
            parts.sort(key=lambda t: t.start_ns)
            for index, part in enumerate(parts, start=1):
                for p in processes.read(part):
                    p.sort_index = index
                    processes.set_entry(part, p)
                trace._merge_separate_pids(part, 0)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
        return warnings

    def _markers(self) -> dict[str, dict[str, Any]]:
        out = {}
        try:
            names = sorted(os.listdir(self.dir))
        except OSError:  # removed while the children were waited for
            names = []
        for name in names:
            if not name.endswith(".started"):
                continue
            try:
                with open(os.path.join(self.dir, name), encoding="utf-8") as f:
                    info = json.load(f)
            except (OSError, ValueError):
                info = {}
            out[name[: -len(".started")]] = info if isinstance(info, dict) else {}
        return out

    def _wait_for(self, markers: dict[str, dict[str, Any]]) -> None:
        """Gives children that still run (and have not saved) a moment to finish."""
        deadline = time.monotonic() + WAIT_FOR_CHILDREN_S
        while time.monotonic() < deadline:
            running = [
                info for token, info in markers.items()
                if not os.path.exists(os.path.join(self.dir, token + ".fstrace"))
                and _alive(info.get("pid"))
            ]
            if not running:
                return
            time.sleep(0.02)


def _alive(pid: object) -> bool:
    """Whether process ``pid`` runs (a zombie has ended)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rsplit(")", 1)[-1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True


# ---- child -----------------------------------------------------------------------------------

_child: dict[str, Any] = {}


def _config() -> dict[str, Any] | None:
    text = os.environ.get(ENV)
    if not text:
        return None
    try:
        cfg = json.loads(text)
    except ValueError:
        return None
    if not isinstance(cfg, dict) or not os.path.isdir(str(cfg.get("dir", ""))):
        return None  # the parent has ended: nobody would merge this child's trace
    return cfg


def _command_code() -> str:
    argv = getattr(sys, "orig_argv", sys.argv)
    if "-c" in argv[:-1]:
        return str(argv[argv.index("-c") + 1])
    return ""


def child_start() -> None:
    """Called by the bootstrap sitecustomize at a child's start-up (see the module docs)."""
    cfg = _config()
    if cfg is None or os.getpid() == cfg.get("root"):
        return
    code = _command_code()
    if "multiprocessing.resource_tracker" in code:
        return
    if "multiprocessing.forkserver" in code:
        # The server only forks workers: each of them records from its fork on.
        os.register_at_fork(after_in_child=lambda: _start_recording(cfg))
        return
    argv = list(getattr(sys, "orig_argv", sys.argv))
    if (len(argv) > 1 and os.path.basename(argv[1]) == "framescope") or argv[1:3] == ["-m", "framescope"]:
        return  # a nested `framescope run` (or python -m framescope) records on its own
    _start_recording(cfg)


def _start_recording(cfg: dict[str, Any]) -> None:
    try:
        _begin(cfg)
    except Exception as exc:  # noqa: BLE001 - a child must run even if recording cannot start
        print(f"framescope: not recording child process {os.getpid()}: {exc}", file=sys.stderr)


def _begin(cfg: dict[str, Any]) -> None:
    from framescope.profiler._profile import profile

    kwargs = dict(cfg.get("profile") or {})
    torch_ops = bool(kwargs.pop("torch_ops", False))
    prof = profile(**kwargs)
    _become_child(prof, cfg["dir"], {})
    prof.start()
    _follow_forks(prof, cfg["dir"])
    if torch_ops:
        _enable_torch_ops_on_import(prof)


def _become_child(prof: Any, folder: str, marker: dict[str, Any]) -> None:
    """What makes this process a followed child of the recording that owns ``folder``: its
    marker, the state _finish() saves from, the SIGTERM thread, the exit hooks."""
    processes.role = "child"
    clock_sync.disabled = True  # the parent's rank measures; a child shares its host
    token = f"{os.getpid()}-{secrets.token_hex(4)}"
    argv = list(getattr(sys, "orig_argv", sys.argv))
    with open(os.path.join(folder, token + ".started"), "w", encoding="utf-8") as f:
        json.dump({"pid": os.getpid(), "argv": argv[1:], "command": processes.command_line(),
                   **marker}, f)
    _child.clear()  # what a followed parent left here is the parent's (a fresh lock, too)
    _child.update(prof=prof, dir=folder, token=token, pid=os.getpid(), saved=False,
                  finishing=False, term_pending=False, lock=threading.Lock())
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        _core._save_on_sigterm(_on_sigterm)
    atexit.register(_finish)
    _wrap_os_exit()


_recording: dict[str, Any] = {}


def _follow_forks(prof: Any, folder: str) -> None:
    """Makes every process forked from this one from now on a followed child (once per
    process; the latest profile counts)."""
    if not _recording:
        os.register_at_fork(after_in_parent=_after_fork_in_parent,
                            after_in_child=_after_fork_in_child)
    _recording.update(prof=prof, dir=folder, pid=os.getpid(), forks=0)


def _following_forks() -> bool:
    prof = _recording.get("prof")
    return prof is not None and _session.is_running(prof) and os.path.isdir(_recording.get("dir", ""))


def _exec_follows(caller: Any) -> bool:
    """Whether the fork being handled is subprocess's with a preexec_fn, which runs the fork
    hooks and then replaces the child with the new program (a Python one follows by itself)."""
    code = getattr(caller, "f_code", None)
    return code is not None and code.co_name == "_execute_child" and \
        os.path.basename(code.co_filename) == "subprocess.py"


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _fork_caller() -> Any:
    """The frame that called os.fork (past framescope's own frames: the fork hooks run
    unrecorded, through framescope._unrecorded's wrapper)."""
    frame: Any = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
    return frame


# The fork hooks and the save at exit run unrecorded: what they call (json, secrets, signal,
# enum, warnings...) is framescope's work, not the program's, in the trace of a forking program.
@unrecorded
def _after_fork_in_parent() -> None:
    # Counted, so that the end of this process waits for the child's marker: the child writes it
    # right after the fork, but this process may reach its end first.
    if _recording.get("pid") == os.getpid() and _following_forks() and \
            not _exec_follows(_fork_caller()):
        _recording["forks"] += 1


def await_forked_children(timeout_s: float = WAIT_FOR_CHILDREN_S) -> int:
    """Waits (at most ``timeout_s``) until every child forked from this process while it
    recorded has left its marker; returns how many did not."""
    if _recording.get("pid") != os.getpid() or not _recording.get("forks"):
        return 0
    folder, me = _recording["dir"], os.getpid()
    deadline = time.monotonic() + timeout_s
    while True:
        seen = 0
        try:
            names = [n for n in os.listdir(folder) if n.endswith(".started")]
        except OSError:
            return 0
        for name in names:
            try:
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    seen += json.load(f).get("forked_from") == me
            except (OSError, ValueError, AttributeError):
                continue
        missing = int(_recording["forks"]) - seen
        if missing <= 0 or time.monotonic() > deadline:
            return max(0, missing)
        time.sleep(0.005)


@unrecorded
def _after_fork_in_child() -> None:
    """In a child forked while this process recorded: its session goes on (the core's fork
    handlers), so it only needs what a followed child has."""
    if not _following_forks() or _exec_follows(_fork_caller()):
        return
    _recording.update(pid=os.getpid(), forks=0)  # from now on: this process's own forks
    try:
        # framescope run's own SIGTERM handler (inherited) would end the child unsaved.
        if getattr(signal.getsignal(signal.SIGTERM), "__module__", None) == "framescope.cli._finish":
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _become_child(_recording["prof"], _recording["dir"], {"forked_from": os.getppid()})
    except Exception as exc:  # noqa: BLE001 - the child runs on, unfollowed
        print(f"framescope: not following forked process {os.getpid()}: {exc}", file=sys.stderr)


def _enable_torch_ops_on_import(prof: Any) -> None:
    """torch ops in a child: torch is not imported at its start (importing it for every child
    would cost seconds), so the observer is attached once the child imports torch."""
    from framescope import _import_hooks as import_hooks
    from framescope.integrations import _torch_ops as torch_ops

    def enable(module: object) -> None:
        if _session.is_running(prof):
            prof.torch_ops = True
            torch_ops.enable(prof.record_shapes)

    import_hooks.after_import("torch", enable)


@unrecorded
def _finish() -> None:
    """Stops the child's session and saves its trace (once; only in the process that started
    it: a fork of the child inherits this atexit hook but not the session). A second caller
    (SIGTERM's thread while the main thread exits, or the reverse) waits for the first."""
    if not _child or _child.get("pid") != os.getpid():
        return
    with _child["lock"]:
        if _child["saved"]:
            return
        _child["saved"] = _child["finishing"] = True
        try:
            await_forked_children()  # so that the parent finds their markers
            _save(_child["prof"])
        finally:
            _child["finishing"] = False
    if _child.get("term_pending"):  # SIGTERM came while saving: it ends the process now
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def _save(prof: Any) -> None:
    try:
        if _session.is_running(prof):
            _session.stop_quietly(prof)
            for warning in prof.warnings:
                # A fork of a streaming session records in memory: as wanted for a child.
                if "was forked from a session that streamed" not in warning:
                    print(warning, file=sys.stderr)
        if not os.path.isdir(_child["dir"]):
            return  # the parent has ended (and warned that this child's part is missing)
        final = os.path.join(_child["dir"], _child["token"] + ".fstrace")
        if _session.recorded_trace(prof) is not None:
            prof.save(final + ".tmp")
            os.replace(final + ".tmp", final)
        else:  # ended before recording started: nothing recorded, nothing missing
            os.unlink(os.path.join(_child["dir"], _child["token"] + ".started"))
    except Exception as exc:  # noqa: BLE001 - at exit: report, never raise
        print(f"framescope: child process {os.getpid()} could not save its trace: {exc!r}",
              file=sys.stderr)


def _on_sigterm() -> bool:
    """Called on SIGTERM from framescope's signal thread (cpp/python/integrations/term_signal.cpp):
    saves, and says whether the process may end now (not while the main thread is still saving:
    it ends the process once done). That thread does not record."""
    if _child.get("finishing"):
        _child["term_pending"] = True
        return False
    _finish()
    return True


def _wrap_os_exit() -> None:
    real: Callable[[int], Any] = getattr(os._exit, "_framescope_real", os._exit)

    def _exit(status: int) -> None:
        _finish()
        real(status)

    _exit._framescope_real = real  # type: ignore[attr-defined]
    _exit.__doc__ = real.__doc__
    os._exit = _exit  # type: ignore[assignment]
