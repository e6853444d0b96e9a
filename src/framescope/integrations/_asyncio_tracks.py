"""asyncio Tasks as tracks of their own (framescope.integrations._asyncio_tasks records their steps): an async
track per Task in Chrome JSON and Perfetto files, its lifetime (first step to last) as a span and
each step as a slice inside it, the time it awaited as the gaps; and the ``--by-task`` summary."""

from __future__ import annotations

import gzip
import json
import os
from typing import TYPE_CHECKING, Any

from framescope.integrations._asyncio_tasks import TaskSteps, has_tasks, task_steps
from framescope.analysis._names import fit_name, name_width

if TYPE_CHECKING:
    from framescope._core import Trace

_CATEGORY = "asyncio task"
_TAIL = b"\n]\n}\n"  # how framescope's Chrome writer ends a file (cpp/export/chrome_json.cpp)


def _tracks(trace: Trace, tasks: list[TaskSteps]) -> list[tuple[str, str, int, list[Any]]]:
    """(track key, track name, pid, steps) per Task and thread it ran on: its loop's thread
    first (the lifetime span holds its steps there), then a track for the work it handed to
    another thread (asyncio.to_thread), which runs while the Task awaits it."""
    out = []
    threads = trace.threads
    for n, task in enumerate(tasks, 1):
        per_thread: dict[int, list[Any]] = {}
        for step in sorted(task.steps, key=lambda s: s[1]):
            per_thread.setdefault(step[0], []).append(step)
        for k, (thread, steps) in enumerate(per_thread.items()):
            name = task.name if k == 0 else \
                f"{task.name} on {threads[thread][3] or f'thread {threads[thread][1]}'}"
            out.append((f"task{n}" + (f".{thread}" if k else ""), name, threads[thread][0], steps))
    return out


def _chrome_events(trace: Trace, tasks: list[TaskSteps], base_ns: int) -> list[str]:
    threads = trace.threads
    out = []
    for key, name, _pid, steps in _tracks(trace, tasks):
        pid, tid = threads[steps[0][0]][0], threads[steps[0][0]][1]

        def ev(ph: str, what: str, ns: int, args: str = "") -> str:
            return (f'{{"ph":"{ph}","cat":"{_CATEGORY}","id":"{key}","name":{json.dumps(what)},'
                    f'"pid":{pid},"tid":{tid},"ts":{(ns - base_ns) / 1000:.3f}{args}}}')

        running = sum(s[2] for s in steps)
        out.append(ev("b", name, steps[0][1],
                      f',"args":{{"steps":{len(steps)},"running us":{running / 1000:.3f}}}'))
        for _thread, start, dur in steps:
            out.append(ev("b", "step", start))
            out.append(ev("e", "step", start + dur))
        out.append(ev("e", name, max(s[1] + s[2] for s in steps)))
    return out


def _regular_file(path: str) -> bool:
    """True when ``path`` is a regular file (the only kind the tracks are appended to)."""
    import stat

    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def add_chrome_tracks(trace: Trace, path: str) -> None:
    """Appends the Tasks' async tracks to a Chrome JSON file framescope just wrote. Only to a
    regular file: a device, FIFO or standard output cannot be reopened to append (nor replaced)."""
    if not has_tasks(trace) or not _regular_file(path):
        return
    tasks = task_steps(trace)
    if not tasks:
        return
    compressed = path.endswith(".gz")
    if compressed:
        with gzip.open(path, "rb") as f:
            data = f.read()
    else:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(size - len(_TAIL), 0))
            if f.read() != _TAIL:
                return
            f.seek(0)
            data = f.read(256)
    head = data[:256].decode("utf-8", "replace")
    key = '"baseTimeNanoseconds":'
    if key not in head:
        return
    base = int(head.split(key, 1)[1].split(",", 1)[0])
    extra = (",\n" + ",\n".join(_chrome_events(trace, tasks, base))).encode()
    if compressed:
        if not data.endswith(_TAIL):
            return
        with gzip.open(path + ".tmp", "wb") as f:
            f.write(data[: -len(_TAIL)] + extra + _TAIL)
        os.replace(path + ".tmp", path)
        return
    with open(path, "r+b") as f:
        f.seek(size - len(_TAIL))
        f.write(extra + _TAIL)
        f.truncate()


