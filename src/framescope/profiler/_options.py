"""A profile's options checked and worked out before a session starts: paths and globs, the
backend, byte sizes, the bounds of the trace filters, what the core is told about threads and
framescope's own files."""

from __future__ import annotations

import os
import site
import sys
import sysconfig
import threading
from typing import Literal, Sequence

from framescope import _arguments, _core


Backend = Literal["auto", "frame_hook", "sys.monitoring", "setprofile", "fallback"]


def fspath(path: str | os.PathLike[str], name: str = "path") -> str:
    return _arguments.path(path, name)


def prune_prefixes() -> list[str]:
    """Path prefixes removed from file names: site-packages, the standard library, the cwd."""
    prefixes: list[str] = []
    try:
        prefixes += site.getsitepackages()
    except AttributeError:  # virtualenvs of old pythons
        pass
    user = site.getusersitepackages()
    if isinstance(user, str):
        prefixes.append(user)
    paths = sysconfig.get_paths()
    prefixes += [paths.get("stdlib", ""), paths.get("platstdlib", "")]
    try:
        prefixes.append(os.getcwd())
    except OSError:  # the current directory was deleted: its files keep their whole names
        pass
    return sorted({os.path.realpath(p) for p in prefixes if p} | {p for p in prefixes if p}, key=len, reverse=True)


PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


#: Bounds of the trace filters: depths are counted in 32 bits, durations in signed 64-bit ns.
MAX_DEPTH_LIMIT = 2**32 - 1


MIN_DURATION_LIMIT_NS = 2**63 - 1


#: merge()'s offset: times stay within the core's 62-bit range (|offset| < 2**61).
MERGE_OFFSET_LIMIT_NS = 2**61


# In a forked child, threading keeps the parent's OS id for the thread that forked (3.10-3.13):
# the right one is read once in the child.
_forked_native_ids: dict[int, int] = {}


def _note_forked_thread() -> None:
    _forked_native_ids.clear()
    _forked_native_ids[threading.get_ident()] = threading.get_native_id()


os.register_at_fork(after_in_child=_note_forked_thread)


def native_thread_ids() -> dict[int, int]:
    """Thread ident -> OS thread id of the threads threading knows (pthread ids are reused when a
    thread exits mid-session, OS ids are not). The frames running on every thread are read by
    the core itself when the session starts, with no Python code in between."""
    ids = {t.ident: t.native_id for t in threading.enumerate() if t.ident and t.native_id}
    ids.update((i, n) for i, n in _forked_native_ids.items() if i in ids)
    return ids


#: MemorySample device of Python's allocations (counted with profile_memory, trace.h).
PYTHON_ALLOCATOR_DEVICE = -2


#: How often a session with ``cpu_time=True`` reads each recording thread's CPU clock (the base
#: period: up to 4x longer while every thread's rate of CPU use holds, cpp/core/cpu_sampler.h).
#: A wake-up costs the sampler thread 10-20 us of CPU on the loaded KVM machines measured
#: (bench/analysis_overhead.py), and each one can preempt a recording thread when the cores are
#: busy: 4 ms keeps the direct cost under 0.5% of a core (1 ms measured 2-3.5% of the recording
#: thread's CPU time there, 2 ms 2-7% with the interference).
CPU_SAMPLE_PERIOD_NS = 4_000_000


def has_python_frames(trace: _core.Trace) -> bool:
    """True when ``trace`` names a Python function (symbols with a file: one per code object
    recorded, so few)."""
    return any(trace.symbol(i)[1] for i in range(trace.symbol_count))


