"""`framescope run` end to end: runs programs as python would, writes a trace, prints a summary."""

from __future__ import annotations

import json
import os
import pstats
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.trace_checker import check_trace, load_trace
from tests.support.subprocesses import REPO_ROOT


def framescope_run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "framescope", "run", *args],
        capture_output=True, text=True, cwd=cwd, timeout=300,
    )


def write(path: Path, code: str) -> Path:
    path.write_text(textwrap.dedent(code))
    return path


def test_script_runs_as_main_with_argv_and_path(tmp_path: Path) -> None:
    write(tmp_path / "helper_mod.py", "VALUE = 41\n")
    write(tmp_path / "prog.py", """
        import sys
        import helper_mod          # found through sys.path[0] = the script's directory

        def work(n):
            return sum(i * i for i in range(n))

        if __name__ == "__main__":
            print("argv", sys.argv)
            print("result", work(1000), helper_mod.VALUE + 1)
    """)
    out = framescope_run("-o", "t.json", "prog.py", "a", "--flag", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "argv ['prog.py', 'a', '--flag']" in out.stdout
    assert "result 332833500 42" in out.stdout
    assert "prog.py(5): work" in out.stderr  # the summary
    assert "calls" in out.stderr and "self ms" in out.stderr
    data = load_trace(str(tmp_path / "t.json"))
    slices = check_trace(data)
    names = {e["name"] for evs in slices.values() for e in evs}
    assert "prog.py(5): work" in names


def test_exit_code_and_exception_kept(tmp_path: Path) -> None:
    write(tmp_path / "exits.py", "import sys\nsys.exit(3)\n")
    assert framescope_run("exits.py", cwd=tmp_path).returncode == 3
    write(tmp_path / "fails.py", """
        def inner():
            raise ValueError("bad value")
        inner()
    """)
    out = framescope_run("-o", "f.json", "fails.py", cwd=tmp_path)
    plain = subprocess.run([sys.executable, "fails.py"], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == plain.returncode == 1
    # The traceback is python's own, without framescope's or runpy's frames.
    tb = out.stderr[out.stderr.index("Traceback"):].split("\nWall time per function")[0].strip()
    assert tb == plain.stderr.strip()
    assert (tmp_path / "f.json").exists(), "the trace is written even when the program fails"


def test_module_mode(tmp_path: Path) -> None:
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    write(pkg / "__init__.py", "")
    write(pkg / "__main__.py", """
        import sys
        def main():
            print("module main", __name__, sys.argv[1:])
        main()
    """)
    out = framescope_run("-o", "m.json", "-m", "mypkg", "x", "y", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "module main __main__ ['x', 'y']" in out.stdout
    check_trace(load_trace(str(tmp_path / "m.json")))


def test_pstats_output_loads(tmp_path: Path) -> None:
    write(tmp_path / "p.py", "def f():\n    return 1\nfor _ in range(10):\n    f()\n")
    out = framescope_run("-f", "pstats", "-o", "p.prof", "p.py", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    stats = pstats.Stats(str(tmp_path / "p.prof"))
    calls = {func[2]: row[1] for func, row in stats.stats.items()}  # type: ignore[attr-defined]
    assert calls.get("f") == 10


def test_missing_script_is_a_clear_error(tmp_path: Path) -> None:
    out = framescope_run("nope.py", cwd=tmp_path)
    assert out.returncode == 2
    assert "can't open file" in out.stderr
    out = framescope_run(cwd=tmp_path)
    assert out.returncode == 2


def test_unrunnable_targets_exit_as_python_does(tmp_path: Path) -> None:
    (tmp_path / "emptydir").mkdir()
    cases = [(["nope.py"], "[Errno 2] No such file or directory"),
             (["emptydir"], "can't find '__main__' module"),
             (["-m", "nonexist_mod_framescope"], "No module named nonexist_mod_framescope")]
    for args, message in cases:
        python = subprocess.run([sys.executable, *args], capture_output=True, text=True,
                                cwd=tmp_path, timeout=60)
        out = framescope_run("--limit", "0", *args, cwd=tmp_path)
        assert out.returncode == python.returncode, (args, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0] and message in python.stderr, out.stderr
    assert not (tmp_path / "framescope.trace.json").exists()


def test_memory_limit_warning_is_printed_once_naming_the_flags(tmp_path: Path) -> None:
    write(tmp_path / "long_job.py", """
        def f():
            pass
        for _ in range(300_000):
            f()
    """)
    out = framescope_run("--memory-limit", "1MiB", "--limit", "0", "-o", "t.json", "long_job.py",
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("reached its memory limit") == 1, out.stderr  # at the stop
    assert out.stderr.count("recording stops here") == 1, out.stderr  # as it happened
    assert "--on-limit keep_newest" in out.stderr and "--memory-limit" in out.stderr, out.stderr


def test_bundled_example(tmp_path: Path) -> None:
    out = framescope_run("-o", "demo.json", str(REPO_ROOT / "examples" / "demo.py"), "4000", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "levels:" in out.stdout
    data = load_trace(str(tmp_path / "demo.json"))
    slices = check_trace(data)
    names = {e["name"] for evs in slices.values() for e in evs}
    assert {"generate", "aggregate", "report"} <= names
    assert len(slices) >= 2, "the main thread and a worker"
    assert json.dumps(data)  # round-trips
