"""schedule(), profile(schedule=..., on_trace_ready=...), step() and trace_handler: torch's
semantics, checked against torch.profiler itself where torch is installed (3.11)."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import re
import socket
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

import framescope
from framescope import ProfilerAction


def work(step: int) -> int:
    return sum(range(100 + step))


def step_ranges(prof: framescope.profile) -> list[str]:
    names = {e.name for e in prof.events() if e.name.startswith("ProfilerStep#")}
    return sorted(names, key=lambda n: int(n.split("#")[1]))


def run_loop(steps: int, **kwargs: Any) -> tuple[list[list[str]], framescope.profile]:
    cycles: list[list[str]] = []

    def ready(prof: framescope.profile) -> None:
        cycles.append(step_ranges(prof))

    with framescope.profile(on_trace_ready=ready, **kwargs) as prof:
        for i in range(steps):
            work(i)
            prof.step()
    return cycles, prof


def torch_schedule_reference(wait: int, warmup: int, active: int, repeat: int, skip_first: int,
                             skip_first_wait: int, step: int) -> ProfilerAction:
    """torch.profiler.schedule's function, as written in torch/profiler/profiler.py (2.13)."""
    if step < skip_first:
        return ProfilerAction.NONE
    step -= skip_first
    if skip_first_wait != 0:
        step += wait
    num_steps = wait + warmup + active
    if repeat > 0 and step / num_steps >= repeat:
        return ProfilerAction.NONE
    mod_step = step % num_steps
    if mod_step < wait:
        return ProfilerAction.NONE
    if mod_step < wait + warmup:
        return ProfilerAction.WARMUP
    return ProfilerAction.RECORD if mod_step < num_steps - 1 else ProfilerAction.RECORD_AND_SAVE


ARGS = list(itertools.product([0, 1, 3], [0, 1, 2], [1, 2, 4], [0, 1, 3], [0, 2], [0, 1]))


def test_schedule_actions() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for wait, warmup, active, repeat, skip, skip_wait in ARGS:
            fn = framescope.schedule(wait=wait, warmup=warmup, active=active, repeat=repeat,
                                     skip_first=skip, skip_first_wait=skip_wait)
            for step in range(40):
                assert fn(step) == torch_schedule_reference(
                    wait, warmup, active, repeat, skip, skip_wait, step), (wait, warmup, active)
    with pytest.raises(ValueError, match="active"):
        framescope.schedule(wait=0, warmup=0, active=0)
    with pytest.raises(ValueError, match="wait"):
        framescope.schedule(wait=-1, warmup=0, active=1)
    # torch.profiler.schedule asserts its arguments: code written for it catches AssertionError.
    with pytest.raises(AssertionError):
        framescope.schedule(wait=0, warmup=1, active=0)
    with pytest.raises(AssertionError):
        framescope.schedule(wait=0, warmup=1, active=1)(-1)
    with pytest.warns(UserWarning, match="warmup"):
        framescope.schedule(wait=1, warmup=0, active=1)


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="torch is installed on 3.11 only")
def test_schedule_is_torchs() -> None:
    torch_profiler = pytest.importorskip("torch.profiler")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for wait, warmup, active, repeat, skip, skip_wait in ARGS:
            kw = dict(wait=wait, warmup=warmup, active=active, repeat=repeat, skip_first=skip,
                      skip_first_wait=skip_wait)
            ours, theirs = framescope.schedule(**kw), torch_profiler.schedule(**kw)
            assert [ours(s).name for s in range(40)] == [theirs(s).name for s in range(40)], kw


def test_only_active_steps_recorded_one_trace_per_cycle() -> None:
    cycles, prof = run_loop(
        12, schedule=framescope.schedule(wait=1, warmup=1, active=2, repeat=2))
    # steps 0 wait, 1 warmup, 2-3 active (saved after 3), 4 wait, 5 warmup, 6-7 active
    assert cycles == [["ProfilerStep#2", "ProfilerStep#3"], ["ProfilerStep#6", "ProfilerStep#7"]]
    assert prof.step_num == 12
    # each cycle's trace holds that cycle alone: the work of the active steps only
    work_calls = [e for e in prof.events() if e.name.endswith(": work")]
    assert len(work_calls) == 2
    steps = {e.name: e for e in prof.events() if e.name.startswith("ProfilerStep#")}
    for call in work_calls:
        assert any(s.start_ns <= call.start_ns and call.end_ns <= s.end_ns for s in steps.values())
    assert all(s.category == "user_annotation" for s in steps.values())


def test_stop_in_the_middle_of_a_cycle_hands_the_partial_cycle() -> None:
    cycles, _ = run_loop(5, schedule=framescope.schedule(wait=0, warmup=1, active=10))
    assert cycles == [["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4",
                       "ProfilerStep#5"]]


def test_without_schedule_everything_is_recorded_and_handed_once() -> None:
    cycles, prof = run_loop(3)
    assert cycles == [[]]  # no ProfilerStep ranges without a schedule, as torch
    assert len([e for e in prof.events() if e.name.endswith(": work")]) == 3


