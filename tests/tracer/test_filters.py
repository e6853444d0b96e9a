"""Record-time filters (include/exclude files), max_depth, min_duration_ns, and framescope's own
frames, which no output ever shows: checked against the unfiltered trace of the same program."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

import framescope
from tests.support.trace_checker import check_trace, load_trace

BACKENDS = ["frame_hook", "fallback"]

APP = """
import lib

def callback(i):
    return i * 2

def run():
    out = []
    for i in range(3):
        out.append(lib.apply(callback, i))
    lib.leaf()
    return out
"""
LIB = """
def apply(fn, x):
    return helper(fn, x)

def helper(fn, x):
    return fn(x) + len([x])

def leaf():
    return sorted([3, 1, 2])
"""


@pytest.fixture
def program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "lib.py").write_text(LIB)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("app", "lib"):
        sys.modules.pop(name, None)
    app = importlib.import_module("app")
    app.run()  # code objects exist and have run once, as in a real program
    yield app
    for name in ("app", "lib"):
        sys.modules.pop(name, None)


def short(name: str) -> str:
    return name.rsplit(": ", 1)[-1].split(".")[-1]


def tree(prof: framescope.profile, keep: set[str]) -> list[tuple[str, str | None]]:
    """(event, nearest enclosing event kept) for every event whose short name is in ``keep``,
    in order: the unfiltered trace with the other events taken out."""
    events = list(prof.events())
    out = []
    for e in events:
        if short(e.name) not in keep:
            continue
        p = e.parent
        while p is not None and short(events[p].name) not in keep:
            p = events[p].parent
        out.append((short(e.name), short(events[p].name) if p is not None else None))
    return out


def run_in(app: Any, **kwargs: Any) -> framescope.profile:
    with framescope.profile(**kwargs) as prof:
        app.run()
    return prof


@pytest.mark.parametrize("backend", BACKENDS)
def test_exclude_files_leaves_frames_out_and_keeps_their_callees(program: Any, backend: str,
                                                                 tmp_path: Path) -> None:
    full = run_in(program, backend=backend)
    excluded = run_in(program, backend=backend, exclude_files=[str(tmp_path / "lib.py")])
    app_names = {"run", "callback"}
    # Everything of app.py is there, nested as in the full trace with lib's frames taken out.
    assert tree(excluded, app_names) == tree(full, app_names)
    names = {short(e.name) for e in excluded.events()}
    assert not names & {"apply", "helper", "leaf"}
    cb = [e for e in excluded.events() if short(e.name) == "callback"]
    assert len(cb) == 3 and all(short(excluded.events()[e.parent].name) == "run" for e in cb)
    check_trace(_exported(excluded, tmp_path))


@pytest.mark.parametrize("backend", BACKENDS)
def test_include_files_records_only_matching_files(program: Any, backend: str,
                                                   tmp_path: Path) -> None:
    full = run_in(program, backend=backend)
    only_lib = run_in(program, backend=backend, include_files=["*/lib.py"])
    lib_names = {"apply", "helper", "leaf"}
    assert tree(only_lib, lib_names) == tree(full, lib_names)
    python = {short(e.name) for e in only_lib.events() if e.category == "python_function"}
    assert python == lib_names
    # a directory without wildcards: every file under it
    in_dir = run_in(program, backend=backend, include_files=[str(tmp_path)])
    assert {short(e.name) for e in in_dir.events() if e.category == "python_function"} == (
        lib_names | {"run", "callback"})
    assert not any("include_files" in w for w in only_lib.warnings + in_dir.warnings)
    # a glob that matches nothing that ran: an empty trace, and a warning saying why
    nothing = run_in(program, backend=backend, include_files=["nowhere/*.py"])
    assert not [e for e in nothing.events() if e.category == "python_function"]
    assert any("include_files matched no Python frame" in w and "nowhere" in w
               for w in nothing.warnings), nothing.warnings


@pytest.mark.parametrize("backend", BACKENDS)
def test_builtins_of_excluded_frames_are_not_recorded(program: Any, backend: str,
                                                      tmp_path: Path) -> None:
    prof = run_in(program, backend=backend, c_calls=True, exclude_files=[str(tmp_path / "lib.py")])
    builtins = {e.name for e in prof.events() if e.category == "python_function"
                and e.name.startswith("<built-in")}
    assert not any("sorted" in b or "len" in b for b in builtins), builtins  # called in lib.py
    assert any("append" in b for b in builtins), builtins  # called in app.py


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_depth_keeps_the_outer_levels(program: Any, backend: str) -> None:
    def in_thread(**kwargs: Any) -> tuple[framescope.profile, list[Any]]:
        t = threading.Thread(target=program.run)
        with framescope.profile(backend=backend, **kwargs) as prof:
            t.start()
            t.join()
        (index,) = [i for i, th in enumerate(prof.trace.threads) if th[1] == t.native_id]
        return prof, [e for e in prof.events() if e.thread == index]

    def depth_of(prof: framescope.profile, e: Any) -> int:
        events, d, p = prof.events(), 0, e.parent
        while p is not None:
            d += events[p].category == "python_function"
            p = events[p].parent
        return d

    full, full_events = in_thread()
    # With the thread's roots (_bootstrap, _bootstrap_inner, Thread.run), app.run and lib.apply
    # lie above helper: five levels (the 3.10/3.11 setprofile backend loses the thread's roots,
    # issue 14, so fewer there). Cut at helper's depth: helper and callback go.
    cut = min(depth_of(full, e) for e in full_events if short(e.name) == "helper")
    limited, limited_events = in_thread(max_depth=cut)
    names = {short(e.name) for e in limited_events}
    assert "apply" in names and "leaf" in names and not names & {"helper", "callback"}
    expected = {(e.name, depth_of(full, e)) for e in full_events if depth_of(full, e) < cut}
    assert {(e.name, depth_of(limited, e)) for e in limited_events} == expected
    with pytest.raises(ValueError, match="max_depth"):
        framescope.profile(max_depth=0)


def test_min_duration_drops_short_slices_and_keeps_marks(program: Any, tmp_path: Path) -> None:
    def marked() -> None:
        framescope.mark("inside")

    with framescope.profile() as full:
        program.run()
        marked()
    durations = sorted(e.duration_ns for e in full.events() if e.duration_ns >= 0)
    cut = durations[len(durations) // 2]  # about half the slices are shorter
    with framescope.profile(min_duration_ns=cut) as prof:
        program.run()
        marked()
    kept = list(prof.events())
    assert all(e.duration_ns >= cut for e in kept if e.duration_ns >= 0)
    assert [e.name for e in kept if e.duration_ns < 0] == ["__start_profile", "inside",
                                                            "__stop_profile"]
    for e in kept:  # parents and depths renumbered consistently
        if e.parent is not None:
            p = kept[e.parent]
            assert p.thread == e.thread and p.start_ns <= e.start_ns and p.depth + 1 == e.depth
    check_trace(_exported(prof, tmp_path))
    assert len(prof.key_averages()) <= len(full.key_averages())
    # the same filter over a saved trace
    full.save(tmp_path / "full.fstrace")
    loaded = framescope.load(tmp_path / "full.fstrace", min_duration_ns=cut)
    assert all(e.duration_ns >= cut for e in loaded.events() if e.duration_ns >= 0)
    assert len(loaded.events()) < len(full.events())


def _exported(prof: framescope.profile, tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "trace.json"
    prof.export(path)
    return load_trace(str(path))


FRAMESCOPE_PROGRAM = """
import sys, threading
import framescope

