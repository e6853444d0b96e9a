"""Outputs that are not regular files (issue 31, item 1): a device node, a FIFO, /dev/stdout or a
/proc/self/fd link is written in place, never replaced by renaming a temporary file over it;
regular files keep their atomic replace. Device nodes are made under tmp_path (mknod, as root),
never the machine's own /dev."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import framescope


def _work() -> int:
    return sum(i for i in range(100))


def _profiled() -> framescope.profile:
    with framescope.profile() as prof:
        for _ in range(20):
            _work()
    return prof


def _char_device(tmp_path: Path, name: str, minor: int) -> Path:
    """A character device like /dev/null (1, 3) or /dev/full (1, 7), made in tmp_path."""
    path = tmp_path / name
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot make a device node here: {exc}")
    try:
        os.close(os.open(path, os.O_WRONLY))
    except OSError as exc:  # a file system mounted nodev
        pytest.skip(f"device nodes do not open in {tmp_path}: {exc}")
    return path


class _FifoReader:
    """Reads everything written to a FIFO, on a thread (the writer's open blocks until then)."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = path
        self.data = b""
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        with open(self.path, "rb") as f:
            self.data = f.read()

    def join(self) -> bytes:
        self.thread.join(60)
        return self.data


def test_export_and_save_into_a_device_keep_the_node(tmp_path: Path) -> None:
    null = _char_device(tmp_path, "null", 3)
    prof = _profiled()
    prof.export(str(null), format="chrome")
    prof.save(str(null))
    prof.export(str(null), format="pstats")
    assert stat.S_ISCHR(os.stat(null).st_mode), "the device node was replaced"
    assert sorted(os.listdir(tmp_path)) == ["null"], "a temporary file was left next to it"


def test_a_full_device_raises_a_clear_error(tmp_path: Path) -> None:
    full = _char_device(tmp_path, "full", 7)
    prof = _profiled()
    with pytest.raises(OSError, match="No space left on device"):
        prof.export(str(full), format="chrome")
    with pytest.raises(OSError, match="No space left on device"):
        prof.save(str(full))
    assert stat.S_ISCHR(os.stat(full).st_mode)


def test_stream_into_a_device_is_refused_before_the_session(tmp_path: Path) -> None:
    for name, minor in (("null", 3), ("full", 7)):
        dev = _char_device(tmp_path, name, minor)
        prof = framescope.profile(stream_to=str(dev))
        try:
            with pytest.raises(OSError, match="not a regular file"):
                prof.start()
        finally:
            if framescope.is_enabled():  # it started: stop it, the test has failed already
                prof.stop()
        assert stat.S_ISCHR(os.stat(dev).st_mode)
    assert sorted(os.listdir(tmp_path)) == ["full", "null"]
    assert not framescope.is_enabled()


def test_export_into_a_fifo(tmp_path: Path) -> None:
    prof = _profiled()
    reader = _FifoReader(tmp_path / "pipe")
    prof.export(str(reader.path), format="chrome")
    doc = json.loads(reader.join())
    assert any(e.get("name", "").endswith("_work") for e in doc["traceEvents"])
    assert stat.S_ISFIFO(os.stat(reader.path).st_mode)
    reader = _FifoReader(tmp_path / "pipe2")
    prof.save(str(reader.path))
    data = reader.join()
    assert stat.S_ISFIFO(os.stat(reader.path).st_mode)
    saved = tmp_path / "copy.fstrace"
    saved.write_bytes(data)
    assert len(framescope.load(saved).events()) == len(prof.events())


def test_regular_files_stay_atomic_and_links_stay_links(tmp_path: Path) -> None:
    prof = _profiled()
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    prof.export(str(link))
    assert link.is_symlink(), "the symbolic link was replaced by a file"
    assert json.loads(target.read_text())["traceEvents"]
    assert sorted(os.listdir(tmp_path)) == ["link.json", "real.json"]


def _convert(*args: str, cwd: Path, stdout: int | None = subprocess.PIPE
             ) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "framescope", *args], cwd=cwd,
                          stdout=stdout, stderr=subprocess.PIPE, timeout=300)


# Runs a command with a /dev of its own: a private mount namespace in which a folder of ours,
# with the usual links and nodes, is mounted over /dev. A regression that renames a file over
# /dev/stdout then replaces our link, never the machine's.
_PRIVATE_DEV = r"""
set -e
d=$(mktemp -d)
ln -s /proc/self/fd "$d/fd"
for i in 0:stdin 1:stdout 2:stderr; do ln -s "/proc/self/fd/${i%%:*}" "$d/${i#*:}"; done
for n in null:3 zero:5 full:7 random:8 urandom:9; do mknod -m 666 "$d/${n%%:*}" c 1 "${n#*:}"; done
mount --bind "$d" /dev
exec "$@"
"""


def _convert_private_dev(*args: str, cwd: Path, stdout: int | None = subprocess.PIPE
                         ) -> subprocess.CompletedProcess[bytes]:
    cmd = ["unshare", "-m", "sh", "-c", _PRIVATE_DEV, "sh", sys.executable, "-m", "framescope",
           *args]
    return subprocess.run(cmd, cwd=cwd, stdout=stdout, stderr=subprocess.PIPE, timeout=300)


def test_cli_outputs_to_dev_stdout_and_proc_fd(tmp_path: Path) -> None:
    probe = subprocess.run(["unshare", "-m", "sh", "-c", _PRIVATE_DEV, "sh", "true"],
                           capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no private mount namespace here: {probe.stderr[-200:]!r}")
    _profiled().save(str(tmp_path / "t.fstrace"))
    # /dev/stdout is the pipe to this test: written through, as a shell redirection would.
    for target in ("/dev/stdout", "/proc/self/fd/1", "/dev/fd/1"):
        out = _convert_private_dev("convert", "-f", "chrome", "t.fstrace", target, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["traceEvents"], target
    # Standard output redirected to a regular file: the file holds the trace.
    with open(tmp_path / "redirected.json", "wb") as f:
        out = _convert_private_dev("convert", "-f", "chrome", "t.fstrace", "/dev/stdout",
                                   cwd=tmp_path, stdout=f.fileno())
    assert out.returncode == 0, out.stderr
    assert json.loads((tmp_path / "redirected.json").read_text())["traceEvents"]
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    assert os.path.islink("/dev/stdout")  # the machine's, untouched


def test_cli_run_convert_merge_into_a_device(tmp_path: Path) -> None:
    null = _char_device(tmp_path, "null", 3)
    (tmp_path / "prog.py").write_text("print(sum(range(1000)))\n")
    for extra in ([], ["--stream"]):
        out = _convert("run", "-f", "chrome", "-o", str(null), *extra, "prog.py", cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert b"could not write" not in out.stderr, out.stderr
        assert stat.S_ISCHR(os.stat(null).st_mode)
    out = _convert("run", "-f", "fstrace", "-o", str(null), "--stream", "prog.py", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert stat.S_ISCHR(os.stat(null).st_mode)
    _profiled().save(str(tmp_path / "t.fstrace"))
    out = _convert("convert", "-f", "chrome", "t.fstrace", str(null), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    out = _convert("merge", "-o", str(null), "-f", "fstrace", "t.fstrace", "t.fstrace",
                   cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert stat.S_ISCHR(os.stat(null).st_mode)
    leftovers = sorted(n for n in os.listdir(tmp_path) if n not in ("null", "prog.py",
                                                                      "t.fstrace"))
    assert leftovers == [], leftovers
