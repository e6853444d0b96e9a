"""Host code (framescope.analysis._host_code): what runs the program (a launcher, a kernel, a test runner,
framescope itself) is recorded but kept out of the tables, marked "host" in traces; names cut from
the left; the summary's time line; framescope's fork hooks unrecorded."""

from __future__ import annotations

import json
import os
import pstats
import re
import runpy
import subprocess
import sys
import textwrap
from typing import Any

import pytest

import framescope
from framescope.analysis import _host_code
from framescope.analysis._names import fit_name

PROGRAM = textwrap.dedent("""
    def hot(n):
        return sum(i * i for i in range(n))

    def main():
        for _ in range(3):
            hot(20000)

    main()
""")


def _run_under_runpy(tmp_path: Any) -> framescope.profile:
    """The program run by runpy (a launcher: host code), as `python -m` or an IDE runs it."""
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    with framescope.profile() as prof:
        runpy.run_path(str(script))
    return prof


def test_classes_of_files() -> None:
    lib = os.path.dirname(os.__file__)
    assert _host_code.classify_file(os.path.join(lib, "runpy.py")) == _host_code.HOST
    assert _host_code.classify_file("<frozen runpy>") == _host_code.HOST
    assert _host_code.classify_file(os.path.join(lib, "tokenize.py")) == _host_code.CALLER
    assert _host_code.classify_file("<string>") == _host_code.CALLER
    assert _host_code.classify_file("/x/lib/python3.12/site-packages/IPython/core/a.py") == \
        _host_code.HOST
    assert _host_code.classify_file("/x/lib/python3.12/site-packages/_pytest/python.py") == \
        _host_code.HOST
    assert _host_code.classify_file("/x/lib/python3.12/site-packages/numpy/core/a.py") == \
        _host_code.CALLER
    assert _host_code.classify_file(framescope.profiler.__file__) == _host_code.HOST
    assert _host_code.classify_file("/home/me/project/app.py") == _host_code.PROGRAM
    assert _host_code.classify_file("/tmp/ipykernel_1/123.py") == _host_code.PROGRAM
    assert _host_code.classify_file("/tmp/ipykernel_1/123.py", ["/tmp/ipykernel_1/123.py"]) == \
        _host_code.HOST


def test_summary_leaves_host_out_and_says_its_total(tmp_path: Any) -> None:
    prof = _run_under_runpy(tmp_path)
    text = prof.summary(limit=-1)
    rows = [line for line in text.splitlines() if line[:10].strip().isdigit()]
    assert rows and not [r for r in rows if "runpy.py" in r or "<frozen runpy>" in r], text
    assert [r for r in rows if r.endswith("prog.py(2): hot")], text
    assert "of the program's code" in text and "ms of it host code" in text and "runpy" in text
    shown = prof.summary(limit=-1, show_host=True)
    assert ("runpy.py" in shown or "frozen runpy" in shown) and "host code" not in shown


def test_key_averages_and_pstats_fold_host(tmp_path: Any) -> None:
    prof = _run_under_runpy(tmp_path)
    keys = [e.key for e in prof.key_averages()]
    assert "[host]" in keys and not [k for k in keys if "runpy.py" in k or "frozen runpy" in k]
    shown = [e.key for e in prof.key_averages(show_host=True)]
    assert [k for k in shown if "runpy.py" in k or "frozen runpy" in k]
    prof.export(str(tmp_path / "p.prof"))
    stats = pstats.Stats(str(tmp_path / "p.prof"))
    funcs = {f[2] for f in stats.stats}  # type: ignore[attr-defined]
    assert "[host]" in funcs and "_run_code" not in funcs and "hot" in funcs


