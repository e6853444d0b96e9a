"""Every public entry point fed wrong types and values: a TypeError, ValueError or (for an index)
IndexError whose message names the argument, never nanobind's signature dump, a value cut short
(a NUL), or a value accepted that fails later when the trace is read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

import framescope
from framescope import _core

_DUMP_MARKERS = ("incompatible function arguments", "Invoked with", "(self,",
                 "The following argument types")


class _NoTruth:
    def __bool__(self) -> bool:
        raise ValueError("the truth value of an array is ambiguous")


class Callable_:
    def __call__(self) -> int:
        return 1


def work() -> int:
    return sum(range(10))


@pytest.fixture(scope="module")
def prof() -> framescope.profile:
    with framescope.profile() as p:
        work()
    return p


def _cases(p: framescope.profile, tmp: Path) -> list[tuple[str, Callable[[], Any], str]]:
    """(what, call, a word the message must have: the argument's name)."""
    t = p.trace
    return [
        ("mark(None)", lambda: framescope.mark(None), "name"),  # type: ignore[arg-type]
        ("mark(5)", lambda: framescope.mark(5), "name"),  # type: ignore[arg-type]
        ("record_function(None)", lambda: framescope.record_function(None), "name"),  # type: ignore[arg-type]
        ("record_memory(None, ...)", lambda: framescope.record_memory(None, 1, 1), "address"),  # type: ignore[arg-type]
        ("record_memory(1, 'x', ...)", lambda: framescope.record_memory(1, "x", 1), "bytes"),  # type: ignore[arg-type]
        ("label_calls(C, 5)", lambda: framescope.label_calls(Callable_, 5), "label"),  # type: ignore[arg-type]
        ("label_calls(C, surrogate)", lambda: framescope.label_calls(Callable_, "\udcff"), "label"),
        ("label_calls(C, NUL)", lambda: framescope.label_calls(Callable_, "lab\0el"), "label"),
        ("label_calls(C())", lambda: framescope.label_calls(Callable_()), "cls"),  # type: ignore[arg-type]
        ("label_calls(5)", lambda: framescope.label_calls(5), "cls"),  # type: ignore[arg-type]
        ("profile(cpu_time=array)", lambda: framescope.profile(cpu_time=_NoTruth()), "cpu_time"),
        ("profile(max_depth=2**70)", lambda: framescope.profile(max_depth=2**70), "max_depth"),
        ("profile(max_depth='3')", lambda: framescope.profile(max_depth="3"), "max_depth"),  # type: ignore[arg-type]
        ("profile(min_duration_ns=2**63)",
         lambda: framescope.profile(min_duration_ns=2**63), "min_duration_ns"),
        ("profile(min_duration_ns=1.5)",
         lambda: framescope.profile(min_duration_ns=1.5), "min_duration_ns"),  # type: ignore[arg-type]
        ("profile(include_files=b'x')",
         lambda: framescope.profile(include_files=b"x"), "include_files"),  # type: ignore[arg-type]
        ("profile(include_files=5)", lambda: framescope.profile(include_files=5), "include_files"),  # type: ignore[arg-type]
        ("profile(include_files=[None])",
         lambda: framescope.profile(include_files=[None]), "include_files"),  # type: ignore[list-item]
        ("profile(include_files=NUL)",
         lambda: framescope.profile(include_files=["/a\0b/*.py"]), "include_files"),
        ("profile(exclude_files=NUL)",
         lambda: framescope.profile(exclude_files=["*.py\0"]), "exclude_files"),
        ("profile(exclude_files=surrogate)",
         lambda: framescope.profile(exclude_files=["/x/\udcff*"]), "exclude_files"),
        ("profile(stream_to=5)", lambda: framescope.profile(stream_to=5), "stream_to"),  # type: ignore[arg-type]
        ("profile(stream_to=NUL)",
         lambda: framescope.profile(stream_to=str(tmp / "a\0.fstrace")), "stream_to"),
        ("profile(memory_limit=[])", lambda: framescope.profile(memory_limit=[]), "memory_limit"),  # type: ignore[arg-type]
        ("profile(on_limit=5)", lambda: framescope.profile(on_limit=5), "on_limit"),  # type: ignore[arg-type]
        ("profile(backend=5)", lambda: framescope.profile(backend=5), "backend"),  # type: ignore[arg-type]
        ("profile(schedule=5)", lambda: framescope.profile(schedule=5), "schedule"),  # type: ignore[arg-type]
        ("profile(on_trace_ready=5)",
         lambda: framescope.profile(on_trace_ready=5), "on_trace_ready"),  # type: ignore[arg-type]
        ("schedule(wait='x')",
         lambda: framescope.schedule(wait="x", warmup=1, active=1), "wait"),  # type: ignore[arg-type]
        ("schedule(active=None)",
         lambda: framescope.schedule(wait=1, warmup=1, active=None), "active"),  # type: ignore[arg-type]
        ("trace_handler(5)", lambda: framescope.trace_handler(5), "dir_name"),  # type: ignore[arg-type]
        ("load(None)", lambda: framescope.load(None), "path"),  # type: ignore[arg-type]
        ("load(max_depth=0)", lambda: framescope.load(str(tmp / "x"), max_depth=0), "max_depth"),
        ("export(surrogate)", lambda: p.export(str(tmp / "\udcff.json")), "path"),
        ("export(5)", lambda: p.export(5), "path"),  # type: ignore[arg-type]
        ("export(b'x.json')", lambda: p.export(b"x.json"), "path"),  # type: ignore[arg-type]
        ("export(format=5)", lambda: p.export(str(tmp / "x.json"), format=5), "format"),  # type: ignore[arg-type]
        ("save(None)", lambda: p.save(None), "path"),  # type: ignore[arg-type]
        ("save(surrogate)", lambda: p.save(str(tmp / "\udcff.fstrace")), "path"),
        ("export_html(max_nodes='x')",
         lambda: p.export_html(str(tmp / "x.html"), max_nodes="x"), "max_nodes"),  # type: ignore[arg-type]
        ("export_chrome_trace(None)", lambda: p.export_chrome_trace(None), "path"),  # type: ignore[arg-type]
        ("merge(offset_ns=2**63)", lambda: p.merge(p, offset_ns=2**63), "offset_ns"),
        ("merge(offset_ns='1')", lambda: p.merge(p, offset_ns="1"), "offset_ns"),  # type: ignore[arg-type]
        ("merge(None)", lambda: p.merge(None), "merge"),  # type: ignore[arg-type]
        ("summary(limit='x')", lambda: p.summary(limit="x"), "limit"),  # type: ignore[arg-type]
        ("summary(sort_by=5)", lambda: p.summary(sort_by=5), "sort_by"),  # type: ignore[arg-type]
        ("key_averages(group_by_stack_n='x')",
         lambda: p.key_averages(group_by_stack_n="x"), "group_by_stack_n"),  # type: ignore[arg-type]
        ("table(sort_by=5)", lambda: p.key_averages().table(sort_by=5), "sort_by"),  # type: ignore[arg-type]
        ("table(row_limit='x')",
         lambda: p.key_averages().table(row_limit="x"), "row_limit"),  # type: ignore[arg-type]
        ("events()['a']", lambda: p.events()["a"], "i"),  # type: ignore[call-overload]
        ("events()[1.5]", lambda: p.events()[1.5], "i"),  # type: ignore[call-overload]
        ("events()[10**30]", lambda: p.events()[10**30], "i"),
        ("events().named(None)", lambda: p.events().named(None), "name"),  # type: ignore[arg-type]
        ("events().children(None)", lambda: p.events().children(None), "parent"),  # type: ignore[arg-type]
        ("events().children(5)", lambda: p.events().children(5), "parent"),  # type: ignore[arg-type]
        ("trace.event(-1)", lambda: t.event(-1), "i"),
        ("trace.event(2**64)", lambda: t.event(2**64), "i"),
        ("trace.event('0')", lambda: t.event("0"), "i"),  # type: ignore[arg-type]
        ("trace.event_object(1.5)", lambda: t.event_object(1.5), "i"),  # type: ignore[arg-type]
        ("trace.symbol(2**32)", lambda: t.symbol(2**32), "s"),
        ("trace.symbol(-1)", lambda: t.symbol(-1), "s"),
        ("trace.detail(-1)", lambda: t.detail(-1), "i"),
        ("trace.detail(None)", lambda: t.detail(None), "i"),  # type: ignore[arg-type]
        ("trace.children(-1)", lambda: t.children(-1), "parent"),
        ("trace.find(None)", lambda: t.find(None), "name"),  # type: ignore[arg-type]
        ("trace.find_events(5)", lambda: t.find_events(5), "name"),  # type: ignore[arg-type]
        ("trace.iter_events('a')", lambda: t.iter_events("a"), "start"),  # type: ignore[arg-type]
        ("trace.merge(None)", lambda: t.merge(None), "other"),  # type: ignore[arg-type]
        ("trace.merge(offset_ns=2**63)", lambda: t.merge(t, 2**63), "offset_ns"),
        ("trace.merge(offset_ns=1.0)", lambda: t.merge(t, 1.0), "offset_ns"),  # type: ignore[arg-type]
        ("trace.export(5)", lambda: t.export(5), "path"),  # type: ignore[arg-type]
        ("trace.export(surrogate)", lambda: t.export(str(tmp / "\udcff.json")), "path"),
        ("trace.export(format=5)", lambda: t.export(str(tmp / "x.json"), 5), "format"),  # type: ignore[arg-type]
        ("trace.export(progress='x')",
         lambda: t.export(str(tmp / "x.json"), None, "x"), "progress"),  # type: ignore[arg-type]
        ("trace.save(None)", lambda: t.save(None), "path"),  # type: ignore[arg-type]
        ("trace.export_chrome_trace(5)", lambda: t.export_chrome_trace(5), "path"),  # type: ignore[arg-type]
        ("Trace.load(None)", lambda: _core.Trace.load(None), "path"),  # type: ignore[arg-type]
        ("Trace.load(surrogate)", lambda: _core.Trace.load("\udcff.fstrace"), "path"),
        ("Trace.deserialize('x')", lambda: _core.Trace.deserialize("x"), "data"),  # type: ignore[arg-type]
    ]


def test_every_entry_point_names_the_wrong_argument(prof: framescope.profile,
                                                     tmp_path: Path) -> None:
    failures = []
    for what, call, word in _cases(prof, tmp_path):
        try:
            call()
        except (TypeError, ValueError, IndexError) as exc:
            text = str(exc)
            if any(m in text for m in _DUMP_MARKERS) or word not in text:
                failures.append(f"{what}: {type(exc).__name__}: {text[:300]}")
        except BaseException as exc:  # noqa: BLE001 - any other kind is a failure here
            failures.append(f"{what}: {type(exc).__name__} (not TypeError/ValueError/IndexError):"
                            f" {str(exc)[:300]}")
        else:
            failures.append(f"{what}: accepted")
        finally:
            owner = _core._session_owner()
            if owner is not None:
                _core._stop(owner, keep=False)
    assert not failures, "\n".join(failures)
    assert not list(tmp_path.iterdir()), "nothing is written for a wrong argument"


def test_nul_in_a_label_is_refused_not_cut() -> None:
    # "lab\0el" used to become "lab" in the trace
    with pytest.raises(ValueError, match="NUL"):
        framescope.label_calls(Callable_, "lab\0el")
    framescope.label_calls(Callable_, "whole label")
    with framescope.profile() as p:
        Callable_()()
    assert any(e.name.startswith("whole label") for e in p.events())


def test_valid_int_likes_still_index(prof: framescope.profile) -> None:
    class Index:
        def __index__(self) -> int:
            return 0

    assert prof.trace.event(Index()) == prof.trace.event(0)  # type: ignore[arg-type]
    assert prof.trace.symbol(Index())  # type: ignore[arg-type]
    assert prof.events()[Index()].index == 0  # type: ignore[call-overload]
    assert prof.events()[-1].index == len(prof.trace) - 1
    assert len(list(prof.trace.iter_events(-5, 2**70))) == len(prof.trace)


def test_flags_are_taken_by_their_truth_as_torch_does() -> None:
    # record_shapes="x" used to reach the core and fail there with the signature of _start()
    with framescope.profile(record_shapes="x", with_stack=1, cpu_time=0) as p:  # type: ignore[arg-type]
        work()
    assert p.record_shapes is True and p.with_stack is True and p.cpu_time is False
    assert any(e.name.endswith("work") for e in p.events())


def test_include_files_bytes_message_says_bytes() -> None:
    with pytest.raises(TypeError) as info:
        framescope.profile(include_files=b"x")  # type: ignore[arg-type]
    assert "bytes" in str(info.value) and "not int" not in str(info.value)


def test_cli_max_depth_out_of_range_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "p.py").write_text("print('ran')\n")
    out = subprocess.run([sys.executable, "-m", "framescope", "run", "--max-depth",
                          "99999999999999999999999", "p.py"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "--max-depth" in out.stderr and "Traceback" not in out.stderr
    assert "ran" not in out.stdout  # refused before the program runs
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


DELETED_CWD = """
import os, sys, framescope
os.makedirs("gone")
os.chdir("gone")
os.rmdir(os.path.abspath("."))
def work():
    return 1
with framescope.profile() as p:
    work()
assert any(e.name.endswith("work") for e in p.events())
p.export(sys.argv[1])
try:
    framescope.profile(include_files=["*.py", "rel/*.py"])
except ValueError as e:
    print("ValueError:", e)
print("ok")
"""


def test_a_session_started_in_a_deleted_directory(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(DELETED_CWD)
    out = subprocess.run([sys.executable, str(tmp_path / "prog.py"),
                          str(tmp_path / "t.json")], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "ok" in out.stdout
    assert os.path.getsize(tmp_path / "t.json") > 0
    assert "ValueError: include_files: the relative glob 'rel/*.py'" in out.stdout
    assert "current directory, which is gone" in out.stdout