def work(i):
    return sorted(range(i))

def main(out):
    def ready(p):
        p.key_averages().table()
        p.summary()
    prof = framescope.profile(schedule=framescope.schedule(wait=0, warmup=1, active=2),
                              on_trace_ready=ready, backend=sys.argv[1], c_calls=True,
                              on_limit="keep_newest", memory_limit="8MiB")
    with prof:
        for i in range(5):
            work(i)
            if i == 2:
                prof.snapshot().key_averages()
                prof.dump(out)
            prof.step()
    return prof

prof = main(sys.argv[2])
names = sorted({e.name for e in prof.events()})
snap = framescope.load(sys.argv[2]) if sys.argv[2].endswith(".fstrace") else None
print("NAMES", repr(names))
print("DUMP", repr(sorted({e.name for e in snap.events()})))
"""


@pytest.mark.parametrize("backend", ["frame_hook", "fallback"])
def test_framescope_frames_never_appear(tmp_path: Path, backend: str) -> None:
    """start, step, snapshot, dump and stop run inside the session; none of their frames, nor
    their builtin calls, nor what they call, is in the trace."""
    script = tmp_path / "prog.py"
    script.write_text(FRAMESCOPE_PROGRAM)
    out = subprocess.run([sys.executable, str(script), backend, str(tmp_path / "d.fstrace")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    for key in ("NAMES", "DUMP"):
        names = eval(lines[key])  # noqa: S307 - our own output
        allowed = {"__start_profile", "__stop_profile", "ProfilerStep#1", "ProfilerStep#2",
                   "ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5"}
        for n in names:
            assert n in allowed or "prog.py" in n or n.startswith("<built-in method") and (
                "sorted" in n or "range" in n), (key, n)
        assert any("prog.py" in n and n.endswith("work") for n in names)


def test_cli_trace_starts_with_the_program(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text("def f():\n    return 1\nf()\n")
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text("def g():\n    return 2\ng()\n")
    for target in (["prog.py"], ["-m", "mypkg"], ["--backend", "fallback", "--c-calls", "prog.py"]):
        out = subprocess.run([sys.executable, "-m", "framescope", "run", "-o", "t.json",
                              "--limit", "0", *target], capture_output=True, text=True,
                             cwd=tmp_path, timeout=120)
        assert out.returncode == 0, out.stderr
        data = load_trace(str(tmp_path / "t.json"))
        check_trace(data)
        slices = [e for e in data["traceEvents"] if e.get("ph") == "X"]
        names = {e["name"] for e in slices}
        assert not [n for n in names if "framescope" in n or "runpy" in n or "cli.py" in n], names
        roots = [e["name"] for e in slices if e["name"].endswith("<module>")]
        assert roots and all(r.startswith(("prog.py", "mypkg/__main__.py")) for r in roots), roots


def test_cli_filter_options(tmp_path: Path) -> None:
    (tmp_path / "lib.py").write_text(LIB)
    (tmp_path / "app.py").write_text(APP + "\nrun()\n")
    out = subprocess.run([sys.executable, "-m", "framescope", "run", "-o", "t.json", "--limit",
                          "0", "--exclude-files", "lib.py", "--max-depth", "2",
                          "--min-duration", "0ns", "app.py"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    names = {e["name"] for e in load_trace(str(tmp_path / "t.json"))["traceEvents"]
             if e.get("ph") == "X"}
    assert any(n.endswith(": run") for n in names)
    assert not any(n.endswith(("apply", "helper", "leaf")) for n in names)
    assert not any(n.endswith("callback") for n in names)  # the third level
    bad = subprocess.run([sys.executable, "-m", "framescope", "run", "--min-duration", "soon",
                          "app.py"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert bad.returncode == 2 and "--min-duration" in bad.stderr
    bad = subprocess.run([sys.executable, "-m", "framescope", "run", "--max-depth", "0",
                          "app.py"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert bad.returncode == 2 and "--max-depth" in bad.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_thread_names_kept_when_threading_is_left_out(backend: str) -> None:
    """Thread._bootstrap's frames are where a thread's start (and name) is seen: leaving
    threading.py out of the trace must not lose the names of threads that finished."""
    import threading

    def work() -> None:
        sum(range(1000))

    with framescope.profile(backend=backend, exclude_files=["*/threading.py"]) as prof:
        for i in range(3):
            t = threading.Thread(target=work, name=f"worker-{i}")
            t.start()
            t.join()
    names = {name for _pid, _tid, _index, name in prof.trace.threads}
    assert {"worker-0", "worker-1", "worker-2"} <= names, names
    assert not [e for e in prof.events() if "threading.py" in e.name]
    assert len([e for e in prof.events() if e.name.endswith("work")]) == 3
