"""Loaded and streamed traces read their events from the file's memory map (issue 31, items 2
and 9): a file truncated or rewritten on disk after load() must give a clear error, never a
SIGBUS or silently other events; load() names a directory as one and reads a trace through a
pipe or FIFO. The scenarios that used to kill the process run in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import framescope


def _record(path: Path, calls: int = 24000) -> int:
    """Saves a trace of about 2 * calls events to `path`; returns its event count."""
    def leaf() -> None:
        pass

    with framescope.profile() as prof:
        for _ in range(calls):
            leaf()
    prof.save(str(path))
    return len(prof.events())


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=300)


_READ_AFTER = """
    import os, sys, framescope
    path, how = sys.argv[1], sys.argv[2]
    p = framescope.load(path)
    n = len(p.events())
    if how == "truncate":
        os.truncate(path, os.path.getsize(path) // 2)
    elif how == "truncate-all":
        os.truncate(path, 0)
    elif how == "rewrite":
        with open(path, "r+b") as f:  # in place: same inode, same size, other bytes
            f.seek(4096)
            f.write(bytes(os.path.getsize(path) - 8192))
    elif how == "replace":
        framescope.load(path).save(path + ".new")
        os.replace(path + ".new", path)
    try:
        got = sum(1 for _ in p.events())
    except OSError as e:
        print("ERROR", e)
        sys.exit(0)
    print("EVENTS", got, n)
"""


@pytest.mark.parametrize("how", ["truncate", "truncate-all", "rewrite"])
def test_a_loaded_file_changed_on_disk_is_an_error(tmp_path: Path, how: str) -> None:
    path = tmp_path / "t.fstrace"
    _record(path)
    out = _run(_READ_AFTER, str(path), how)
    assert out.returncode == 0, f"died ({out.returncode}): {out.stderr[-2000:]}"
    assert out.stdout.startswith("ERROR"), out.stdout
    word = "rewritten" if how == "rewrite" else "truncated"
    assert f"t.fstrace' was {word} after it was loaded" in out.stdout, out.stdout
    assert "load it again" in out.stdout


def test_a_file_replaced_by_rename_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "t.fstrace"
    _record(path)
    out = _run(_READ_AFTER, str(path), "replace")
    assert out.returncode == 0, out.stderr
    _, got, n = out.stdout.split()
    assert got == n


def test_every_reader_checks_the_file(tmp_path: Path) -> None:
    path = tmp_path / "t.fstrace"
    _record(path, 2000)
    out = _run("""
        import os, sys, framescope
        path, out = sys.argv[1], sys.argv[2]
        p = framescope.load(path)
        assert len(p.events()) > 0
        os.truncate(path, os.path.getsize(path) - 16)
        for name, read in (("export", lambda: p.export(out + "/out.json")),
                           ("save", lambda: p.save(out + "/copy.fstrace")),
                           ("summary", lambda: p.summary())):
            try:
                read()
                print(name, "READ")
            except OSError as e:
                print(name, "ERROR", e)
    """, str(path), str(tmp_path))
    assert out.returncode == 0, f"died ({out.returncode}): {out.stderr[-2000:]}"
    lines = out.stdout.splitlines()
    assert len(lines) == 3, out.stdout
    for line in lines:
        assert " ERROR " in line and "was truncated after it was loaded" in line, line
    assert not (tmp_path / "out.json").exists()
    assert not (tmp_path / "copy.fstrace").exists()


def test_a_streamed_trace_is_checked_too(tmp_path: Path) -> None:
    out = _run("""
        import os, sys, framescope
        path = sys.argv[1]

        def leaf():
            pass

        with framescope.profile(stream_to=path) as prof:
            for _ in range(20000):
                leaf()
        assert len(prof.events()) > 0
        os.truncate(path, 4096)
        try:
            list(prof.events())
            print("READ")
        except OSError as e:
            print("ERROR", e)
    """, str(tmp_path / "s.fstrace"))
    assert out.returncode == 0, f"died ({out.returncode}): {out.stderr[-2000:]}"
    assert out.stdout.startswith("ERROR") and "was truncated after it was loaded" in out.stdout


def test_truncated_while_iterating(tmp_path: Path) -> None:
    # Between two steps of the lazy iterator: the next step sees it, before any event of it.
    path = tmp_path / "t.fstrace"
    _record(path, 40000)
    out = _run("""
        import os, sys, framescope
        p = framescope.load(sys.argv[1])
        it = iter(p.events())
        for _ in range(10):
            next(it)
        os.truncate(sys.argv[1], 0)
        try:
            for _ in it:
                pass
        except OSError as e:
            print("ERROR", e)
    """, str(path))
    assert out.returncode == 0, f"died ({out.returncode}): {out.stderr[-2000:]}"
    assert "was truncated after it was loaded" in out.stdout, out.stdout


def test_load_a_directory_says_so(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError, match="is a directory"):
        framescope.load(tmp_path)


def test_load_through_a_fifo_and_a_pipe(tmp_path: Path) -> None:
    path = tmp_path / "t.fstrace"
    n = _record(path, 3000)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    data = path.read_bytes()

    def feed() -> None:
        with open(fifo, "wb") as f:
            f.write(data)

    t = threading.Thread(target=feed, daemon=True)
    t.start()
    p = framescope.load(fifo)
    t.join(60)
    assert len(p.events()) == n
    # bash's process substitution: /dev/fd/63, a pipe.
    out = subprocess.run(
        ["bash", "-c", f'"{sys.executable}" -c "import sys, framescope; '
                       f'print(len(framescope.load(sys.argv[1]).events()))" <(cat "{path}")'],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == n


def test_load_of_a_pipe_that_is_no_trace(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a framescope trace"):
        framescope.load("/dev/zero")  # read only as far as the magic, not forever


def test_record_memory_takes_every_address() -> None:
    with framescope.profile(profile_memory=True) as prof:
        framescope.record_memory(2**64 - 1, 64, 64)
        framescope.record_memory(0, -64, 0)
    with pytest.raises(OverflowError, match="0..2\\*\\*64-1"):
        framescope.record_memory(2**64, 1, 1)
    assert prof is not None


def test_report_through_a_pipe(tmp_path: Path) -> None:
    path = tmp_path / "t.fstrace"
    _record(path, 500)
    framescope.load(path).export(str(tmp_path / "t.json"))
    for source in ("t.fstrace", "t.json"):
        out = subprocess.run(
            ["bash", "-c", f'"{sys.executable}" -m framescope report <(cat {source}) '
                           f'-o {source}.html'],
            capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert "_record" in (tmp_path / f"{source}.html").read_text() or \
            "leaf" in (tmp_path / f"{source}.html").read_text()