def test_traces_keep_host_as_a_category(tmp_path: Any) -> None:
    prof = _run_under_runpy(tmp_path)
    prof.export(str(tmp_path / "t.json"))
    ev = [e for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"]
          if e.get("ph") == "X"]
    cats = {e["name"]: e["cat"] for e in ev}
    runpy_names = [n for n in cats if "runpy.py" in n or "frozen runpy" in n]
    assert runpy_names and all(cats[n] == "host" for n in runpy_names)
    assert cats[next(n for n in cats if n.endswith(": hot"))] == "python_function"
    # Perfetto: the same category, read by the official protos
    perfetto_pb2 = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    prof.export(str(tmp_path / "t.pftrace"))
    trace = perfetto_pb2.Trace()
    trace.ParseFromString((tmp_path / "t.pftrace").read_bytes())
    interned = {c.name for p in trace.packet if p.HasField("interned_data")
                for c in p.interned_data.event_categories}
    assert "host" in interned and "python_function" in interned
    # drop: the trace starts at the program's code (what the pytest plugin and Jupyter write)
    prof._host_export = "drop"
    prof.export(str(tmp_path / "d.json"))
    ev = [e for e in json.loads((tmp_path / "d.json").read_text())["traceEvents"]
          if e.get("ph") == "X"]
    names = [e["name"] for e in ev]
    assert not [n for n in names if "runpy.py" in n or "frozen runpy" in n]
    assert any(n.endswith(": hot") for n in names)
    by_id = {e["args"]["Python id"]: e for e in ev}
    main = next(e for e in ev if e["name"].endswith(": main"))
    parent = by_id.get(main["args"]["Python parent id"])
    assert parent is not None and parent["name"].endswith("<module>")  # re-parented past runpy
    # the saved trace keeps everything, unmarked
    prof.save(str(tmp_path / "t.fstrace"))
    loaded = framescope.load(str(tmp_path / "t.fstrace"))
    assert any("runpy.py" in e.name or "frozen runpy" in e.name for e in loaded.events())


def test_fit_name_keeps_the_function() -> None:
    name = "/home/me/work/project/src/pkg/sub/module.py(215): hot"
    assert fit_name(name, 200) == name
    cut = fit_name(name, 30)
    assert cut.endswith("module.py(215): hot") and cut.startswith("…/") and len(cut) <= 30
    assert fit_name(name, 8).endswith("hot") and len(fit_name(name, 8)) <= 8
    assert fit_name("a.py(1): Very.long_function_name", 12) == "…nction_name"
    assert fit_name("/a/b/c.py(2): f.<locals>.<genexpr>", 22) == "…f.<locals>.<genexpr>"


def test_tables_cut_names_from_the_left(tmp_path: Any, monkeypatch: Any) -> None:
    deep = tmp_path / "project" / "src" / "package_with_a_long_name" / "subpackage"
    deep.mkdir(parents=True)
    (deep / "module_with_a_long_name.py").write_text(
        "def the_hot_function(n):\n    return sum(i * i for i in range(n))\n")
    monkeypatch.syspath_prepend(str(deep))
    import module_with_a_long_name as m  # type: ignore[import-not-found]

    with framescope.profile() as prof:
        m.the_hot_function(20000)
    monkeypatch.setenv("COLUMNS", "100")
    text = prof.summary(limit=5)
    row = next(line for line in text.splitlines() if line.endswith(": the_hot_function"))
    assert row.endswith("long_name.py(1): the_hot_function") and "…" in row, text
    assert len(row) <= 100 and "…" in row
    table = prof.key_averages().table(max_name_column_width=40, row_limit=5)
    row = next(line for line in table.splitlines() if "the_hot_function " in line)
    name = re.split(r"\s{2,}", row.strip())[0]
    assert name.startswith("…") and name.endswith("the_hot_function"), row
    monkeypatch.setenv("COLUMNS", "400")
    wide = prof.key_averages().table(max_name_column_width=None, row_limit=5)
    assert str(deep.relative_to(tmp_path)) in wide or "module_with_a_long_name.py(1)" in wide


def test_time_line_relates_wall_and_thread_time() -> None:
    import threading

    def spin() -> None:
        sum(i for i in range(200000))

    with framescope.profile() as prof:
        threads = [threading.Thread(target=spin) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    last = prof.summary().splitlines()[-1]
    assert " ms wall; " in last and " ms recorded across 4 threads (" in last, last


def test_fork_hooks_are_not_in_the_trace(tmp_path: Any) -> None:
    (tmp_path / "forker.py").write_text(textwrap.dedent("""
        import os
        def work():
            return sum(range(1000))
        for _ in range(2):
            pid = os.fork()
            if pid == 0:
                work()
                os._exit(0)
            os.waitpid(pid, 0)
        work()
    """))
    out = subprocess.run([sys.executable, "-m", "framescope", "run", "-o", "f.json", "--limit", "0",
                          "forker.py"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    names = {e["name"] for e in json.loads((tmp_path / "f.json").read_text())["traceEvents"]
             if e.get("ph") in ("X", "B")}
    assert any(n.endswith(": work") for n in names)
    # what framescope's fork hooks and child save run: secrets (the child's token), json (its
    # marker), signal (its SIGTERM handler), enum (signal's), framescope's own files
    noise = [n for n in names if n.startswith(("secrets.py", "json/", "signal.py", "enum.py",
                                               "framescope/"))]
    assert not noise, noise
