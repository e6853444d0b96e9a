"""asyncio Tasks in traces (framescope._asyncio_tasks, _asyncio_tracks): each Task's steps are
ranges named after it, an async track per Task in Chrome JSON and Perfetto, the --by-task
summary; TaskGroup, gather, create_task and to_thread; nothing when no loop runs."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest

import framescope
from framescope import _asyncio_tasks


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


def test_chrome_json_has_a_track_per_task(tmp_path: Any) -> None:
    prof = _record()
    prof.export(str(tmp_path / "t.json"))
    prof.export(str(tmp_path / "t.json.gz"))
    for name in ("t.json", "t.json.gz"):
        raw = (tmp_path / name).read_bytes()
        if name.endswith(".gz"):
            import gzip

            raw = gzip.decompress(raw)
        events = [e for e in json.loads(raw)["traceEvents"] if e.get("cat") == "asyncio task"]
        by_id: dict[str, list[dict[str, Any]]] = {}
        for e in events:
            by_id.setdefault(e["id"], []).append(e)
        names = {min(evs, key=lambda e: e["ts"])["name"].rsplit(" #", 1)[0]
                 for evs in by_id.values()}
        assert {"grouped", "offloaded", "created"} <= names
        for evs in by_id.values():
            evs.sort(key=lambda e: (e["ts"], e["ph"] == "b"))
            # the lifetime span holds the steps; begins and ends pair up, in time order
            life = [e for e in evs if e["name"] != "step"]
            steps = [e for e in evs if e["name"] == "step"]
            assert [e["ph"] for e in life] == ["b", "e"]
            assert all(life[0]["ts"] <= e["ts"] <= life[1]["ts"] for e in steps)
            assert [e["ph"] for e in steps] == ["b", "e"] * (len(steps) // 2)


def test_perfetto_has_a_track_per_task(tmp_path: Any) -> None:
    pb2 = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    prof = _record()
    prof.export(str(tmp_path / "t.pftrace"))
    trace = pb2.Trace()
    trace.ParseFromString((tmp_path / "t.pftrace").read_bytes())
    tracks = {p.track_descriptor.uuid: p.track_descriptor.name for p in trace.packet
              if p.HasField("track_descriptor") and p.track_descriptor.name.startswith(
                  ("grouped", "offloaded", "created", "Task-"))}
    assert {"grouped", "offloaded", "created"} <= {n.rsplit(" #", 1)[0] for n in tracks.values()}
    # the work offloaded with to_thread: a track of its own, on the executor's thread
    assert [n for n in tracks.values() if n.startswith("offloaded #") and " on " in n]
    begins = [p.track_event for p in trace.packet if p.HasField("track_event")
              and p.track_event.track_uuid in tracks and p.track_event.type == 1]
    assert {e.name for e in begins} >= {"step"} | set(tracks.values())


def test_by_task_summary() -> None:
    prof = _record()
    text = prof.summary(by_task=True)
    assert text.startswith("Time per asyncio Task")
    assert "grouped #" in text and "offloaded #" in text and ": cpu" in text


def test_cli_by_task(tmp_path: Any) -> None:
    (tmp_path / "prog.py").write_text(textwrap.dedent("""
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
    """))
    out = subprocess.run([sys.executable, "-m", "framescope", "run", "--by-task", "-o", "t.json",
                          "prog.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = out.stdout + out.stderr
    assert "Time per asyncio Task" in text and "alpha #" in text and "beta #" in text, text


def test_nothing_without_an_event_loop() -> None:
    # a program that runs no loop: asyncio is not even imported, nothing is wrapped
    code = ("import sys, framescope\n"
            "with framescope.profile():\n"
            "    sum(range(1000))\n"
            "print('asyncio' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "False", out


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