def file_globs(patterns: Sequence[str | os.PathLike[str]] | str | None, what: str) -> list[str]:
    """include_files/exclude_files as absolute fnmatch globs (see profile)."""
    if patterns is None:
        return []
    out: list[str] = []
    for text in _arguments.glob_list(what, patterns):
        if text.startswith("<"):  # <string>, <frozen ...>: compiled from no file
            out.append(text)
        elif not any(c in text for c in "*?["):
            path = os.path.normpath(os.path.join(_cwd_for(what, text), text))
            out.append(path.rstrip(os.sep) + os.sep + "*" if os.path.isdir(path) else path)
        elif os.path.isabs(text) or text.startswith("*"):
            out.append(text)
        else:
            out.append(os.path.join(_cwd_for(what, text), text))
    return out


def _cwd_for(what: str, glob: str) -> str:
    """The current directory, which a relative glob is taken from ("" for an absolute one)."""
    if os.path.isabs(glob):
        return ""
    try:
        return os.getcwd()
    except OSError as exc:  # the directory was deleted (or cannot be read)
        raise ValueError(f"{what}: the relative glob {glob!r} is taken from the current "
                         f"directory, which is gone ({exc.strerror}): give an absolute one") \
            from None


_FALLBACK_BACKEND = "sys.monitoring" if sys.version_info >= (3, 12) else "setprofile"


def check_backend(backend: str) -> str:
    if backend in ("auto", "frame_hook", "fallback", "sys.monitoring", "setprofile"):
        return backend
    raise ValueError(
        f"unknown backend {backend!r}: expected 'auto', 'frame_hook', 'sys.monitoring', "
        "'setprofile' or 'fallback'"
    )


def resolve_backend(backend: str) -> tuple[str, str | None]:
    """The backend a session started now uses, and why "auto" chose the fallback (or None).

    "auto" is the frame hook unless another tool's PEP 523 function is installed: chained to,
    that tool could take the hook back at any time (Pyjion, for one, restores CPython's default)
    and every later Python call would be lost, so "auto" leaves the hook to it and records with the
    fallback instead. "frame_hook" chains to it regardless."""
    if backend == "auto":
        owner = _core._foreign_frame_hook()
        if not owner:
            return "frame_hook", None
        return _FALLBACK_BACKEND, (
            f"framescope: another tool's PEP 523 frame hook ({owner}) is installed; Python calls "
            f"are recorded with {_FALLBACK_BACKEND} instead (backend='frame_hook' chains to it)"
        )
    if backend == "fallback":
        return _FALLBACK_BACKEND, None
    return backend, None


_MIN_MEMORY_LIMIT = 256 << 10  # one event chunk


_BYTE_UNITS = {
    "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}


_BYTE_FORMS = "an int of bytes or a string such as '512MiB', '1.5GB', '100000000' (units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"


def parse_memory_limit(limit: object) -> int:
    """Bytes of a ``memory_limit``: an int, or a number with a unit ("1.5GB", "512 MiB").

    Raises TypeError for other types and ValueError, naming the accepted forms, for text that is
    not such a size or a size below one event chunk (256 KiB)."""
    if isinstance(limit, bool) or not isinstance(limit, (int, str)):
        raise TypeError(f"memory_limit must be {_BYTE_FORMS}, not {type(limit).__name__}")
    if isinstance(limit, int):
        value = limit
    else:
        text = limit.strip().lower().replace(" ", "").replace("_", "")
        number, unit = text, "b"
        for suffix in sorted(_BYTE_UNITS, key=len, reverse=True):
            if text.endswith(suffix) and text[: -len(suffix)]:
                number, unit = text[: -len(suffix)], suffix
                break
        try:
            amount = float(number) if any(c in number for c in ".e") else int(number)
            value = int(amount * _BYTE_UNITS[unit])
        except (ValueError, OverflowError):
            raise ValueError(f"memory_limit {limit!r} is not a size: give {_BYTE_FORMS}") from None
    if value < _MIN_MEMORY_LIMIT:
        raise ValueError(f"memory_limit must be at least 256KiB (one event chunk), not {limit!r}")
    if value >= 1 << 63:
        raise ValueError(f"memory_limit {limit!r} is too large")
    return value
