"""profile(torch_ops=True): torch's operators recorded through its RecordFunction observers,
checked against torch.profiler's own events of the same run."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import threading
from typing import Any

import pytest

import framescope
from framescope.integrations import _torch_ops as torch_ops

torch = pytest.importorskip("torch")


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.act = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(16, 2)

    def forward(self, x: Any) -> Any:
        return self.fc2(self.act(self.fc1(x)))


def train_step(model: Net, x: Any) -> None:
    loss = model(x).sum()
    loss.backward()


def ancestors(events: framescope.EventList, e: framescope.Event) -> list[str]:
    out = []
    while e.parent is not None:
        e = events[e.parent]
        out.append(e.name)
    return out


def input_shapes(prof: framescope.profile, e: framescope.Event) -> tuple[tuple[int, ...], ...]:
    """The input shapes of a recorded op (() for an input that is not a tensor)."""
    detail = prof.trace.detail(e.index)
    return tuple(tuple(s or ()) for s in detail[3]) if detail else ()


def kineto_cpu_events(tp: Any) -> list[Any]:
    """torch.profiler's raw CPU events (before its post-processing merges an op with a child of
    the same name, which framescope keeps as two ranges, as they ran)."""
    return [
        e
        for e in tp.profiler.kineto_results.events()
        if e.device_type() == torch.autograd.DeviceType.CPU
    ]


def test_ops_match_torch_profiler_on_the_same_run() -> None:
    # GIVEN a model run under framescope and torch.profiler at once
    model, x = Net(), torch.randn(4, 8)
    with framescope.profile(torch_ops=True, record_shapes=True) as prof:
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True
        ) as tp:
            train_step(model, x)
    # THEN both saw the same ops, the same number of times, with the same input shapes
    ours = [
        (e.name, input_shapes(prof, e))
        for e in prof.events()
        if e.category in ("cpu_op", "user_annotation")
    ]
    theirs = [(e.name(), tuple(tuple(s) for s in e.shapes())) for e in kineto_cpu_events(tp)]
    assert collections.Counter(ours) == collections.Counter(theirs)
    names = {n for n, _ in ours}
    assert {"aten::linear", "aten::addmm", "aten::relu", "aten::sum"} <= names
    assert any(n.startswith("autograd::engine::evaluate_function: AddmmBackward0") for n in names)


def test_ops_nest_under_module_slices_and_python_frames() -> None:
    model, x = Net(), torch.randn(4, 8)
    with framescope.profile(torch_ops=True) as prof:
        train_step(model, x)
    events = prof.events()
    linears = events.named("aten::linear")
    assert len(linears) == 2
    for e, linear in zip(linears, ("nn.Module: Linear_0", "nn.Module: Linear_1")):
        chain = ancestors(events, e)
        # the Python frame that called the op, inside the module's slice, inside the model
        assert chain[0].endswith("Linear.forward"), chain
        # Linear's slice (Module.__call__ -> _call_impl -> forward) is the nearest module slice,
        # named per instance as torch names it (fc1 is called first: Linear_0)
        modules = [n for n in chain if n.startswith("nn.Module: ")]
        assert modules == [linear, "nn.Module: Net_0"], chain
        assert chain.index(linear) <= 2
        assert any(n.endswith("train_step") for n in chain)
        assert e.category == "cpu_op"
    addmm = events.named("aten::addmm")
    assert all(events[a.parent].name == "aten::linear" for a in addmm if a.parent is not None)
    relu = events.named("aten::relu")
    assert len(relu) == 1 and "nn.Module: ReLU_0" in ancestors(events, relu[0])
    # backward ops are under the Python frames of loss.backward()
    node = [e for e in events if e.name.endswith("AddmmBackward0") and "evaluate" in e.name]
    assert node and any(n.endswith("Tensor.backward") for n in ancestors(events, node[0]))


def test_ops_are_on_the_thread_that_ran_them() -> None:
    model, x = Net(), torch.randn(4, 8)

    worker_tid = []

    def work() -> None:
        worker_tid.append(threading.get_native_id())
        with torch.no_grad():
            model(x)

    with framescope.profile(torch_ops=True) as prof:
        t = threading.Thread(target=work, name="torch-worker")
        t.start()
        t.join()
        torch.mm(torch.ones(2, 2), torch.ones(2, 2))
    events = prof.events()
    os_tid = {i: th[1] for i, th in enumerate(prof.trace.threads)}
    assert {os_tid[e.thread] for e in events.named("aten::linear")} == set(worker_tid)
    assert {os_tid[e.thread] for e in events.named("aten::mm")} == {threading.get_native_id()}
    # and under that thread's Python frames
    for linear in events.named("aten::linear"):
        assert any(n.endswith("work") for n in ancestors(events, linear))


def test_user_ranges_of_torch_are_user_annotations() -> None:
    with framescope.profile(torch_ops=True) as prof:
        with torch.profiler.record_function("my_block"):
            torch.ones(3).add_(1)
    events = prof.events()
    (block,) = events.named("my_block")
    assert block.category == "user_annotation"
    # the range opens inside record_function.__enter__ and stays open across its return: the
    # ops of the with-block are its children
    ops = [c.name for c in events.children(block) if c.category == "cpu_op"]
    assert ops == ["aten::ones", "aten::add_"]


def test_chrome_trace_has_ops_with_shapes_and_types(tmp_path: Any) -> None:
    model, x = Net(), torch.randn(4, 8)
    with framescope.profile(torch_ops=True, record_shapes=True) as prof:
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True
        ) as tp:
            with torch.no_grad():
                model(x)
    path = tmp_path / "t.json"
    prof.export_chrome_trace(path)
    doc = json.loads(path.read_text())
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and e.get("ph") in "BX"]
    ours = sorted(
        (e["name"], json.dumps(e["args"]["Input Dims"]), json.dumps(e["args"]["Input type"]))
        for e in ops
    )
    # torch.profiler tells tensor lists from scalar lists; torch's inputTypes, which framescope
    # reads, calls both GenericList (documented)
    lists = {"ScalarList": "GenericList", "TensorList": "GenericList"}
    theirs = sorted(
        (e.name(), json.dumps(e.shapes()), json.dumps([lists.get(t, t) for t in e.dtypes()]))
        for e in kineto_cpu_events(tp)
    )
    assert ours == theirs
    (linear, _) = [e for e in ops if e["name"] == "aten::linear"]
    assert linear["args"]["Input Dims"] == [[4, 8], [16, 8], [16]]
    assert linear["args"]["Input type"] == ["float", "float", "float"]


def test_pstats_and_summary_list_ops(tmp_path: Any) -> None:
    import pstats

    with framescope.profile(torch_ops=True) as prof:
        for _ in range(3):
            torch.mm(torch.ones(4, 4), torch.ones(4, 4))
    path = tmp_path / "t.prof"
    prof.export_pstats(path)
    stats = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    mm = [v for k, v in stats.items() if k[2] == "aten::mm"]
    assert len(mm) == 1 and mm[0][1] == 3
    assert "aten::mm" in prof.summary(limit=50)


def test_without_torch_ops_no_op_is_recorded() -> None:
    with framescope.profile() as prof:
        torch.mm(torch.ones(2, 2), torch.ones(2, 2))
    assert not [e for e in prof.events() if e.category == "cpu_op"]
    # and the observer is gone after a torch_ops session
    with framescope.profile(torch_ops=True):
        pass
    with framescope.profile() as prof:
        torch.mm(torch.ones(2, 2), torch.ones(2, 2))
    assert not [e for e in prof.events() if e.category == "cpu_op"]


def test_installed_header_matches_the_mirrored_layout() -> None:
    header = os.path.join(os.path.dirname(torch.__file__), "include", "ATen", "record_function.h")
    with open(header) as f:
        text = f.read()
    assert torch_ops.check_header(text) == []
    # a changed member, an added scope: both are caught
    changed = text.replace("bool needs_ids_ = false;", "bool needs_ids_ = false;\n  int x_ = 0;")
    assert any("members" in p for p in torch_ops.check_header(changed))
    scoped = text.replace("  USER_SCOPE,", "  NEW_SCOPE,\n  USER_SCOPE,")
    assert any("USER_SCOPE" in p for p in torch_ops.check_header(scoped))


def test_cli_torch_ops(tmp_path: Any) -> None:
    script = tmp_path / "model.py"
    script.write_text(
        "import torch\n"
        "m = torch.nn.Linear(3, 2)\n"
        "m(torch.ones(5, 3))\n"
    )
    out = tmp_path / "t.json"
    subprocess.run(
        [sys.executable, "-m", "framescope", "run", "--torch-ops", "--record-shapes",
         "-o", str(out), str(script)],
        check=True, capture_output=True, cwd=tmp_path,
    )
    doc = json.loads(out.read_text())
    ops = [e for e in doc["traceEvents"] if e.get("name") == "aten::linear" and e["ph"] in "BX"]
    assert len(ops) == 1 and ops[0]["args"]["Input Dims"] == [[5, 3], [2, 3], [2]]


def test_torchs_modules_per_instance_other_labels_per_class() -> None:
    class Plain:
        def __call__(self) -> int:
            return 1

    framescope.label_calls(Plain, "nn.Module")  # the same label, for another class's calls
    a, b, first, second = Plain(), Plain(), Net(), Net()
    with framescope.profile(torch_ops=True) as prof:
        a()
        b()
        first(torch.randn(4, 8))
        second(torch.randn(4, 8))
        first(torch.randn(4, 8))
    names = collections.Counter(e.name for e in prof.events()
                                if e.name.startswith("nn.Module: "))
    assert names["nn.Module: Plain"] == 2
    # torch's numbering: per class, in the order of the instances' first calls
    assert names["nn.Module: Net_0"] == 2 and names["nn.Module: Net_1"] == 1
    assert names["nn.Module: Linear_0"] == 2 and names["nn.Module: Linear_3"] == 1
