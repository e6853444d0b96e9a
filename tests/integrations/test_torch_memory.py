"""torch's tensor memory with profile_memory=True and torch ops on (framescope._torch_memory,
cpp/python/integrations/torch_memory.cpp): the allocator's reports as framescope memory samples,
read by the real torch-tb-profiler loader, export_memory_timeline and HTA."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import framescope  # noqa: E402
from framescope.integrations import _torch_memory  # noqa: E402

# A tensor of a size nothing else in these programs allocates: 12345 float32.
SIZE = 12345 * 4


def include_reader() -> Any:
    include = os.path.join(os.path.dirname(torch.__file__), "include")

    def read(header: str) -> str | None:
        try:
            with open(os.path.join(include, header), encoding="utf-8") as f:
                return f.read()
        except OSError:
            return None

    return read


def test_installed_headers_match_the_mirror() -> None:
    assert _torch_memory.check_headers(include_reader()) == []


@pytest.mark.parametrize("header,old,new,problem", [
    ("torch/csrc/profiler/orchestration/observer.h", "bool trace_only;",
     "bool trace_only;\n  bool newer_flag;", "ExperimentalConfig has the members"),
    ("torch/csrc/profiler/orchestration/observer.h", "std::mutex state_mutex_;",
     "std::shared_mutex state_mutex_;", "ProfilerStateBase has the members"),
    ("torch/csrc/profiler/orchestration/observer.h",
     "virtual ActiveProfilerType profilerType() = 0;",
     "virtual ActiveProfilerType profilerType() = 0;\n  virtual void flush() {}",
     "ProfilerStateBase declares the virtual functions"),
    ("c10/core/Allocator.h", "virtual bool memoryProfilingEnabled() const = 0;",
     "virtual bool memoryProfilingEnabled() const = 0;\n  virtual bool more() const;",
     "MemoryReportingInfoBase declares the virtual functions"),
    ("c10/util/ThreadLocalDebugInfo.h", "value_type value_ = nullptr;",
     "value_type value_ = nullptr;\n  int extra_ = 0;", "DebugInfoKind has the members"),
    ("torch/csrc/profiler/orchestration/observer.h", "  Disabled = 0,", "  Off = 0,",
     "ProfilerState { Disabled = 0,"),
    ("c10/core/Device.h", "DeviceIndex index_ = -1;", "int16_t index_ = -1;",
     "Device has the members"),
])
def test_a_changed_header_is_named(header: str, old: str, new: str, problem: str) -> None:
    real = include_reader()

    def read(name: str) -> str | None:
        text = real(name)
        if name == header and text is not None:
            assert old in text
            text = text.replace(old, new)
        return text

    problems = _torch_memory.check_headers(read)
    assert problems and any(problem in p for p in problems), problems


def test_missing_headers_are_named() -> None:
    problems = _torch_memory.check_headers(lambda name: None)
    assert any("c10/core/Allocator.h is missing" in p for p in problems)


def test_unsupported_torch_refuses_with_one_error(tmp_path: Any) -> None:
    # a torch whose headers differ: profile(profile_memory=True) with torch ops raises one
    # RuntimeError naming the difference, in a process of its own (attach() runs once)
    script = tmp_path / "refuse.py"
    script.write_text(textwrap.dedent("""
        import sys, torch
        from framescope.integrations import _torch_memory
        real = _torch_memory.check_headers
        _torch_memory.check_headers = lambda read: real(
            lambda h: (read(h) or "").replace("bool trace_only;", "bool trace_only; bool x;")
            if h.endswith("observer.h") else read(h))
        import framescope
        try:
            framescope.profile(activities=[framescope.ProfilerActivity.CPU],
                               profile_memory=True)
        except RuntimeError as e:
            print("ERROR", e)
        framescope.profile(activities=[framescope.ProfilerActivity.CPU])  # ops alone still work
        print("OK")
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ERROR profile_memory with torch ops does not support torch" in proc.stdout
    assert "ExperimentalConfig has the members" in proc.stdout
    assert proc.stdout.rstrip().endswith("OK")
    assert "Traceback" not in proc.stderr


