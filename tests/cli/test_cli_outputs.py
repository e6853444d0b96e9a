"""`framescope run -o/-f` output selection, `framescope convert` and `framescope summary`."""

from __future__ import annotations

import gzip
import json
import pstats
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "framescope", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


@pytest.fixture()
def prog(tmp_path: Path) -> Path:
    p = tmp_path / "prog.py"
    p.write_text(textwrap.dedent("""
        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)
        fib(10)
    """))
    return p


def test_gzip_output_is_gzip(prog: Path, tmp_path: Path) -> None:
    r = cli("run", "-o", "x.json.gz", str(prog), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(gzip.open(tmp_path / "x.json.gz").read())
    assert sum(1 for e in doc["traceEvents"] if e.get("name", "").endswith(": fib")) == 177


def test_default_name_follows_the_format(prog: Path, tmp_path: Path) -> None:
    r = cli("run", "-f", "pstats", str(prog), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "framescope.trace.json").exists()
    stats = pstats.Stats(str(tmp_path / "framescope.trace.prof"))
    assert any(k[2] == "fib" for k in stats.stats)  # type: ignore[attr-defined]


def test_extension_picks_the_format_then_convert_and_summary(prog: Path, tmp_path: Path) -> None:
    r = cli("run", "--limit", "0", "-o", "run.fstrace", str(prog), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for out in ("c.pftrace", "c.speedscope.json", "c.collapsed", "c.prof", "c.json.gz"):
        r = cli("convert", "run.fstrace", out, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert (tmp_path / out).stat().st_size > 0
    r = cli("summary", "run.fstrace", cwd=tmp_path)
    assert r.returncode == 0 and ": fib" in r.stdout
    # --limit -1: every row (as torch's row_limit=-1), from `summary` and from `run`
    r = cli("summary", "--limit", "-1", "run.fstrace", cwd=tmp_path)
    assert r.returncode == 0 and ": fib" in r.stdout and ": <module>" in r.stdout, r.stdout
    r = cli("run", "--limit", "-1", "-o", "again.json", str(prog), cwd=tmp_path)
    assert r.returncode == 0 and ": fib" in r.stderr + r.stdout, r.stderr
    r = cli("convert", "missing.fstrace", "x.json", cwd=tmp_path)
    assert r.returncode == 1 and r.stderr == (
        "framescope convert: cannot open 'missing.fstrace': No such file or directory\n")
    r = cli("convert", "run.fstrace", "x.unknown", cwd=tmp_path)
    assert r.returncode == 1 and "cannot tell the format" in r.stderr
    assert r.stderr.rstrip().endswith("or give -f/--format"), r.stderr
    r = cli("convert", "run.fstrace", "x.prof.gz", cwd=tmp_path)
    assert r.returncode == 1 and "use 'x.prof', not 'x.prof.gz'" in r.stderr, r.stderr


def test_bad_output_choice_fails_before_running(prog: Path, tmp_path: Path) -> None:
    r = cli("run", "-o", "x.prof.gz", str(prog), cwd=tmp_path)
    assert r.returncode == 2 and "uncompressed" in r.stderr and not (tmp_path / "x.prof.gz").exists()
    assert "use 'x.prof'" in r.stderr, r.stderr
    r = cli("run", "-o", "x.txt", str(prog), cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.rstrip().endswith("or give -f/--format"), r.stderr
