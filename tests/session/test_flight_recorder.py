"""Flight recorder: keep_newest sessions dumped while they run (profile.dump/snapshot, framescope
run --dump-on SIGNAL, unhandled exceptions)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import framescope
from framescope.profiler._flight_recorder import dump_path, parse_signal
from tests.support.programs import RECORDING_ON_SIGUSR1
from tests.support.trace_checker import check_trace, load_trace


def numbered(i: int) -> int:
    return i


def test_dump_writes_the_newest_window_and_the_session_goes_on(tmp_path: Path) -> None:
    with framescope.profile(on_limit="keep_newest", memory_limit="1MiB") as prof:
        for i in range(150_000):
            numbered(i)
        with framescope.record_function("before_dump"):
            pass
        prof.dump(tmp_path / "window.json")
        assert framescope.is_enabled(), "dump() does not stop the session"
        snap = prof.snapshot()
        with framescope.record_function("after_dump"):
            numbered(-1)
    data = load_trace(str(tmp_path / "window.json"))
    check_trace(data)
    names = [e["name"] for e in data["traceEvents"] if e.get("ph") == "X"]
    calls = [n for n in names if n.endswith(": numbered")]
    assert "before_dump" in names and "after_dump" not in names
    # the newest events fit the limit, the oldest went: far fewer than all the calls made
    assert 0 < len(calls) < 150_000
    assert snap.trace.dropped_events > 0
    assert any("older than the kept window" in w for w in snap.warnings)
    # the snapshot is a stopped profile of its own
    keys = {e.key for e in snap.key_averages()}
    assert "before_dump" in keys and "after_dump" not in keys
    # the session went on: the final trace has what came after the dump
    assert prof.events().named("after_dump")


def test_dump_keeps_frames_open_at_the_dump_as_open_slices(tmp_path: Path) -> None:
    def outer() -> None:
        with framescope.profile() as prof:
            inner(prof)

    def inner(prof: framescope.profile) -> None:
        prof.dump(tmp_path / "open.json")

    outer()
    data = load_trace(str(tmp_path / "open.json"))
    check_trace(data)
    names = {e["name"] for e in data["traceEvents"] if e.get("ph") == "X"}
    assert any(n.endswith("inner") for n in names) and any(n.endswith("outer") for n in names)


@pytest.mark.parametrize("op", ["dump_json", "dump_html", "dump_prof", "snapshot_summary",
                                "snapshot_key_averages"])
def test_dump_and_snapshot_record_nothing_of_their_own(tmp_path: Path, op: str) -> None:
    # framescope's frames were skipped, but what they called (json, pathlib, importlib, a
    # NamedTuple's constructor...) was recorded as the program's calls.
    paths = {ext: str(tmp_path / f"w{ext}") for ext in (".json", ".html", ".prof")}
    actions = {
        "none": lambda p: None,
        "dump_json": lambda p: p.dump(paths[".json"]),
        "dump_html": lambda p: p.dump(paths[".html"]),
        "dump_prof": lambda p: p.dump(paths[".prof"]),
        "snapshot_summary": lambda p: p.snapshot().summary(by_thread=True, sort_by="on_cpu"),
        "snapshot_key_averages":
            lambda p: p.snapshot().key_averages(group_by_stack_n=2).table(sort_by="cpu_time"),
    }

    def recorded(action: str) -> set[str]:
        prof = framescope.profile(on_limit="keep_newest")
        prof.start()
        numbered(1)
        actions[action](prof)
        numbered(2)  # the thread records again after it
        prof.stop()
        assert sum(1 for e in prof.events() if e.name.endswith(": numbered")) == 2
        # the lambda itself is the test's: compared by the line-free name
        return {e.name.split("): ")[-1] if "<lambda>" in e.name else e.name
                for e in prof.events()}

    assert recorded(op) == recorded("none")


def test_dump_and_snapshot_need_a_running_session(tmp_path: Path) -> None:
    prof = framescope.profile()
    with pytest.raises(RuntimeError, match="recording session"):
        prof.dump(tmp_path / "x.json")
    with prof:
        pass
    with pytest.raises(RuntimeError, match="recording session"):
        prof.snapshot()


def test_dump_paths_and_signals() -> None:
    assert dump_path("trace.json", 1) == "trace.dump1.json"
    assert dump_path("out/t.json.gz", 2) == "out/t.dump2.json.gz"
    assert dump_path("t.speedscope.json", 3) == "t.dump3.speedscope.json"
    assert dump_path("t.pftrace", 1) == "t.dump1.pftrace"
    assert dump_path("noext", 1) == "noext.dump1"
    assert dump_path("report.html", 1) == "report.dump1.html"
    assert parse_signal("SIGUSR1") == signal.SIGUSR1
    assert parse_signal("usr2") == signal.SIGUSR2
    assert parse_signal(str(int(signal.SIGUSR1))) == signal.SIGUSR1
    for bad in ("SIGNOPE", "KILL", ""):
        with pytest.raises(ValueError):
            parse_signal(bad)
    # framescope run ends the program on these (trace written): a dump signal must not take them.
    for ending in ("SIGINT", "TERM", "hup"):
        with pytest.raises(ValueError, match="already ends the program"):
            parse_signal(ending)
    with pytest.raises(ValueError, match="fault"):
        parse_signal("SIGSEGV")


PROGRAM = """
import os, signal, threading