# ---- Perfetto: TracePacket protobufs appended to the file (a Trace is a repeated packet) ----


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number: int, value: int | bytes | str) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint((number << 3) | 2) + _varint(len(data)) + data


_SEQUENCE = 0x7A5C  # a packet sequence of its own (absolute timestamps, no interning)
_BOOTTIME = 6  # the clock framescope's Perfetto writer stamps (cpp/export/perfetto.cpp)


def _packet(body: bytes) -> bytes:
    return _field(1, body)  # Trace.packet


def add_perfetto_tracks(trace: Trace, path: str) -> None:
    """Appends the Tasks' tracks to a Perfetto trace framescope just wrote: a track per Task
    under its process, a slice for its lifetime and one per step inside it."""
    if path.endswith(".gz") or not has_tasks(trace) or not _regular_file(path):
        return
    tasks = task_steps(trace)
    out = bytearray()
    for n, (_key, name, pid, steps) in enumerate(_tracks(trace, tasks), 1):
        uuid = (7 << 60) + n
        process_uuid = (1 << 60) + (pid & 0xFFFFFFFF)  # as perfetto.cpp's process_uuid
        descriptor = _field(1, uuid) + _field(2, name) + _field(5, process_uuid)
        out += _packet(_field(10, _SEQUENCE) + _field(60, descriptor))  # track_descriptor

        def slice_event(ts: int, begin: bool, what: str = "") -> None:
            te = _field(9, 1 if begin else 2) + _field(11, uuid)  # type, track_uuid
            if begin:
                te += _field(23, what) + _field(22, _CATEGORY)  # name, categories
            out.extend(_packet(_field(8, ts) + _field(58, _BOOTTIME) + _field(11, te)
                               + _field(10, _SEQUENCE)))

        slice_event(steps[0][1], True, name)
        for _thread, start, dur in steps:
            slice_event(start, True, "step")
            slice_event(start + dur, False)
        slice_event(max(s[1] + s[2] for s in steps), False)
    with open(path, "ab") as f:
        f.write(out)


# ---- the --by-task summary -----------------------------------------------------------------


def by_task_table(trace: Trace, limit: int = 20, functions: int = 3) -> str:
    """One row per Task: steps, time running (its steps), lifetime (first step to last), the
    share of its lifetime it awaited; under each, its ``functions`` hottest functions."""
    tasks = task_steps(trace, functions=functions > 0)
    if not tasks:
        return ("no asyncio Task ran while recording (or its loop is not asyncio's: uvloop's "
                "steps are not attributed)")
    tasks.sort(key=lambda t: t.running_ns, reverse=True)
    total = sum(t.running_ns for t in tasks)
    head = f"{'steps':>8} {'running ms':>11} {'run %':>6} {'lifetime ms':>12} {'awaiting':>9}"
    width = name_width(len(head) + 2)
    lines = [f"Time per asyncio Task, by time running (its steps); % of the {total / 1e6:.2f} ms "
             f"the {len(tasks)} Tasks ran", head + "  task", "-" * len(head) + "  " + "-" * 30]
    for t in tasks if limit < 0 else tasks[:limit]:
        life = max(t.end_ns - t.start_ns, 1)
        awaiting = 100.0 * max(life - t.running_ns, 0) / life
        lines.append(f"{len(t.steps):>8} {t.running_ns / 1e6:11.3f} "
                     f"{100.0 * t.running_ns / total if total else 0:5.1f}% "
                     f"{life / 1e6:12.3f} {awaiting:8.1f}%  {fit_name(t.name, width)}")
        top = sorted(t.functions.items(), key=lambda kv: kv[1][1], reverse=True)[:functions]
        for name, (calls, self_ns) in top:
            lines.append(f"{'':>8} {self_ns / 1e6:11.3f} {'':>6} {calls:>12} {'calls':>9}    "
                         f"{fit_name(name, width - 2)}")
    return "\n".join(lines)
