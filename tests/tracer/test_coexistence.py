"""framescope next to other tools on 3.12+ (issue 31, item 10): it holds a sys.monitoring tool id
that no kind of tool reserves (4, else 3), so cProfile (PROFILER_ID), coverage (COVERAGE_ID) and
debuggers (DEBUGGER_ID) can take theirs during a session."""

from __future__ import annotations

import cProfile
import pstats
import sys

import pytest

import framescope

pytestmark = pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")


def _work(n: int) -> int:
    return sum(i * i for i in range(n))


def _started_frame() -> None:
    # A frame from before the start that returns during the session: the frame hook asks
    # sys.monitoring for its end, so it holds a tool id too.
    with framescope.profile(backend="frame_hook") as prof:
        _check_other_tools()
    assert any(e.name.endswith("_check_other_tools") for e in prof.events())


def _check_other_tools() -> None:
    mon = sys.monitoring
    for tool in (mon.DEBUGGER_ID, mon.COVERAGE_ID, mon.PROFILER_ID, mon.OPTIMIZER_ID):
        assert mon.get_tool(tool) is None, f"framescope holds tool id {tool}"
    profiler = cProfile.Profile()
    profiler.enable()  # asks for PROFILER_ID
    _work(1000)
    profiler.disable()
    stats = pstats.Stats(profiler)
    assert any(func[2] == "_work" for func in stats.stats)  # type: ignore[attr-defined]
    mon.use_tool_id(mon.COVERAGE_ID, "coverage-like")
    mon.free_tool_id(mon.COVERAGE_ID)
    mon.use_tool_id(mon.DEBUGGER_ID, "debugger-like")
    mon.free_tool_id(mon.DEBUGGER_ID)


@pytest.mark.parametrize("backend", ["sys.monitoring", "frame_hook"])
def test_cprofile_coverage_and_debuggers_keep_their_ids(backend: str) -> None:
    with framescope.profile(backend=backend) as prof:
        _check_other_tools()
        _work(10)
    names = {e.name for e in prof.events()}
    assert any(n.endswith("_work") for n in names)


def test_frame_hook_with_frames_from_the_start() -> None:
    _started_frame()


def test_falls_back_when_its_ids_are_taken() -> None:
    mon = sys.monitoring
    mon.use_tool_id(4, "other-a")
    mon.use_tool_id(3, "other-b")
    try:
        with framescope.profile(backend="sys.monitoring") as prof:
            _work(10)
        assert any(e.name.endswith("_work") for e in prof.events())
    finally:
        mon.free_tool_id(4)
        mon.free_tool_id(3)
