"""The process table of a trace: what each process is called, which rank it is, where its clock
stands.

Every session, when it stops, describes the process it ran in (:func:`describe`): a name for
viewers (``rank N`` for a rank's main process, the ``multiprocessing`` name or the command line
otherwise), labels, and metadata that ``framescope merge`` reads: pid and parent, host (kernel
boot id and host name), the launcher's rank, and the clock data of :mod:`framescope.processes._clock_sync`
(wall-clock pairs at start and stop, measured offsets to rank 0). Traces merged from several
processes keep one entry per process.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from framescope.processes import _clock_sync as clock_sync
from framescope.processes import _ranks as ranks

if TYPE_CHECKING:
    from framescope._core import Trace

METADATA_VERSION = 1
_MAX_NAME = 160

#: "main" in a process that records for itself, "child" in a child that framescope run follows.
role = "main"


@dataclass
class Process:
    """One entry of a trace's process table, with its metadata parsed (empty when it has none)."""

    pid: int
    name: str
    labels: list[str]
    sort_index: int
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def rank(self) -> int | None:
        r = self.metadata.get("rank")
        return r.get("rank") if isinstance(r, dict) and isinstance(r.get("rank"), int) else None

    @property
    def role(self) -> str:
        return str(self.metadata.get("role", "main"))


def command_line(argv: list[str] | None = None) -> str:
    """A command as a short text: ``python3.11 train.py --epochs 3``, ``python3.11 -m pkg``,
    ``python3.11 -c 'print(1)'``. ``argv``: the interpreter's arguments (``sys.orig_argv[1:]``
    of that process); by default this process's, as its program sees them."""
    args = _own_arguments() if argv is None else [str(a) for a in argv]
    words = []
    i = 0
    while i < len(args):
        if args[i] == "-c" and i + 1 < len(args):
            code = " ".join(args[i + 1].split())
            words.append("-c " + repr(code if len(code) <= 60 else code[:59] + "…"))
            i += 2
            continue
        words.append(" ".join(args[i].split()))
        i += 1
    text = " ".join([os.path.basename(sys.executable or "python"), *words])
    return text if len(text) <= _MAX_NAME else text[: _MAX_NAME - 1] + "…"


def _own_arguments() -> list[str]:
    """This process's arguments: ``sys.argv``, with the code of ``-c`` (which sys.argv hides)
    and ``-m module`` (which sys.argv shows as the module's file) as given on the command line."""
    args = list(sys.argv)
    orig = [str(a) for a in getattr(sys, "orig_argv", [])][1:]
    if args and args[0] == "-c":
        return orig[orig.index("-c"):] if "-c" in orig[:-1] else ["-c", "…", *args[1:]]
    if "-m" in orig[:-1]:
        at = orig.index("-m")
        if orig[at + 2:] == args[1:]:
            return orig[at:]
    return args


def _multiprocessing_name() -> str | None:
    mp = sys.modules.get("multiprocessing")
    if mp is None:
        return None
    try:
        name = mp.current_process().name
    except Exception:  # noqa: BLE001 - a half-initialised multiprocessing
        return None
    return None if name == "MainProcess" else str(name)


def describe(trace: Trace, clock_start: tuple[int, int], clock_stop: tuple[int, int],
             measured: list[clock_sync.Measurement], sort_index: int = 0) -> None:
    """Names this process in ``trace`` and stores its metadata (see the module docs). A test
    clock skew (FRAMESCOPE_TEST_CLOCK_SKEW_NS) shifts the trace's times here, as another
    host's clock would."""
    pid = os.getpid()
    info = ranks.current()
    command = command_line()
    mp_name = _multiprocessing_name()
    if role == "main" and info is not None:
        name, labels = info.label, [command]
    elif role == "child":
        name = mp_name or command
        labels = ([info.label] if info is not None else []) + ([command] if mp_name else [])
    else:
        name, labels = command, []
    metadata = {
        "framescope_process": METADATA_VERSION,
        "role": role,
        "pid": pid,
        "ppid": os.getppid(),
        "hostname": os.uname().nodename,
        "host_id": clock_sync.host_id(),
        "command": list(sys.argv),
        "multiprocessing_name": mp_name,
        "rank": info.as_dict() if info is not None else None,
        "clock": {
            "start": list(clock_start),
            "stop": list(clock_stop),
            "measured": [m.as_dict() for m in measured],
            "test_skew_ns": clock_sync.applied_skew_ns(),
        },
    }
    if clock_sync.applied_skew_ns():
        trace._shift_times(clock_sync.applied_skew_ns())
    trace._set_process(pid, name, labels, sort_index, json.dumps(metadata))


def read(trace: Trace) -> list[Process]:
    """The process table of ``trace`` (metadata that is not a JSON object reads as empty)."""
    out = []
    for pid, name, labels, sort_index, text in trace._processes():
        try:
            meta = json.loads(text) if text else {}
        except (ValueError, RecursionError):
            meta = {}
        out.append(Process(pid, name, list(labels), sort_index, meta if isinstance(meta, dict) else {}))
    return out


def complete_stream(trace: Trace, path: str) -> str | None:
    """Rewrites ``path``, the .fstrace a session streamed to (completed when it stopped), with
    what ``trace`` gained since: its process table (names, rank, clock data for ``framescope
    merge``) and the parts of merged children. Atomic: on failure the streamed file stays as it
    was, and the returned warning says so."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        trace.save(tmp)
        os.replace(tmp, path)  # the trace maps the old file: it stays readable
    except (OSError, RuntimeError, ValueError) as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return (f"framescope: could not add the process table and child processes to the "
                f"streamed trace {path}: {exc}")
    return None


def set_entry(trace: Trace, p: Process) -> None:
    """Writes ``p`` back as the entry of its pid."""
    trace._set_process(p.pid, p.name, p.labels, p.sort_index, json.dumps(p.metadata))


@dataclass
class SessionClock:
    """What a session notes about clocks when it starts (for :func:`session_stopped`)."""

    first_measurement: int
    start: tuple[int, int]


def session_starting() -> SessionClock:
    """Called by a session before it starts: a rank measures its offset to rank 0 here (when
    wanted and possible, see framescope.processes._clock_sync), then the wall-clock pair is read."""
    first = len(clock_sync.measurements)
    clock_sync.sync_point("session start")
    return SessionClock(first, clock_sync.clock_pair())


def session_stopped(trace: Trace, clock: SessionClock | None) -> None:
    """Called by a session once stopped: measures again (ranks), then describes this process in
    its trace. A failure here costs the description (with a warning), never the trace."""
    try:
        clock_sync.sync_point("session stop")
        stop = clock_sync.clock_pair()
        start = clock.start if clock is not None else stop
        first = clock.first_measurement if clock is not None else len(clock_sync.measurements)
        describe(trace, start, stop, clock_sync.measurements[first:])
    except Exception as exc:  # noqa: BLE001
        print(f"framescope: could not describe this process in its trace: {exc!r}",
              file=sys.stderr)