def test_stopped_during_warmup_keeps_nothing() -> None:
    # torch starts and stops the trace and keeps nothing: no warmup event becomes the result
    handed: list[framescope.profile] = []
    with framescope.profile(schedule=framescope.schedule(wait=0, warmup=5, active=1),
                            on_trace_ready=handed.append) as prof:
        for i in range(2):
            work(i)
            prof.step()
    assert handed == []
    assert list(prof.key_averages()) == []  # as torch.profiler's key_averages()
    with pytest.raises(RuntimeError, match="schedule recorded no step"):
        prof.events()


def test_key_averages_merge_profiler_steps_as_torch() -> None:
    _, prof = run_loop(5, schedule=framescope.schedule(wait=1, warmup=1, active=3))
    keys = [e.key for e in prof.key_averages()]
    assert "ProfilerStep*" in keys and not any(k.startswith("ProfilerStep#") for k in keys)
    step = next(e for e in prof.key_averages() if e.key == "ProfilerStep*")
    assert step.count == 3
    # the trace itself keeps each step's own name
    assert step_ranges(prof) == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]


def test_waiting_steps_run_no_session() -> None:
    seen: list[bool] = []
    with framescope.profile(schedule=framescope.schedule(wait=2, warmup=1, active=1)) as prof:
        for _ in range(4):
            seen.append(framescope.is_enabled())
            prof.step()
    assert seen == [False, False, True, True]  # wait, wait, warmup (a session runs), active


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="torch is installed on 3.11 only")
def test_cycles_match_torch_profiler(tmp_path: Path) -> None:
    torch_profiler = pytest.importorskip("torch.profiler")
    import torch

    kw = dict(wait=1, warmup=1, active=2, repeat=2, skip_first=1)
    theirs: list[list[str]] = []

    def torch_ready(p: Any) -> None:
        # torch's events() renames the steps "ProfilerStep*"; its Chrome trace keeps "#N"
        path = tmp_path / f"torch{len(theirs)}.json"
        p.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
        names = {e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")}
        theirs.append(sorted(names, key=lambda n: int(n.split("#")[1])))

    with torch_profiler.profile(activities=[torch_profiler.ProfilerActivity.CPU],
                                schedule=torch_profiler.schedule(**kw),
                                on_trace_ready=torch_ready) as tp:
        for i in range(11):
            torch.ones(2) + i
            tp.step()
    ours, _ = run_loop(11, schedule=framescope.schedule(**kw))
    assert ours == theirs and len(ours) == 2
    # torch's own schedule object drives a framescope profile the same way
    ours_with_torch_schedule, _ = run_loop(11, schedule=torch_profiler.schedule(**kw))
    assert ours_with_torch_schedule == theirs


def test_trace_handler_names_files_as_tensorboard_trace_handler(tmp_path: Path) -> None:
    handler = framescope.trace_handler(tmp_path / "logs", worker_name="w0")
    with framescope.profile(schedule=framescope.schedule(wait=0, warmup=1, active=1, repeat=2),
                            on_trace_ready=handler) as prof:
        for i in range(6):
            work(i)
            prof.step()
    files = sorted(os.listdir(tmp_path / "logs"))
    assert len(files) == 2
    for f in files:
        assert re.fullmatch(r"w0\.\d+\.pt\.trace\.json", f), f
        data = json.loads((tmp_path / "logs" / f).read_text())
        steps = [e["name"] for e in data["traceEvents"] if e["name"].startswith("ProfilerStep#")]
        assert len(steps) == 1
    gz = framescope.trace_handler(tmp_path / "gz", use_gzip=True)
    with framescope.profile(on_trace_ready=gz):
        work(0)
    (name,) = os.listdir(tmp_path / "gz")
    assert re.fullmatch(re.escape(f"{socket.gethostname()}_{os.getpid()}") +
                        r"\.\d+\.pt\.trace\.json\.gz", name)
    json.loads(gzip.decompress((tmp_path / "gz" / name).read_bytes()))


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="torch is installed on 3.11 only")
def test_torchs_tensorboard_trace_handler_writes_framescope_cycles(tmp_path: Path) -> None:
    torch_profiler = pytest.importorskip("torch.profiler")
    handler = torch_profiler.tensorboard_trace_handler(str(tmp_path), worker_name="w", use_gzip=True)
    with framescope.profile(schedule=framescope.schedule(wait=0, warmup=1, active=1, repeat=2),
                            on_trace_ready=handler) as prof:
        for i in range(5):
            work(i)
            prof.step()
    files = sorted(os.listdir(tmp_path))
    assert len(files) == 2 and all(re.fullmatch(r"w\.\d+\.pt\.trace\.json\.gz", f) for f in files)
    for f in files:
        json.loads(gzip.decompress((tmp_path / f).read_bytes()))


def test_step_misuse_and_bad_schedules() -> None:
    prof = framescope.profile(schedule=framescope.schedule(wait=0, warmup=1, active=1))
    with pytest.raises(RuntimeError, match="step"):
        prof.step()
    with pytest.raises(TypeError, match="ProfilerAction"):
        framescope.profile(schedule=lambda step: "record")  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match="schedule must be a callable"):
        framescope.profile(schedule=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_trace_ready must be a callable"):
        framescope.profile(on_trace_ready="trace.json")  # type: ignore[arg-type]
    with pytest.warns(UserWarning, match="RECORD followed by NONE"):
        actions = [ProfilerAction.RECORD, ProfilerAction.NONE]
        with framescope.profile(schedule=lambda s: actions[min(s, 1)]) as p:
            p.step()
