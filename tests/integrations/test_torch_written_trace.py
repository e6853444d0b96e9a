"""Reading a Chrome trace torch.profiler wrote itself: ``framescope summary`` and ``framescope
report`` show its ops and Python frames, not torch's bookkeeping spans ("PyTorch Profiler (0)" on
the pseudo-process "Spans"). A trace torch 2.13 wrote is kept in tests/data (made once, on 3.11:
a Linear-ReLU-Linear forward and backward with with_stack=True); with torch installed, a fresh
one is written and read the same way."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from framescope.export import _report as report

FIXTURE = os.path.join(os.path.dirname(__file__), "data", "torch_2.13_with_stack.json.gz")


def _check_summary(path: str) -> None:
    out = subprocess.run([sys.executable, "-m", "framescope", "summary", path, "--limit", "-1"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "PyTorch Profiler" not in text and "Spans" not in text, text
    assert "aten::addmm" in text or "aten::linear" in text, text
    assert "python_function" in text, text  # its Python frames (with_stack)


def _check_report(path: str) -> None:
    data = report.load(path)
    labels = [t.label for t in data.threads]
    assert not [label for label in labels if "Spans" in label]
    names = [row[0] for row in data.table]
    assert not [n for n in names if n.startswith("PyTorch Profiler")]
    assert any(n.startswith("aten::") for n in names)
    top = data.table[0]
    assert top[4] < sum(r[4] for r in data.table)  # no single span holding all the time


def test_torch_written_fixture() -> None:
    _check_summary(FIXTURE)
    _check_report(FIXTURE)


def test_report_page_of_torch_trace(tmp_path: Any) -> None:
    out = subprocess.run([sys.executable, "-m", "framescope", "report", FIXTURE, "-o",
                          str(tmp_path / "r.html")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    page = (tmp_path / "r.html").read_text()
    assert "aten::" in page and "PyTorch Profiler (0)" not in page


def test_fresh_torch_trace(tmp_path: Any) -> None:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        model(torch.randn(8, 16)).sum().backward()
    path = str(tmp_path / "torch.json")
    prof.export_chrome_trace(path)
    _check_summary(path)
    _check_report(path)
