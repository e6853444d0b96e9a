"""asyncio Tasks in traces (framescope.integrations._asyncio_tasks, cpp/export/task_tracks.h, _asyncio_tracks):
each Task's steps are ranges named after it, an async track per Task in Chrome JSON and Perfetto
on every export path (export, convert, streamed, gzip), the --by-task summary; TaskGroup,
gather, create_task, to_thread and uvloop; nothing when no loop runs."""

from __future__ import annotations

import asyncio
import gzip
import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest

import framescope
from framescope.integrations import _asyncio_tasks


def cpu(n: int) -> int:
    return sum(i * i for i in range(n))


async def worker(steps: int) -> int:
    total = 0
    for _ in range(steps):
        total += cpu(500)
        await asyncio.sleep(0)
    return total


async def offloaded() -> int:
    return await asyncio.to_thread(cpu, 3000)


async def grouped(*named: tuple[Any, str]) -> None:
    """Named tasks in a TaskGroup where there is one (3.11+), else create_task + gather."""
    if hasattr(asyncio, "TaskGroup"):
        async with asyncio.TaskGroup() as tg:
            for coro, name in named:
                tg.create_task(coro, name=name)
    else:
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.create_task(coro, name=name) for coro, name in named))


async def program() -> None:
    await asyncio.gather(worker(3), worker(4))
    await grouped((worker(2), "grouped"), (offloaded(), "offloaded"))
    task = asyncio.get_running_loop().create_task(worker(1), name="created")
    assert task.get_coro().__qualname__ == "worker"  # the Task is untouched
    await task


def _record() -> framescope.profile:
    with framescope.profile() as prof:
        asyncio.run(program())
    return prof


def test_each_task_has_its_steps() -> None:
    prof = _record()
    tasks = {t.name.rsplit(" #", 1)[0]: t for t in _asyncio_tasks.task_steps(prof.trace, True)}
    assert {"grouped", "offloaded", "created"} <= set(tasks), tasks
    # worker(n) runs n + 1 steps (one per sleep(0), and the last); gather's two workers
    gathered = sorted(len(t.steps) for n, t in tasks.items() if n.startswith("Task-")
                      and any(f.endswith(": worker") for f in t.functions))
    assert gathered == [4, 5], tasks
    assert len(tasks["grouped"].steps) == 3 and len(tasks["created"].steps) == 2
    # the function to_thread ran is the offloading Task's, on the executor's thread
    off = tasks["offloaded"]
    assert any(f.endswith(": cpu") for f in off.functions)
    assert len({thread for thread, _s, _d in off.steps}) == 2
    # the steps of a Task do not overlap on its loop's thread
    for t in tasks.values():
        steps = sorted(s for s in t.steps if s[0] == t.steps[0][0])
        assert all(a[1] + a[2] <= b[1] for a, b in zip(steps, steps[1:]))
    # the wrapper is gone after the stop
    assert asyncio.events.Handle._run.__module__ == "asyncio.events"
    assert not hasattr(asyncio.to_thread, "__wrapped__")


