"""framescope attach's checks of the target process, read from /proc before anything touches
it: exists, is the user's, is neither stopped nor traced, runs the same CPython as this
framescope (docs/attach.md). Each failure is one AttachError line."""

from __future__ import annotations

import importlib.machinery
import os
import pwd
import re
import sys
from typing import Any

from framescope.attach._bootstrap import describe


class AttachError(Exception):
    """Why the attach did not happen or did not finish (one line)."""


def status_of(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/status") as f:
            return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    except FileNotFoundError:
        raise AttachError(f"no process {pid}") from None
    except OSError as exc:
        raise AttachError(f"cannot read /proc/{pid}/status: {exc.strerror}") from None


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


_CAP_SYS_PTRACE = 19


def _may_trace_others() -> bool:
    """Whether this process may trace other users' processes: it has CAP_SYS_PTRACE (root
    normally does; a container's root often does not)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> _CAP_SYS_PTRACE & 1)
    except (OSError, ValueError):
        pass
    return os.geteuid() == 0


def check_target(pid: int) -> int:
    """The target's uid, once it is known to be attachable: exists, is the user's (or the
    command runs as root), is neither stopped nor traced. Raises AttachError."""
    if pid <= 0:
        raise AttachError(f"not a process id: {pid}")
    if pid == os.getpid():
        raise AttachError("framescope attach cannot attach to itself")
    status = status_of(pid)
    uid = int(status.get("Uid", "0").split()[0])
    if uid != os.geteuid() and not _may_trace_others():
        raise AttachError(f"process {pid} belongs to user {_user(uid)}; you are "
                          f"{_user(os.geteuid())}: only its user (or one with CAP_SYS_PTRACE) "
                          "can attach")
    state = status.get("State", "")
    if state.startswith("Z") or state.startswith("X"):
        raise AttachError(f"process {pid} has exited (state: {state})")
    tracer = int(status.get("TracerPid", "0") or 0)
    if tracer:
        raise AttachError(f"process {pid} is being traced by process {tracer} (a debugger?): "
                          "detach it first")
    if state.startswith("T") or state.startswith("t"):
        raise AttachError(f"process {pid} is stopped (state: {state}): resume it first "
                          "(kill -CONT)")
    return uid


_LIBPYTHON = re.compile(r"libpython(\d+)\.(\d+)")


def python_version_of(pid: int) -> str | None:
    """"3.12" for a process with libpython3.12 mapped (or a python3.12 executable), None if
    unknown from outside (a statically linked interpreter). Raises AttachError for a process
    that runs no CPython at all."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            maps = f.read()
    except OSError:
        return None  # not readable: gdb finds out
    if (m := _LIBPYTHON.search(maps)) is not None:
        return f"{m.group(1)}.{m.group(2)}"
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        with open(f"/proc/{pid}/exe", "rb") as f:
            image = f.read()
    except OSError:
        return None
    if b"Py_AddPendingCall\0" not in image:
        raise AttachError(f"process {pid} is not a Python process ({exe} has no CPython in it)")
    m = re.search(r"python(\d+)\.(\d+)", os.path.basename(exe))
    return f"{m.group(1)}.{m.group(2)}" if m else None


def our_python() -> str:
    return "%d.%d" % sys.version_info[:2]


def version_mismatch(pid: int, theirs: str, detail: str = "") -> AttachError:
    ours = describe()
    return AttachError(
        f"process {pid} runs Python {theirs}{detail}; this framescope is installed for Python "
        f"{ours['version']} ({ours['cache_tag']}, {sys.executable}): run the framescope of a "
        f"Python {theirs} environment")


def check_abi(pid: int, hello: dict[str, Any]) -> None:
    """The target must load this installation's extension: same version and ABI."""
    ours = describe()
    suffix = next((s for s in importlib.machinery.EXTENSION_SUFFIXES if "cpython" in s),
                  importlib.machinery.EXTENSION_SUFFIXES[0])
    if hello.get("cache_tag") != ours["cache_tag"] or \
            suffix not in hello.get("extension_suffixes", []):
        raise version_mismatch(pid, str(hello.get("version")),
                                f" ({hello.get('cache_tag')}, {hello.get('executable')})")
