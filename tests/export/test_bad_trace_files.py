"""Malformed trace files given to ``framescope report`` and ``framescope merge``: one clear line
naming the file and what is wrong, a non-zero status, never a traceback or an unbounded
allocation."""

from __future__ import annotations

import gzip
import json
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

import framescope
from framescope import cli
from framescope.processes import _process_table as processes


def _event(**fields: Any) -> dict[str, Any]:
    e: dict[str, Any] = {"ph": "X", "name": "f", "cat": "python", "pid": 1, "tid": 1,
                         "ts": 1.0, "dur": 2.0}
    e.update(fields)
    return e


def _run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    status = cli.main(argv)
    return status, capsys.readouterr().err


def _one_clear_line(err: str, *words: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and "Error:" not in err.split(":", 1)[0], err
    for word in words:
        assert word in lines[0], err


CHROME_CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    "ts_null": (json.dumps([_event(ts=None)]), ("'ts' is null",)),
    "ts_infinity": ('{"traceEvents": [{"ph": "X", "name": "f", "pid": 1, "tid": 1, '
                    '"ts": Infinity, "dur": 1}]}', ("'ts' is inf",)),
    "ts_nan": ('[{"ph": "X", "name": "f", "pid": 1, "tid": 1, "ts": NaN, "dur": 1}]',
               ("'ts' is nan",)),
    "ts_huge": (json.dumps([_event(ts=1e300)]), ("'ts'",)),
    "ts_text": (json.dumps([_event(ts="soon")]), ("'ts'", "soon")),
    "ts_bool": (json.dumps([_event(ts=True)]), ("'ts'", "bool")),
    "begin_ts_null": (json.dumps([{"ph": "B", "name": "a", "pid": 1, "tid": 1, "ts": None},
                                  {"ph": "E", "pid": 1, "tid": 1, "ts": 5}]), ("'ts' is null",)),
    "dur_null": (json.dumps([_event(dur=None)]), ("'dur' is null",)),
    "dur_list": (json.dumps([_event(dur=[1])]), ("'dur'", "list")),
    "pid_list": (json.dumps([_event(pid=[1, 2])]), ("'pid'", "list")),
    "tid_object": (json.dumps([_event(tid={"a": 1})]), ("'tid'", "dict")),
    "thread_name_args_string": (json.dumps([_event(), {"ph": "M", "name": "thread_name",
                                                       "pid": 1, "tid": 1, "args": "main"}]),
                                ("'args' must be an object",)),
    "process_name_args_list": (json.dumps([_event(), {"ph": "M", "name": "process_name",
                                                      "pid": 1, "args": [1]}]),
                               ("'args' must be an object",)),
    "python_id_list": (json.dumps([_event(args={"Python id": [1]})]), ("Python id",)),
    "python_parent_id_object": (json.dumps([_event(args={"Python id": 1,
                                                         "Python parent id": {}})]),
                                ("Python parent id",)),
    "deep_nesting": ("[" * 100_000 + "]" * 100_000, ("nested too deeply",)),
    "deep_nesting_in_events": ('{"traceEvents": ' + "[" * 100_000 + "]" * 100_000 + "}",
                               ("nested too deeply",)),
}


