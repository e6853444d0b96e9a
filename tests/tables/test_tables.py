"""Traces as tables: the Parquet export's schema and values, datasets of ranks read by DuckDB
and Dask, SQL views against key_averages, stragglers, and diffs (framescope.tables)."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import textwrap
import sys
import threading
import time

import pytest

import framescope
from framescope import _core
from framescope.analysis import _host_code

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
duckdb = pytest.importorskip("duckdb")


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def steady() -> int:
    return sum(range(2000))


def hot(n: int) -> int:
    # the function the diff tests slow down: its time is its own (no calls in the loop)
    x = 0
    for i in range(n):
        x += i * i
    return x


def worker() -> None:
    with framescope.record_function("worker_range"):
        fib(12)
        framescope.mark("worker_mark")


def record(tmp_path, name: str = "t", memory: bool = False, hot_n: int = 2000):
    with framescope.profile(profile_memory=memory) as prof:
        th = threading.Thread(target=worker, name="helper")
        th.start()
        for i in range(3):
            with framescope.record_function(f"ProfilerStep#{i}"):
                fib(10)
                with framescope.record_function("outer"):
                    steady()
                    hot(hot_n)
                    bytearray(10000)
        th.join()
    path = tmp_path / f"{name}.fstrace"
    prof.save(str(path))
    return prof, str(path)


def run_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "framescope", *args], capture_output=True,
                          text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"framescope {args}: {proc.returncode}\n{proc.stderr}")
    return proc


def test_schema_and_rows(tmp_path):
    prof, _ = record(tmp_path, memory=True)
    out = tmp_path / "x.parquet"
    prof.export(str(out))
    from framescope.tables import COLUMNS, schema

    got = pq.read_schema(str(out))
    assert got.names == [c[0] for c in COLUMNS]
    assert got.equals(schema()), got
    meta = pq.ParquetFile(str(out)).metadata
    assert meta.row_group(0).column(0).compression == "ZSTD"
    names = [c[0] for c in COLUMNS]
    enc = meta.row_group(0).column(names.index("name")).encodings
    assert any("DICT" in e for e in enc), enc
    t = pq.read_table(str(out))
    slices = [e for e in prof.events() if e.duration_ns >= 0]
    marks = [e for e in prof.events() if e.duration_ns < 0]
    kinds = t.column("kind").to_pylist()
    assert len([k for k in kinds if k not in ("instant", "memory")]) == len(slices)
    assert kinds.count("instant") == len(marks) and "worker_mark" in {m.name for m in marks}
    rows = {r["id"]: r for r in t.to_pylist() if r["id"] >= 0}
    for e in prof.events():
        r = rows[e.index]
        assert r["name"] == e.name
        assert r["start_ns"] == e.start_ns
        assert r["dur_ns"] == max(0, e.duration_ns)
        assert r["depth"] == e.depth
        assert r["parent_id"] == (-1 if e.parent is None else e.parent)
    fib_rows = [r for r in rows.values() if r["qualname"] == "fib"]
    assert fib_rows and all(r["file"] == __file__ and r["kind"] == "python" for r in fib_rows)
    assert {r["line"] for r in fib_rows} == {fib.__code__.co_firstlineno}
    assert any(r["recursive"] for r in fib_rows) and not all(r["recursive"] for r in fib_rows)
    helper = [r for r in rows.values() if r["name"] == "worker_range"]
    assert len(helper) == 1 and helper[0]["thread_name"] == "helper"
    assert all(r["pid"] == os.getpid() for r in rows.values())
    assert all(r["self_ns"] <= r["dur_ns"] for r in rows.values())
    assert any(r["alloc_self_bytes"] >= 10000 for r in rows.values() if r["name"] == "outer")


def test_sql_equals_key_averages(tmp_path):
    prof, path = record(tmp_path)
    # Summaries fold host code (here: pytest's and runpy's frames open when the profile began,
    # framescope's own) into one "[host]" row; the views leave it out.
    folded = _host_code.host_view(prof.trace, fold=True)
    assert folded is not prof.trace
    entries, *_ = _core._key_averages(folded)
    expected = {(e[0], e[13]): (e[5], e[7], e[6]) for e in entries if e[0] != "[host]"}
    for source in (path, str(tmp_path / "t.parquet")):
        if source.endswith(".parquet"):
            prof.export(source)
        df = framescope.sql(source, "SELECT name, is_async, calls, self_ns, total_ns "
                                    "FROM self_time_by_function")
        got = {(r.name, bool(r.is_async)): (int(r.calls), int(r.self_ns), int(r.total_ns))
               for r in df.itertuples()}
        assert got == expected
    # The public key_averages() (µs) agrees too: no range here repeats its parent's name (it
    # names the ProfilerStep#N ranges ProfilerStep*, as torch's).
    ka = {e.key: e for e in prof.key_averages() if e.key not in ("ProfilerStep*", "[host]")}
    t = framescope.sql(path, "SELECT * FROM self_time_by_function "
                             "WHERE name NOT LIKE 'ProfilerStep#%'", result="arrow")
    assert isinstance(t, pa.Table) and t.num_rows == len(ka)
    for r in t.to_pylist():
        e = ka[r["name"]]
        assert e.count == r["calls"]
        assert e.self_cpu_time_total == pytest.approx(r["self_ns"] / 1e3)
        assert e.cpu_time_total == pytest.approx(r["total_ns"] / 1e3)


def test_host_column(tmp_path):
    """The host column marks host code as summaries see it (pytest's and runpy's frames that
    were open when the profile began, framescope's own, what they call), in pyarrow's schema
    and to DuckDB; views leave it out, events and slices keep it, old files without the column
    still open."""
    script = tmp_path / "user_script.py"
    script.write_text("def user_fn():\n    return sum(range(20000))\n\nfor _ in range(5):\n"
                      "    user_fn()\n")
    import runpy

    with framescope.profile() as prof:  # runpy's frames (and what they call) are host code
        runpy.run_path(str(script), run_name="__main__")
    out = tmp_path / "h.parquet"
    prof.export(str(out))
    field = pq.read_schema(str(out)).field("host")
    assert field.type == pa.bool_() and not field.nullable
    con = duckdb.connect()
    ev = f"read_parquet('{out}')"
    host_files = {r[0] for r in con.execute(f"SELECT DISTINCT file FROM {ev} WHERE host").fetchall()}
    assert any("_pytest" in f for f in host_files), host_files
    assert any("runpy" in f for f in host_files), host_files
    assert not any(f == __file__ for f in host_files)
    user = {r[0] for r in con.execute(f"SELECT DISTINCT file FROM {ev} WHERE NOT host").fetchall()}
    assert str(script) in user and not any("_pytest" in f or "runpy" in f for f in user), user
    # As the summary: the host rows' self time is key_averages' "[host]" row.
    entries, *_ = _core._key_averages(_host_code.host_view(prof.trace, fold=True))
    host_self = sum(e[7] for e in entries if e[0] == "[host]")
    names = framescope.sql(str(out), "SELECT name FROM self_time_by_function").name.tolist()
    assert not any("_pytest" in n or "runpy" in n for n in names), names
    assert any(n.endswith(": user_fn") for n in names), names
    # ... and its rows are key_averages()' (host folded into "[host]", left out here).
    got = framescope.sql(str(out), "SELECT name, calls, self_ns, total_ns FROM "
                                   "self_time_by_function WHERE NOT is_async")
    want = {e[0]: (e[5], e[7], e[6]) for e in entries if e[0] != "[host]" and not e[13]}
    assert {r.name: (r.calls, r.self_ns, r.total_ns) for r in got.itertuples()} == want
    by_thread = framescope.sql(str(out), "SELECT sum(self_ns) AS s FROM host_time_by_thread")
    assert int(by_thread.s[0]) == host_self > 0
    all_names = framescope.sql(str(out), "SELECT DISTINCT name FROM slices").name.tolist()
    assert any("_pytest" in n for n in all_names)
    # A file without the column (written before it existed): nothing is host, views work.
    old = tmp_path / "old.parquet"
    pq.write_table(pq.read_table(str(out)).drop_columns(["host"]), str(old))
    n = framescope.sql(str(old), "SELECT count(*) AS n FROM user_slices WHERE host")
    assert int(n.n[0]) == 0
    assert len(framescope.sql(str(old), "SELECT * FROM self_time_by_function")) > len(names)


def test_cli_convert_sql_outputs(tmp_path):
    _, path = record(tmp_path)
    out = tmp_path / "c.parquet"
    run_cli("convert", path, str(out))
    assert pq.read_table(str(out)).num_rows > 0
    q = "SELECT name, calls FROM self_time_by_function WHERE name = 'outer'"
    text = run_cli("sql", str(out), q).stdout
    assert "outer" in text and "(1 row)" in text
    rows = list(csv.reader(io.StringIO(run_cli("sql", path, q, "--csv").stdout)))
    assert rows == [["name", "calls"], ["outer", "3"]]
    assert json.loads(run_cli("sql", str(out), q, "--json").stdout) == [
        {"name": "outer", "calls": 3}]
    steps = json.loads(run_cli("sql", path, "SELECT step_number FROM step_times", "--json").stdout)
    assert [s["step_number"] for s in steps] == [0, 1, 2]
    assert "stragglers" in run_cli("sql", path, "--views").stdout


def test_run_writes_parquet(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("def f():\n    return sum(range(100))\nfor _ in range(5):\n    f()\n")
    out = tmp_path / "run.parquet"
    run_cli("run", "-o", str(out), str(script))
    t = pq.read_table(str(out))
    names = t.column("qualname").to_pylist()
    assert names.count("f") == 5


def test_bad_inputs_one_line(tmp_path):
    _, path = record(tmp_path)
    bad = tmp_path / "bad.fstrace"
    bad.write_bytes(b"not a trace")
    for args in (("sql", str(bad), "SELECT 1"), ("sql", path, "SELEC nonsense"),
                 ("sql", str(tmp_path / "missing.parquet"), "SELECT 1"),
                 ("sql", str(tmp_path), "SELECT 1"), ("diff", str(bad), path)):
        proc = run_cli(*args, check=False)
        assert proc.returncode != 0
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert run_cli("convert", path, check=False).returncode == 2
    with pytest.raises(ValueError):
        framescope.sql(path, "SELECT * FROM no_such_table")


def test_missing_duckdb_message(tmp_path):
    _, path = record(tmp_path)
    code = ("import sys; sys.modules['duckdb'] = None\n"
            "from framescope.cli import main\n"
            f"sys.exit(main(['sql', {path!r}, 'SELECT 1']))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "pip install 'framescope[sql]'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def _job(tmp_path, monkeypatch, ranks: int, slow_rank: int | None) -> list[str]:
    """A synthetic job: one saved trace per rank (the launcher's variables set in turn), five
    steps each with an all_reduce range; `slow_rank`'s steps take 40 times longer. Steps wait
    (sleep) rather than spin: on a loaded machine a spinning step is stretched by preemption,
    a sleeping one less (by its wake-up latency: tens of ms at a load of 30 on 2 cores)."""
    paths = []
    monkeypatch.setenv("WORLD_SIZE", str(ranks))
    for r in range(ranks):
        monkeypatch.setenv("RANK", str(r))
        with framescope.profile() as prof:
            for i in range(5):
                with framescope.record_function(f"ProfilerStep#{i}"):
                    time.sleep(0.4 if r == slow_rank else 0.01)
                    with framescope.record_function("c10d::allreduce_"):
                        steady()
        p = str(tmp_path / f"rank{r}.fstrace")
        prof.save(p)
        paths.append(p)
    return paths


def test_dataset_duckdb(tmp_path, monkeypatch):
    paths = _job(tmp_path, monkeypatch, 3, None)
    out = tmp_path / "ds"
    run_cli("convert", *paths, "--to", str(out))
    assert sorted(os.listdir(out)) == ["rank=0", "rank=1", "rank=2"]
    assert os.listdir(out / "rank=1") == ["part-0.parquet"]
    con = duckdb.connect()
    got = con.execute(
        f"SELECT rank, count(*) FROM read_parquet('{out}/*/*.parquet', hive_partitioning=true) "
        "WHERE name = 'c10d::allreduce_' GROUP BY rank ORDER BY rank").fetchall()
    assert got == [(0, 5), (1, 5), (2, 5)]
    import pyarrow.dataset as ds

    table = ds.dataset(str(out), format="parquet", partitioning="hive").to_table()
    assert table.num_rows == sum(len(framescope.load(p).events()) for p in paths)
    # the merged clock: merge's output has the same start times
    merged = tmp_path / "m.parquet"
    run_cli("merge", *paths, "-o", str(merged))
    assert sorted(pq.read_table(str(merged)).column("start_ns").to_pylist()) == sorted(
        table.column("start_ns").to_pylist())
    # merge -o DIR/ writes the same dataset
    run_cli("merge", *paths, "-o", str(tmp_path / "ds2") + "/")
    assert sorted(os.listdir(tmp_path / "ds2")) == ["rank=0", "rank=1", "rank=2"]
    per_rank = framescope.sql(str(out), "SELECT * FROM collective_time_by_rank")
    assert list(per_rank["rank"]) == [0, 1, 2] and all(per_rank["calls"] == 5)


def test_dataset_dask_equals_duckdb(tmp_path, monkeypatch):
    pytest.importorskip("dask.dataframe")
    pytest.importorskip("distributed")
    paths = _job(tmp_path, monkeypatch, 4, None)
    out = str(tmp_path / "ds")
    run_cli("convert", *paths, "--to", out)
    expected = framescope.sql(out, "SELECT rank, name, count(*) AS calls, sum(self_ns) AS self_ns,"
                                   " sum(dur_ns) AS dur_ns FROM slices GROUP BY rank, name")
    expected = {(int(r.rank), r.name): (int(r.calls), int(r.self_ns), int(r.dur_ns))
                for r in expected.itertuples()}
    # In a process of its own: the Dask client leaves threads behind (its offload executor),
    # which later tests' sessions in this process would record.
    code = textwrap.dedent(f"""
        import json
        import dask.dataframe as dd
        import distributed
        if __name__ == "__main__":
            with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                          dashboard_address=None) as cluster, \\
                    distributed.Client(cluster):
                df = dd.read_parquet({out!r})
                df = df[~df["kind"].isin(["instant", "memory"])]
                df["rank"] = df["rank"].astype("int64")
                agg = df.groupby(["rank", "name"]).agg(
                    {{"id": "count", "self_ns": "sum", "dur_ns": "sum"}}).compute()
            print(json.dumps([[int(k[0]), str(k[1]), int(v["id"]), int(v["self_ns"]),
                               int(v["dur_ns"])] for k, v in agg.iterrows()]))
    """)
    script = tmp_path / "dask_aggregates.py"
    script.write_text(code)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    got = {(r[0], r[1]): (r[2], r[3], r[4]) for r in rows}
    assert got == expected


def test_64_rank_stragglers(tmp_path, monkeypatch):
    paths = _job(tmp_path, monkeypatch, 64, slow_rank=37)
    out = str(tmp_path / "ds")
    from framescope.tables import write_dataset

    written, warnings = write_dataset(paths, out)
    assert [w.rank for w in written] == list(range(64)) and not warnings
    text = run_cli("sql", out, "SELECT rank FROM stragglers(1000)", "--csv").stdout
    assert text.split() == ["rank", "37"]
    steps = framescope.sql(out, "SELECT * FROM step_time_by_rank")
    assert len(steps) == 64 and set(steps["steps"]) == {5}


RUNS = r"""
import sys, threading, framescope
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
def steady():
    return sum(range(2000))
def hot(n):
    x = 0
    for i in range(n):
        x += i * i
    return x
prefix, hot_n, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for k in range(count):
    with framescope.profile() as prof:
        th = threading.Thread(target=fib, args=(12,))
        th.start()
        for i in range(3):
            with framescope.record_function(f"ProfilerStep#{i}"):
                fib(10)
                with framescope.record_function("outer"):
                    steady()
                    hot(hot_n)
        th.join()
    prof.save(f"{prefix}{k}.fstrace")
"""


def _record_runs(tmp_path, name: str, hot_n: int, count: int) -> list[str]:
    prefix = str(tmp_path / name)
    subprocess.run([sys.executable, "-c", RUNS, prefix, str(hot_n), str(count)], check=True,
                   timeout=300)
    return [f"{prefix}{k}.fstrace" for k in range(count)]


def test_diff_ranks_slowed_function_first(tmp_path):
    # hot() runs 500x longer in B: ~100 ms, far above what threads waiting on a loaded machine
    # add to other names; four runs a side keep the noise test sure of it even when the load
    # stretches B's runs unevenly. Recorded in a fresh process: an idle thread left by an
    # earlier test (a thread pool's worker) would be recorded too, its wait as long as each
    # session, and in a one-run diff its change rivals the slowed function's.
    runs_a = _record_runs(tmp_path, "a", 2000, 4)
    runs_b = _record_runs(tmp_path, "b", 1_000_000, 4)
    from framescope.tables import diff

    rows = diff(runs_a[:1], runs_b[:1])
    assert rows[0].name.endswith(": hot"), [r.name for r in rows[:3]]
    assert rows[0].delta("self_ns") > 0 and rows[0].changed["self_ns"] is None
    rows = diff(runs_a, runs_b)
    assert rows[0].changed["self_ns"] is True
    quiet = [r for r in rows if r.name.endswith(": steady")]
    assert quiet and quiet[0].changed["calls"] is False
    proc = run_cli("diff", ",".join(runs_a), ",".join(runs_b), "--csv")
    table = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert table[0]["name"] == rows[0].name and table[0]["self_ns_beyond_noise"] == "true"
    # parquet inputs give the same order
    pa_a, pa_b = str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")
    framescope.load(runs_a[0]).export(pa_a)
    framescope.load(runs_b[0]).export(pa_b)
    text = run_cli("diff", pa_a, pa_b).stdout
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("name "))
    assert rows[0].name[:50] in lines[head + 1]
    html_out = tmp_path / "diff.html"
    run_cli("report", "--diff", ",".join(runs_a), ",".join(runs_b), "-o", str(html_out))
    page = html_out.read_text()
    assert "<table" in page
    assert json.dumps(rows[0].name)[1:-1].replace("<", "\\u003c") in page  # escaped in <script>


def test_batches_and_row_groups(tmp_path):
    """Batches of any size give the same table (rows split across row groups), and a sink
    error ends the replay with that error."""
    prof, _ = record(tmp_path, memory=True)
    from framescope.tables import _parquet

    whole = tmp_path / "whole.parquet"
    _parquet.write_parquet(prof.trace, str(whole))
    small = tmp_path / "small.parquet"
    _parquet.write_batches(prof.trace, lambda k: str(small), batch_rows=7)
    assert pq.ParquetFile(str(small)).num_row_groups > 10
    assert pq.read_table(str(small)).equals(pq.read_table(str(whole)))

    def bad(batch):
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        _core._column_batches(prof.trace, bad, 5, 0)
    with pytest.raises(ValueError):
        _core._column_batches(prof.trace, bad, 0, 0)


def test_missing_pyarrow_message(tmp_path):
    _, path = record(tmp_path)
    out = tmp_path / "x.parquet"
    code = ("import sys; sys.modules['pyarrow'] = None\n"
            "from framescope.cli import main\n"
            f"sys.exit(main(['convert', {path!r}, {str(out)!r}]))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 1 and not out.exists()
    assert "pip install 'framescope[parquet]'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
