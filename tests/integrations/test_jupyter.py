"""%load_ext framescope and the %%framescope / %framescope magics, in a real notebook run by a
real kernel (nbclient + ipykernel), on one Python version."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from tests.support.optional import require

JUPYTER_VERSION = (3, 12)
pytestmark = pytest.mark.skipif(
    sys.version_info[:2] != JUPYTER_VERSION,
    reason=f"notebook tests run on Python {JUPYTER_VERSION[0]}.{JUPYTER_VERSION[1]}",
)


CELLS = [
    "%load_ext framescope",
    # a cell magic: the cell's functions, its output, and the summary under it
    "%%framescope -o cell.json\n"
    "def fib(n):\n"
    "    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
    "print('fib', fib(15))\n"
    "fib(10)",
    # a line magic
    "def square(x):\n    return x * x\n",
    "%framescope -o line.json -l 5 square(7)",
    # options: no Python calls (ranges only), builtins
    "%%framescope --no-stack -o nostack.json\n"
    "import framescope\n"
    "with framescope.record_function('block'):\n"
    "    square(3)",
    "%%framescope --c-calls -o ccalls.json -l 0\nsorted([3, 1, 2])",
    # an HTML report, shown inline
    "%%framescope -o report.html\nfib(12)",
    # an exception in the profiled cell is shown, and the trace still written
    "%%framescope -o err.json\ndef boom():\n    raise ValueError('boom')\nboom()",
    # the default file name is the cell's number; a cell that fails after fib: the traceback
    # IPython formats is host time, the summary starts at fib
    "%%framescope\nfib(12)\nraise ValueError('after fib')",
    # --show-host: the kernel's functions listed too
    "%%framescope -o shown.json --show-host -l -1\nfib(3)",
]


def table_rows(text: str) -> list[str]:
    """The names of a summary's rows (after the header's dashes, before its last lines)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("----------")) + 1
    rows = []
    for line in lines[start:]:
        if not line.split() or not line.split()[0].isdigit():
            break
        rows.append(line.split("  ")[-1].strip())
    return rows


def categories(path: Any) -> dict[str, set[str]]:
    doc = json.loads(path.read_text())
    out: dict[str, set[str]] = {}
    for e in doc["traceEvents"]:
        if e.get("ph") in ("X", "B"):
            out.setdefault(e["name"], set()).add(e["cat"])
    return out


def names(path: Any) -> list[str]:
    doc = json.loads(path.read_text())
    return [e["name"] for e in doc["traceEvents"] if e.get("ph") in ("X", "B")]


def text_of(cell: Any) -> str:
    out = []
    for o in cell.get("outputs", []):
        if o["output_type"] == "stream":
            out.append(o["text"])
        elif o["output_type"] in ("execute_result", "display_data"):
            out.append(o["data"].get("text/plain", ""))
            out.append(o["data"].get("text/html", ""))
        elif o["output_type"] == "error":
            out.append(o["ename"] + ": " + o["evalue"])
    return "".join(out)


def test_notebook_magics(tmp_path: Any) -> None:
    nbformat = require("nbformat")
    nbclient = require("nbclient")
    require("ipykernel")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in CELLS]
    client = nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", allow_errors=True,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    out = [text_of(c) for c in nb.cells]

    # %%framescope: the cell ran (its print and its last value), then the summary
    assert "fib 610" in out[1] and "55" in out[1]
    assert "calls" in out[1] and "self ms" in out[1]
    assert "framescope: trace written to cell.json" in out[1]
    cell_names = names(tmp_path / "cell.json")
    assert sum(n.endswith(": fib") for n in cell_names) == 1973 + 177  # fib(15) + fib(10) calls
    # The cell, not the kernel: the trace starts at the cell's code (no kernel frames, with
    # --show-host they are there as category "host"); the summary covers the cell's thread, not
    # the kernel's waiting I/O, heartbeat and control threads, and its rows are the cell's
    # functions, fib first.
    cats = categories(tmp_path / "cell.json")
    assert not [n for n in cats if n.startswith(("IPython/", "ipykernel/", "traitlets/"))]
    assert set().union(*cats.values()) == {"python_function"}
    shown = categories(tmp_path / "shown.json")
    kernel = [n for n in shown if n.startswith(("IPython/", "ipykernel/"))]
    assert kernel and all(shown[n] == {"host"} for n in kernel)
    assert shown[next(n for n in shown if n.endswith(": fib"))] == {"python_function"}
    assert "on 1 thread" in out[1]
    rows = table_rows(out[1])
    assert rows[0].endswith(": fib"), rows
    assert all(n.startswith("/") and "ipykernel_" in n for n in rows), rows  # the cell's file
    assert "ms of it host code" in out[1]
    # %framescope statement: the value is displayed, the summary has 5 rows at most
    assert "49" in out[3]
    assert any(n.endswith(": square") for n in names(tmp_path / "line.json"))
    # --no-stack: the range, no Python frames
    ns = names(tmp_path / "nostack.json")
    assert "block" in ns and not any(n.endswith(": square") for n in ns)
    # --c-calls: builtins are recorded
    assert any("sorted" in n for n in names(tmp_path / "ccalls.json"))
    assert "self ms" not in out[5]  # -l 0: no summary
    # .html: a report file, shown inline in an iframe
    assert "report-data" in (tmp_path / "report.html").read_text()
    assert "<iframe srcdoc=" in out[6]
    # an error: shown as the cell's error, trace still written
    assert "ValueError: boom" in out[7]
    assert any(n.endswith(": boom") for n in names(tmp_path / "err.json"))
    # the default name is the cell's number (IPython counts the cell before running it)
    number = nb.cells[8]["execution_count"]
    assert f"trace written to framescope-{number}.json" in out[8], out[8]
    assert (tmp_path / f"framescope-{number}.json").exists()
    # the traceback formatted after the failure is host time: fib tops the table, nothing of
    # IPython's formatting (executing, inspect, posixpath, typing, tokenize) is a row
    assert "ValueError: after fib" in out[8]
    rows = table_rows(out[8])
    assert rows[0].endswith(": fib") and all("ipykernel_" in n for n in rows), rows
    # --show-host lists the kernel's functions
    assert any(n.startswith("IPython/") for n in table_rows(out[9]))
    # no warning in any cell's output (IPython's "Consider using IPython.display.IFrame")
    stderr = [o["text"] for c in nb.cells for o in c.get("outputs", [])
              if o["output_type"] == "stream" and o["name"] == "stderr"]
    assert not stderr
