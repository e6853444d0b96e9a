"""The torch.profiler drop-in: a torch.profiler recipe run as is and with only its import line
changed to framescope, read by the real torch-tb-profiler loader and HTA (issue 24)."""

from __future__ import annotations

import collections
import glob
import gzip
import json
import os
import subprocess
import sys
import time
import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_tb_profiler")
pytest.importorskip("hta")

import framescope  # noqa: E402

RECIPE = os.path.join(os.path.dirname(__file__), "torch_recipes", "recipe_train.py")
TORCH_IMPORT = ("from torch.profiler import ProfilerActivity, profile, record_function, "
                "schedule, tensorboard_trace_handler")
FRAMESCOPE_IMPORT = TORCH_IMPORT.replace("from torch.profiler", "from framescope")


def run_recipe(tmp: str, which: str) -> str:
    """Runs the recipe with the import line of `which` ("torch" or "framescope") in a process of
    its own; returns its output directory."""
    with open(RECIPE, encoding="utf-8") as f:
        source = f.read()
    assert TORCH_IMPORT in source
    if which == "framescope":
        source = source.replace(TORCH_IMPORT, FRAMESCOPE_IMPORT)
    out = os.path.join(tmp, which)
    os.makedirs(out)
    script = os.path.join(tmp, f"recipe_{which}.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write(source)
    proc = subprocess.run([sys.executable, script, out], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = str(tmp_path_factory.mktemp("dropin"))
    return {which: run_recipe(tmp, which) for which in ("torch", "framescope")}


def tb_trace(out: str) -> dict[str, Any]:
    (path,) = glob.glob(os.path.join(out, "tb", "*.pt.trace.json"))
    with open(path, encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


def tb_profile(out: str) -> Any:
    """torch-tb-profiler's run profile of the recipe's trace directory, through its RunLoader
    (the plugin's own loading path: a worker process per file)."""
    from torch_tb_profiler import io
    from torch_tb_profiler.profiler.loader import RunLoader

    cache = io.Cache(os.path.join(out, "tb-cache"))
    run = RunLoader("run", os.path.join(out, "tb"), cache).load()
    (worker,) = run.workers
    profiles = run.get_profiles(worker=worker)
    profile = [p for p in profiles if getattr(p, "views", None)]
    assert profile, f"torch-tb-profiler loaded nothing from {out}"
    return run, profile[0]


def op_rows(profile: Any) -> dict[str, int]:
    """The Operator view's rows: calls by operator name."""
    return {row["name"]: row["calls"] for row in profile.operation_table_by_name["data"]}


def test_tensorboard_shows_the_same_views_and_operators(runs: dict[str, str]) -> None:
    theirs_run, theirs = tb_profile(runs["torch"])
    ours_run, ours = tb_profile(runs["framescope"])
    names = [v.display_name for v in theirs_run.views]
    assert {"Overview", "Operator", "Trace", "Memory", "Module"} <= set(names), names
    assert [v.display_name for v in ours_run.views] == names
    # the same operator rows (torch's ops, as many calls each)
    assert op_rows(theirs) and op_rows(ours) == op_rows(theirs)
    # the same steps in the Overview
    assert ours.overview["steps"]["rows"] and \
        [r[0] for r in ours.overview["steps"]["rows"]] == \
        [r[0] for r in theirs.overview["steps"]["rows"]]


def cpu_exec_share(profile: Any) -> float:
    rows = {r[0]: r[2] for r in profile.overview["performance"][0]["children"]} \
        if "children" in profile.overview["performance"][0] else {}
    return float(rows.get("CPU Exec", "nan"))


def test_hta_loads_both_with_the_same_cpu_op_count(runs: dict[str, str]) -> None:
    from hta.trace_analysis import TraceAnalysis

    counts = {}
    for which, out in runs.items():
        analysis = TraceAnalysis(trace_dir=os.path.join(out, "tb"))
        df = analysis.t.get_trace(0)
        cat = analysis.t.symbol_table.get_sym_id_map()["cpu_op"]
        counts[which] = int((df["cat"] == cat).sum())
    assert counts["torch"] > 0
    assert counts["framescope"] == counts["torch"], counts


def test_module_events_carry_torchs_args(runs: dict[str, str]) -> None:
    ours = tb_trace(runs["framescope"])["traceEvents"]
    modules = [e for e in ours if e.get("name", "").startswith("nn.Module: ")]
    assert modules and all(e["cat"] == "python_function" for e in modules)
    assert all("Python module id" in e["args"] and "Python id" in e["args"] for e in modules)
    python = {e["args"]["Python id"]: e for e in ours
              if e.get("cat") == "python_function" and e.get("ph") == "X"}
    # a "Python parent id" always names a Python frame (ops between them are skipped)
    parents = [e["args"]["Python parent id"] for e in python.values()]
    assert all(p is None or p in python for p in parents)
    linear = [e for e in modules if e["name"].startswith("nn.Module: Linear")]
    assert linear and all(python[e["args"]["Python parent id"]]["name"].endswith("Net.forward")
                          for e in linear)
    # named per instance as torch names them: the same (name, module id) pairs, as often
    theirs = [e for e in tb_trace(runs["torch"])["traceEvents"]
              if e.get("name", "").startswith("nn.Module: ")]

    def instances(events: list[dict[str, Any]]) -> collections.Counter[tuple[str, int]]:
        return collections.Counter((e["name"], e["args"]["Python module id"]) for e in events)

    assert instances(theirs)[("nn.Module: Linear_1", 1)] > 0
    assert instances(modules) == instances(theirs)


def module_tree(profile: Any) -> list[tuple[int, str, int]]:
    """The Module view's rows: (depth, module name, occurrences), depth first."""
    def walk(node: dict[str, Any], depth: int) -> list[tuple[int, str, int]]:
        rows = [(depth, node["name"], node["occurences"])]
        for child in node.get("children", []):
            rows += walk(child, depth + 1)
        return rows

    return [row for top in profile.get_module_view()["data"] for row in walk(top, 0)]


def test_module_and_memory_views_match_torchs(runs: dict[str, str]) -> None:
    _, theirs = tb_profile(runs["torch"])
    _, ours = tb_profile(runs["framescope"])
    assert ("1", "Linear_1") in {(str(d), n) for d, n, _ in module_tree(theirs)}
    assert module_tree(ours) == module_tree(theirs)
    # the Memory view: torch's tensor memory, the same peak and the same per-operator table
    assert ours.get_memory_curve()["metadata"]["peaks"] == \
        theirs.get_memory_curve()["metadata"]["peaks"]
    assert ours.get_memory_stats()["rows"] == theirs.get_memory_stats()["rows"]


def test_memory_events_and_top_level_keys(runs: dict[str, str]) -> None:
    data = tb_trace(runs["framescope"])
    memory = [e for e in data["traceEvents"] if e.get("name") == "[memory]"]
    assert memory
    for key in ("Addr", "Bytes", "Total Allocated", "Total Reserved", "Device Type", "Device Id"):
        assert all(key in e["args"] for e in memory), key
    torch_keys = set(tb_trace(runs["torch"])) - {"trace_id"}
    assert torch_keys <= set(data), torch_keys - set(data)
    assert data["traceName"].endswith(".pt.trace.json")
    steps = [e["name"] for e in data["traceEvents"]
             if e.get("name", "").startswith("ProfilerStep#")]
    theirs = [e["name"] for e in tb_trace(runs["torch"])["traceEvents"]
              if e.get("name", "").startswith("ProfilerStep#")]
    assert sorted(steps) == sorted(theirs) == ["ProfilerStep#2", "ProfilerStep#3",
                                               "ProfilerStep#4"]


def is_python_row(key: str) -> bool:
    return ".py(" in key or key.startswith(("<built-in", "<frozen", "nn.Module: ", "<string>"))


def test_key_averages_by_input_shape_match_torch(runs: dict[str, str]) -> None:
    def ops(out: str) -> collections.Counter[tuple[str, str]]:
        with open(os.path.join(out, "key_averages.json"), encoding="utf-8") as f:
            rows = json.load(f)
        # torch's ops, autograd nodes and ranges; Python frames and module slices are left
        # out (torch's tracer names its own frames and module instances differently)
        return collections.Counter({(k, str(s)): c for k, s, c in rows
                                    if not is_python_row(k)})

    theirs, ours = ops(runs["torch"]), ops(runs["framescope"])
    assert theirs and ours == theirs


def test_exports_stacks_and_memory_timeline_on_a_cpu_machine(runs: dict[str, str]) -> None:
    out = runs["framescope"]
    with open(os.path.join(out, "stacks.txt"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert lines
    for line in lines:
        stack, value = line.rsplit(" ", 1)
        assert int(value) > 0 and stack
    assert any(";aten::addmm" in line or line.startswith("aten::addmm") for line in lines)
    assert any("recipe_" in line.split(";")[0] for line in lines)
    with open(os.path.join(out, "memory.json"), encoding="utf-8") as f:
        times, sizes = json.load(f)
    with open(os.path.join(runs["torch"], "memory.json"), encoding="utf-8") as f:
        _, torch_sizes = json.load(f)
    assert len(times) == len(sizes) > 0
    assert times == sorted(times)
    assert {len(row) for row in sizes} == {len(torch_sizes[0])}
    assert max(row[-1] for row in sizes) > 0


# -- the names and arguments, in this process ---------------------------------------------------


def test_the_import_line_names_exist() -> None:
    from framescope import (ProfilerAction, ProfilerActivity, profile, record_function,  # noqa
                            schedule, supported_activities, tensorboard_trace_handler,
                            trace_handler)

    assert tensorboard_trace_handler is trace_handler
    assert {a.name for a in ProfilerActivity} >= {"CPU", "CUDA", "XPU", "MTIA", "HPU",
                                                   "PrivateUse1"}
    assert supported_activities() == {ProfilerActivity.CPU}
    # torch's own enum members are accepted, by name
    assert framescope.profile(activities=[torch.profiler.ProfilerActivity.CPU]).torch_ops


def test_unavailable_device_is_one_warning_and_noted(tmp_path: Any) -> None:
    with pytest.warns(UserWarning, match="CUDA activity unavailable") as record:
        prof = framescope.profile(activities=[framescope.ProfilerActivity.CPU,
                                              framescope.ProfilerActivity.CUDA])
    assert len(record) == 1
    assert prof.unavailable_activities == ["CUDA"]
    with prof:
        torch.ones(3).sum()
    path = str(tmp_path / "t.json.gz")
    prof.export_chrome_trace(path)
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    assert data["framescopeUnavailableActivities"] == ["CUDA"]
    with pytest.raises(ValueError, match="unknown profiler activity"):
        framescope.profile(activities=["TPU"])
    with pytest.raises(TypeError, match="iterable of ProfilerActivity"):
        framescope.profile(activities=framescope.ProfilerActivity.CPU)  # type: ignore[arg-type]


def test_torch_ops_follow_activities_unless_given() -> None:
    cpu = [framescope.ProfilerActivity.CPU]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert framescope.profile(activities=cpu).torch_ops is True
    assert framescope.profile(activities=cpu, torch_ops=False).torch_ops is False
    assert framescope.profile().torch_ops is False
    with framescope.profile(activities=cpu, with_stack=False) as prof:
        torch.ones(4).add(1)
    assert any(e.name == "aten::add" and e.category == "cpu_op" for e in prof.events())


def test_metadata_keys_are_top_level(tmp_path: Any) -> None:
    with framescope.profile(activities=[framescope.ProfilerActivity.CPU]) as prof:
        torch.ones(2).mul(2)
    prof.add_metadata("run", 'name "quoted"')
    prof.add_metadata_json("config", '{"lr": 0.1, "layers": [1, 2]}')
    with pytest.raises(ValueError, match="not valid JSON"):
        prof.add_metadata_json("bad", "{nope")
    with pytest.raises(TypeError, match="must be a str"):
        prof.add_metadata("n", 3)  # type: ignore[arg-type]
    path = str(tmp_path / "t.json")
    prof.export_chrome_trace(path)
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    assert data["run"] == 'name "quoted"'
    assert data["config"] == {"lr": 0.1, "layers": [1, 2]}
    assert data["schemaVersion"] == 1 and data["deviceProperties"] == []
    # torch's base is Unix time: base + ts is when the event ran (HTA converts so)
    first = min(e["ts"] for e in data["traceEvents"] if e.get("ph") == "X")
    assert abs(data["baseTimeNanoseconds"] + first * 1e3 - time.time_ns()) < 600e9


def test_memory_timeline_errors_and_formats(tmp_path: Any) -> None:
    with framescope.profile(profile_memory=True) as prof:
        [bytearray(1000) for _ in range(100)]
    path = str(tmp_path / "m.json.gz")
    prof.export_memory_timeline(path)
    with gzip.open(path, "rt") as f:
        times, sizes = json.load(f)
    assert len(times) == len(sizes) > 0
    with pytest.raises(ValueError, match="CPU memory only"):
        prof.export_memory_timeline(str(tmp_path / "m.json"), device="cuda:0")
    with pytest.raises(ValueError, match=".json, .json.gz or .html"):
        prof.export_memory_timeline(str(tmp_path / "m.txt"))
    html = str(tmp_path / "m.html")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        with pytest.raises(RuntimeError, match="needs matplotlib"):
            prof.export_memory_timeline(html)
    else:
        prof.export_memory_timeline(html)
        with open(html, encoding="utf-8") as f:
            assert "data:image/png;base64," in f.read()
    with framescope.profile() as plain:
        pass
    with pytest.raises(ValueError, match="profile_memory=True"):
        plain.export_memory_timeline(str(tmp_path / "x.json"))
    with pytest.raises(ValueError, match="unknown metric"):
        plain.export_stacks(str(tmp_path / "s.txt"), "cpu_time")


def test_torchs_other_keywords_are_accepted() -> None:
    prof = framescope.profile(activities=[framescope.ProfilerActivity.CPU], with_modules=True,
                              acc_events=True, experimental_config=None,
                              post_processing_timeout_s=5.0,
                              custom_trace_id_callback=lambda: "id")
    assert prof.torch_ops and prof.unavailable_activities == []
    with pytest.warns(UserWarning, match="use_cuda=True"):
        assert framescope.profile(use_cuda=True).unavailable_activities == ["CUDA"]
    with pytest.raises(NotImplementedError, match="execution_trace_observer"):
        framescope.profile(execution_trace_observer=object())
    with pytest.raises(TypeError):
        framescope.profile(with_module=True)  # type: ignore[call-arg]


def rank_hta_reads(path: str) -> int:
    """The rank HTA's loader reads from a trace file (its own regex over the file's lines)."""
    from hta.common.trace_file import create_rank_to_trace_dict

    ok, ranks = create_rank_to_trace_dict([path])
    assert ok
    (rank,) = ranks
    return int(rank)


def test_distributed_info_from_torch_distributed_and_launchers(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0,
                            world_size=1)
    try:
        with framescope.profile(activities=[framescope.ProfilerActivity.CPU]) as prof:
            torch.ones(2).add(1)
        path = str(tmp_path / "dist.pt.trace.json")
        prof.export_chrome_trace(path)
    finally:
        dist.destroy_process_group()
    with open(path, encoding="utf-8") as f:
        info = json.load(f)["distributedInfo"]
    assert (info["backend"], info["rank"], info["world_size"]) == ("gloo", 0, 1)
    assert rank_hta_reads(path) == 0
    # a launcher's rank without a process group (torchrun's variables)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    path = str(tmp_path / "rank3.pt.trace.json")
    prof.export_chrome_trace(path)
    with open(path, encoding="utf-8") as f:
        info = json.load(f)["distributedInfo"]
    assert (info["rank"], info["world_size"]) == (3, 4)
    assert rank_hta_reads(path) == 3