@pytest.mark.parametrize("case", sorted(CHROME_CASES))
def test_report_on_a_malformed_chrome_trace(tmp_path: Path, case: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    text, words = CHROME_CASES[case]
    path = tmp_path / f"{case}.json"
    path.write_text(text)
    status, err = _run_cli(["report", str(path), "-o", str(tmp_path / "r.html")], capsys)
    assert status == 1
    _one_clear_line(err, f"{case}.json", *words)
    assert not (tmp_path / "r.html").exists()


def test_report_on_damaged_gzip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    whole = gzip.compress(json.dumps([_event()] * 200).encode())
    (tmp_path / "cut.json.gz").write_bytes(whole[: len(whole) // 2])
    status, err = _run_cli(["report", str(tmp_path / "cut.json.gz")], capsys)
    assert status == 1
    _one_clear_line(err, "cut.json.gz", "truncated")
    (tmp_path / "bad.json.gz").write_bytes(b"\x1f\x8b" + b"not deflate" * 10)
    status, err = _run_cli(["report", str(tmp_path / "bad.json.gz")], capsys)
    assert status == 1
    _one_clear_line(err, "bad.json.gz", "gzip")


def test_report_ignores_odd_fields_it_does_not_use(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # args of a slice as a string, warnings that are not a list, events of other phases with
    # odd fields: none of it is read, the report is written.
    doc = {"traceEvents": [_event(args="text"), {"ph": "C", "ts": None, "pid": [1]}, 5,
                           _event(name="g", ts=10.0, dur=1.0)],
           "otherData": {"warnings": 5}}
    (tmp_path / "odd.json").write_text(json.dumps(doc))
    status, err = _run_cli(["report", str(tmp_path / "odd.json"), "-o",
                            str(tmp_path / "odd.html")], capsys)
    assert status == 0, err
    assert (tmp_path / "odd.html").stat().st_size > 0


# ---- merge ------------------------------------------------------------------------------------


def _work() -> int:
    return 1


@pytest.fixture(scope="module")
def base_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("merge") / "base.fstrace"
    with framescope.profile() as prof:
        _work()
    prof.save(str(path))
    return path


def _variant(base: Path, out: Path, mutate: Callable[[dict[str, Any]], None]) -> Path:
    prof = framescope.load(base)
    (entry,) = [e for e in processes.read(prof.trace) if e.metadata]
    mutate(entry.metadata)
    processes.set_entry(prof.trace, entry)
    prof.save(str(out))
    return out


def _clock(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda meta: meta["clock"].update(fields)


def _rank(world_size: Any) -> Callable[[dict[str, Any]], None]:
    return lambda meta: meta.__setitem__("rank", {"rank": 0, "world_size": world_size})


MERGE_CASES: dict[str, tuple[Callable[[dict[str, Any]], None], tuple[str, ...]]] = {
    "clock_string": (lambda m: m.__setitem__("clock", "abc"), ("clock is 'abc'",)),
    "clock_null": (lambda m: m.__setitem__("clock", None), ("clock is None",)),
    "offset_infinite": (_clock(measured=[{"at_ns": 0, "offset_ns": float("inf"),
                                          "error_ns": 1}]), ("measured[0].offset_ns is inf",)),
    "offset_string": (_clock(measured=[{"at_ns": 0, "offset_ns": "5", "error_ns": 1}]),
                      ("measured[0].offset_ns",)),
    "error_missing": (_clock(measured=[{"at_ns": 0, "offset_ns": 5}]), ("has no error_ns",)),
    "error_null": (_clock(measured=[{"at_ns": 0, "offset_ns": 5, "error_ns": None}]),
                   ("error_ns is None",)),
    "measured_string": (_clock(measured="x"), ("clock.measured",)),
    "start_pair_null": (_clock(start=[None, 1]), ("clock.start[0]",)),
    "stop_not_pair": (_clock(stop=5), ("clock.stop",)),
    "world_size_list": (_rank([4]), ("world_size is [4]",)),
    "world_size_string": (_rank("4"), ("world_size is '4'",)),
    "world_size_zero": (_rank(0), ("world_size is 0",)),
    "rank_huge": (lambda m: m.__setitem__("rank", {"rank": 10**30, "world_size": 4}),
                  ("rank.rank is 1000000000000000000000000000000",)),
    "rank_negative": (lambda m: m.__setitem__("rank", {"rank": -5, "world_size": 4}),
                      ("rank.rank is -5", "0..3")),
    "rank_past_world_size": (lambda m: m.__setitem__("rank", {"rank": 7, "world_size": 4}),
                             ("rank.rank is 7",)),
}


@pytest.mark.parametrize("case", sorted(MERGE_CASES))
def test_merge_with_odd_process_metadata(base_trace: Path, tmp_path: Path, case: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    mutate, words = MERGE_CASES[case]
    odd = _variant(base_trace, tmp_path / f"{case}.fstrace", mutate)
    status, err = _run_cli(["merge", str(base_trace), str(odd), "-o",
                            str(tmp_path / "m.json")], capsys)
    assert status == 1
    _one_clear_line(err, f"{case}.fstrace", "invalid process metadata", *words)
    assert not (tmp_path / "m.json").exists()


def test_merge_with_a_huge_world_size_stays_small(base_trace: Path, tmp_path: Path) -> None:
    # world_size 10**12 used to build set(range(10**12)) until the OOM killer came; here the
    # merge runs with 2 GiB of address space: it must finish, naming the missing ranks briefly.
    odd = _variant(base_trace, tmp_path / "huge.fstrace", _rank(10**12))
    limit = 2 << 30

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    out = subprocess.run([sys.executable, "-m", "framescope", "merge", str(odd), "-o",
                          str(tmp_path / "m.json")], capture_output=True, text=True,
                         timeout=120, preexec_fn=cap)
    assert out.returncode == 0, out.stderr[-2000:]
    assert ("no trace of 999999999999 of the 1000000000000 ranks (the first: 1, 2, 3"
            in out.stderr), out.stderr
    assert (tmp_path / "m.json").stat().st_size > 0


def test_merge_lists_a_few_missing_ranks(base_trace: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    odd = _variant(base_trace, tmp_path / "r.fstrace", _rank(3))
    status, err = _run_cli(["merge", str(odd), "-o", str(tmp_path / "m.json")], capsys)
    assert status == 0, err
    assert "no trace of rank(s) [1, 2] of 3" in err