def work(n):
    return sum(range(n))

def crash():
    work(1)
    raise ValueError("thread failed")

for i in range(100000):
    work(10)
os.kill(os.getpid(), signal.SIGUSR1)
for i in range(5):
    work(11)
t = threading.Thread(target=crash, name="crasher")
t.start()
t.join()
print("main goes on")
work(12)
raise KeyError("main failed")
"""


def test_cli_dump_on_signal_and_unhandled_exceptions(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(textwrap.dedent(PROGRAM))
    out = subprocess.run(
        [sys.executable, "-m", "framescope", "run", "--dump-on", "SIGUSR1", "--memory-limit",
         "1MiB", "--limit", "0", "-o", "t.json", "prog.py"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 1, out.stderr  # the program's own status: KeyError
    assert "main goes on" in out.stdout
    assert "Exception in thread crasher" in out.stderr and "KeyError: 'main failed'" in out.stderr
    assert "SIGUSR1: recorded window written to t.dump1.json" in out.stderr
    assert "unhandled ValueError in crasher" in out.stderr
    assert "unhandled KeyError" in out.stderr
    dumps = [load_trace(str(tmp_path / f"t.dump{n}.json")) for n in (1, 2, 3)]
    for d in dumps:
        check_trace(d)

    def work_args(d: dict) -> int:
        return sum(1 for e in d["traceEvents"] if e.get("ph") == "X" and e["name"].endswith("work"))

    # the first dump has the calls before the signal only; each later one has more recent work
    names = [{e["name"] for e in d["traceEvents"] if e.get("ph") == "X"} for d in dumps]
    assert not any(n.endswith("crash") for n in names[0])
    assert any(n.endswith("crash") for n in names[1])
    assert 0 < work_args(dumps[0]) < 100000  # keep_newest within 1 MiB
    final = load_trace(str(tmp_path / "t.json"))
    check_trace(final)


SIGNAL_DURING_DUMP = RECORDING_ON_SIGUSR1 + """

def dump_and_signal_again(path, format=None):
    os.kill(os.getpid(), signal.SIGUSR1)  # its handler runs at the next bytecode: in this dump
    for _ in range(100):
        pass
    real_dump(path, format)

prof.dump = dump_and_signal_again
os.kill(os.getpid(), signal.SIGUSR1)
for _ in range(100):
    pass
prof.stop()
recorder.uninstall()
print("finished")
"""


def test_signal_during_a_dump_does_not_deadlock(tmp_path: Path) -> None:
    # The second signal's handler runs on the dumping thread, inside the dump: it used to wait
    # for the dump's lock forever.
    (tmp_path / "prog.py").write_text(SIGNAL_DURING_DUMP)
    out = subprocess.run([sys.executable, "prog.py"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=60)
    assert out.returncode == 0 and "finished" in out.stdout, out.stderr
    assert ("recorded window written to t.dump1.json (it also answers 1 more SIGUSR1 that "
            "came while it was written)") in out.stderr
    assert not (tmp_path / "t.dump2.json").exists()


def test_cli_bad_dump_signal(tmp_path: Path) -> None:
    (tmp_path / "p.py").write_text("pass\n")
    out = subprocess.run([sys.executable, "-m", "framescope", "run", "--dump-on", "SIGKILL",
                          "p.py"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert out.returncode == 2 and "cannot be caught" in out.stderr
    out = subprocess.run([sys.executable, "-m", "framescope", "run", "--dump-on", "SIGINT",
                          "p.py"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert out.returncode == 2 and "already ends the program" in out.stderr, out.stderr
    assert not os.path.exists(tmp_path / "framescope.trace.json")