def chrome_task_tracks(path: Any) -> dict[str, tuple[int, list[tuple[float, float]]]]:
    """The Task tracks of a Chrome JSON file (.gz too): track name -> (steps its lifetime's end
    counts, [(start, end) of each step]), checking that each track's events pair up, the lifetime
    first and last, in time order."""
    raw = open(path, "rb").read()
    if str(path).endswith(".gz"):
        raw = gzip.decompress(raw)
    by_id: dict[str, list[dict[str, Any]]] = {}
    for e in json.loads(raw)["traceEvents"]:
        if e.get("cat") == "asyncio task":
            by_id.setdefault(e["id"], []).append(e)
    tracks = {}
    for evs in by_id.values():  # in file order: readers break ties of equal ts by it
        life_b, life_e, steps = evs[0], evs[-1], evs[1:-1]
        assert (life_b["ph"], life_e["ph"]) == ("b", "e") and life_b["name"] == life_e["name"]
        assert [e["ph"] for e in steps] == ["b", "e"] * (len(steps) // 2)
        assert all(e["name"] == "step" for e in steps)
        spans = [(b["ts"], e["ts"]) for b, e in zip(steps[::2], steps[1::2])]
        assert all(s <= e for s, e in spans)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # in time order, apart
        assert life_b["ts"] == spans[0][0] and life_e["ts"] == max(e for _s, e in spans)
        tracks[life_b["name"]] = (life_e["args"]["steps"], spans)
    return tracks


def perfetto_task_tracks(path: Any) -> dict[str, list[tuple[int, int]]]:
    """The Task tracks of a .pftrace read with Perfetto's official classes (tests/perfetto_reader):
    track name -> [(start, dur) of each step], checking that the lifetime slice holds them."""
    perfetto_reader = pytest.importorskip("tests.support.perfetto_reader", reason="needs perfetto + protobuf")
    pt = perfetto_reader.read(str(path))
    processes = {uuid for uuid, t in pt.tracks.items() if t.pid is not None and t.tid is None}
    tracks = {}
    for uuid, track in pt.tracks.items():
        slices = [s for s in pt.slices if s.track == uuid and s.category == "asyncio task"]
        if not slices:
            continue
        assert track.parent in processes  # a track of its own under the Task's process
        life = [s for s in slices if s.depth == 0]
        steps = sorted((s.start, s.dur) for s in slices if s.depth == 1)
        assert len(life) == 1 and life[0].name == track.name, slices
        assert len(steps) == len(slices) - 1 and all(s.name == "step" for s in slices
                                                   if s.depth == 1)
        assert life[0].start == steps[0][0] and life[0].start + life[0].dur == max(
            s + d for s, d in steps)
        tracks[track.name] = steps
    return tracks


def test_chrome_json_has_a_track_per_task(tmp_path: Any) -> None:
    prof = _record()
    expected = {t.name: len(t.steps) for t in _asyncio_tasks.task_steps(prof.trace)}
    for name in ("t.json", "t.json.gz"):
        prof.export(str(tmp_path / name))
        tracks = chrome_task_tracks(tmp_path / name)
        assert {"grouped", "offloaded", "created"} <= {n.rsplit(" #", 1)[0] for n in tracks}
        # the work offloaded with to_thread: a track of its own, on the executor's thread
        assert [n for n in tracks if n.startswith("offloaded #") and " on " in n]
        # every step of every Task, on its tracks (to_thread's on the second one)
        counted: dict[str, int] = {}
        for n, (steps, spans) in tracks.items():
            assert steps == len(spans)
            key = n.split(" on ", 1)[0]
            counted[key] = counted.get(key, 0) + steps
        assert counted == expected


def test_perfetto_has_a_track_per_task(tmp_path: Any) -> None:
    prof = _record()
    expected = {t.name: len(t.steps) for t in _asyncio_tasks.task_steps(prof.trace)}
    prof.export(str(tmp_path / "t.pftrace"))
    tracks = perfetto_task_tracks(tmp_path / "t.pftrace")
    assert {"grouped", "offloaded", "created"} <= {n.rsplit(" #", 1)[0] for n in tracks}
    assert [n for n in tracks if n.startswith("offloaded #") and " on " in n]
    counted: dict[str, int] = {}
    for n, steps in tracks.items():
        counted[n.split(" on ", 1)[0]] = counted.get(n.split(" on ", 1)[0], 0) + len(steps)
    assert counted == expected


_PROGRAM = textwrap.dedent("""
    import asyncio
    async def step(n):
        for _ in range(n):
            await asyncio.sleep(0)
    async def main():
        if hasattr(asyncio, "TaskGroup"):
            async with asyncio.TaskGroup() as tg:
                tg.create_task(step(3), name="alpha")
                tg.create_task(step(5), name="beta")
        else:  # 3.10
            loop = asyncio.get_running_loop()
            await asyncio.gather(loop.create_task(step(3), name="alpha"),
                                 loop.create_task(step(5), name="beta"))
    asyncio.run(main())
""")


def test_every_export_path_has_the_tracks(tmp_path: Any) -> None:
    """A streamed session's .fstrace, converted by the CLI to Chrome JSON (plain and gzip) and
    Perfetto (plain and gzip), and `run -o` straight to Perfetto: the same Task tracks."""
    (tmp_path / "prog.py").write_text(_PROGRAM)

    def cli(*args: str) -> None:
        out = subprocess.run([sys.executable, "-m", "framescope", *args], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr

    cli("run", "--stream", "-o", "t.fstrace", "prog.py")
    cli("run", "-o", "direct.pftrace", "prog.py")
    for name in ("t.json", "t.json.gz", "t.pftrace", "t.pftrace.gz"):
        cli("convert", "t.fstrace", name)
    # alpha runs 4 steps (3 sleeps, then its return), beta 6
    want = {"alpha": 4, "beta": 6}
    for name in ("t.json", "t.json.gz"):
        tracks = chrome_task_tracks(tmp_path / name)
        assert {n.rsplit(" #", 1)[0]: s for n, (s, _spans) in tracks.items()
                if not n.startswith("Task-")} == want, (name, tracks)
    (tmp_path / "unzipped.pftrace").write_bytes(gzip.decompress(
        (tmp_path / "t.pftrace.gz").read_bytes()))
    for name in ("t.pftrace", "unzipped.pftrace", "direct.pftrace"):
        tracks_p = perfetto_task_tracks(tmp_path / name)
        assert {n.rsplit(" #", 1)[0]: len(s) for n, s in tracks_p.items()
                if not n.startswith("Task-")} == want, (name, tracks_p)


def test_by_task_summary() -> None:
    prof = _record()
    text = prof.summary(by_task=True)
    assert text.startswith("Time per asyncio Task")
    assert "grouped #" in text and "offloaded #" in text and ": cpu" in text


def test_cli_by_task(tmp_path: Any) -> None:
    (tmp_path / "prog.py").write_text(_PROGRAM)
    out = subprocess.run([sys.executable, "-m", "framescope", "run", "--by-task", "-o", "t.json",
                          "prog.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = out.stdout + out.stderr
    assert "Time per asyncio Task" in text and "alpha #" in text and "beta #" in text, text


def test_nothing_without_an_event_loop() -> None:
    # a program that runs no loop: asyncio is not even imported, nothing is wrapped; waiting
    # for its import does not import importlib.abc (with importlib.resources, pathlib,
    # tempfile: ~10 ms at the session's start)
    code = ("import sys, framescope\n"
            "with framescope.profile():\n"
            "    sum(range(1000))\n"
            "print('asyncio' in sys.modules, 'importlib.abc' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "False False", out


def test_uvloop_tasks_have_their_steps() -> None:
    uvloop = pytest.importorskip("uvloop")

    async def on_uvloop() -> None:
        await grouped((worker(2), "grouped"), (offloaded(), "offloaded"))
        await asyncio.gather(worker(3), worker(1))

    with framescope.profile() as prof:
        uvloop.run(on_uvloop())
    tasks = {t.name.rsplit(" #", 1)[0]: t for t in _asyncio_tasks.task_steps(prof.trace, True)}
    assert len(tasks["grouped"].steps) == 3, tasks
    assert any(f.endswith(": cpu") for f in tasks["offloaded"].functions)
    assert sorted(len(t.steps) for n, t in tasks.items() if n.startswith("Task-")
                  and any(f.endswith(": worker") for f in t.functions)) == [2, 4]
    assert "create_task" not in vars(uvloop.Loop)  # put back at the stop