def cpu_profile(**kwargs: Any) -> framescope.profile:
    return framescope.profile(activities=[framescope.ProfilerActivity.CPU], profile_memory=True,
                              **kwargs)


def test_tensor_allocations_are_memory_samples() -> None:
    with cpu_profile() as prof:
        t = torch.empty(12345, dtype=torch.float32)
        address = t.data_ptr()
        del t
    mine = [m for m in prof.memory_events() if m.address == address]
    assert [(m.bytes, m.device) for m in mine] == [(SIZE, -1), (-SIZE, -1)]
    assert mine[0].total_allocated >= SIZE
    assert mine[1].total_allocated == mine[0].total_allocated - SIZE
    # torch's readers saw no profiler running, during and after
    assert not torch.autograd.profiler._is_profiler_enabled
    assert not torch._C._autograd._profiler_enabled()


def python_objects() -> list[str]:
    return [str(i) for i in range(1000)]


def test_the_chrome_json_has_torchs_memory_events_not_the_python_heaps(tmp_path: Any) -> None:
    with cpu_profile() as prof:
        t = torch.empty(12345, dtype=torch.float32)
        del t
        python_objects()
    path = str(tmp_path / "t.json")
    prof.export_chrome_trace(path)
    with open(path, encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    memory = [e for e in events if e.get("name") == "[memory]"]
    assert [e["args"]["Bytes"] for e in memory if abs(e["args"]["Bytes"]) == SIZE] == \
        [SIZE, -SIZE]
    assert all(e["args"]["Addr"] != 0 and e["args"]["Device Type"] == 0 and
               e["args"]["Device Id"] == -1 and "Python heap" not in e["args"]
               for e in memory)
    # the Python heap stays a counter track of its own
    assert any(e.get("ph") == "C" and e["name"].startswith("Python allocated bytes")
               for e in events)


def test_without_torch_ops_the_python_heap_is_recorded(tmp_path: Any) -> None:
    with framescope.profile(profile_memory=True, torch_ops=False) as prof:
        t = torch.empty(12345, dtype=torch.float32)
        del t
        python_objects()
    assert prof.memory_events() == []
    path = str(tmp_path / "t.json")
    prof.export_chrome_trace(path)
    with open(path, encoding="utf-8") as f:
        memory = [e for e in json.load(f)["traceEvents"] if e.get("name") == "[memory]"]
    assert memory and all(e["args"].get("Python heap") is True for e in memory)


def test_memory_timeline_shows_the_tensor(tmp_path: Any) -> None:
    with cpu_profile() as prof:
        t = torch.empty(12345, dtype=torch.float32)
        del t
    path = str(tmp_path / "m.json")
    prof.export_memory_timeline(path)
    with open(path, encoding="utf-8") as f:
        times, sizes = json.load(f)
    totals = [row[-1] for row in sizes]
    assert len(times) == len(totals) >= 2
    steps = [b - a for a, b in zip(totals, totals[1:])]
    assert -SIZE in steps and max(totals) >= SIZE  # the tensor's allocation, then its free


def torch_bytes(p: Any) -> list[int]:
    return [e.cpu_memory_usage for e in p.events() if abs(e.cpu_memory_usage) == SIZE]


def test_torchs_profiler_inside_a_session_takes_the_tensor_memory() -> None:
    from torch.profiler import ProfilerActivity, profile

    with cpu_profile() as ours:
        u = torch.empty(12345, dtype=torch.float32)
        del u
        # torch refuses to start above another profiler state: framescope's steps aside
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as theirs:
            t = torch.empty(12345, dtype=torch.float32)
            del t
        v = torch.empty(12345, dtype=torch.float32)
        del v
    assert SIZE in torch_bytes(theirs)
    assert [m.bytes for m in ours.memory_events() if abs(m.bytes) == SIZE] == [SIZE, -SIZE]
    assert any("torch's profiler started during the session" in w for w in ours.warnings)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as after:
        t = torch.empty(12345, dtype=torch.float32)
        del t
    assert SIZE in torch_bytes(after)
    assert not torch._C._autograd._profiler_enabled()


def test_a_session_inside_torchs_profiler_leaves_the_memory_to_torch() -> None:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as theirs:
        with cpu_profile() as ours:
            t = torch.empty(12345, dtype=torch.float32)
            del t
    assert SIZE in torch_bytes(theirs)
    assert not [m for m in ours.memory_events() if abs(m.bytes) == SIZE]
    assert any("torch's profiler is running on this thread" in w for w in ours.warnings)
    with cpu_profile() as again:  # nothing was left behind
        t = torch.empty(12345, dtype=torch.float32)
        del t
    assert [m.bytes for m in again.memory_events() if abs(m.bytes) == SIZE] == [SIZE, -SIZE]


def test_tensorboard_memory_view_and_hta(tmp_path: Any) -> None:
    pytest.importorskip("torch_tb_profiler")
    pytest.importorskip("hta")
    # the swapped recipe in a process of its own (torch-tb-profiler's loader spawns workers)
    script = tmp_path / "alloc.py"
    script.write_text(textwrap.dedent(f"""
        import sys, torch
        from framescope import profile, ProfilerActivity, tensorboard_trace_handler
        torch.set_num_threads(1)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                     on_trace_ready=tensorboard_trace_handler(sys.argv[1])) as prof:
            keep = torch.empty(12345, dtype=torch.float32)
            x = torch.ones(100) * 2
            del keep
    """))
    out = tmp_path / "tb"
    proc = subprocess.run([sys.executable, str(script), str(out)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    from torch_tb_profiler import io
    from torch_tb_profiler.profiler.loader import RunLoader

    run = RunLoader("run", str(out), io.Cache(str(tmp_path / "cache"))).load()
    (worker,) = run.workers
    (profile,) = [p for p in run.get_profiles(worker=worker) if getattr(p, "views", None)]
    assert "Memory" in [v.display_name for v in run.views]
    events = profile.get_memory_events(memory_metric="B")
    sizes = [(row[0], row[1]) for row in events["rows"]["CPU"]]
    assert [name for name, size in sizes if size == SIZE and "aten::empty" in name], sizes
    curve = profile.get_memory_curve(memory_metric="B")
    assert max(row[1] for row in curve["rows"]["CPU"]) >= SIZE
    from hta.trace_analysis import TraceAnalysis

    analysis = TraceAnalysis(trace_dir=str(out))
    df = analysis.t.get_trace(0)
    assert (df["cat"] == analysis.t.symbol_table.get_sym_id_map()["cpu_op"]).sum() > 0
    (path,) = glob.glob(str(out / "*.pt.trace.json"))
    with open(path, encoding="utf-8") as f:
        memory = [e for e in json.load(f)["traceEvents"] if e.get("name") == "[memory]"]
    assert SIZE in [e["args"]["Bytes"] for e in memory]


def test_attaching_inside_a_running_session(tmp_path: Any) -> None:
    # the first profile(profile_memory=True) with torch ops created while another session runs
    # (a test under the pytest plugin, say) attaches and probes; the running session's own
    # recording is unaffected
    script = tmp_path / "inside.py"
    script.write_text(textwrap.dedent("""
        import torch, framescope
        cpu = [framescope.ProfilerActivity.CPU]
        with framescope.profile(profile_memory=True, torch_ops=False) as outer:
            inner = framescope.profile(activities=cpu, profile_memory=True)
        with inner:
            t = torch.empty(12345, dtype=torch.float32)
            del t
        print(sorted(m.bytes for m in inner.memory_events() if abs(m.bytes) == 49380))
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[-49380, 49380]"
