"""framescope.profile: a profiling session of Python calls and native ranges."""

from __future__ import annotations

import os
import site
import sys
import sysconfig
import threading
from types import TracebackType
from typing import Literal

from framescope import _core
from framescope.events import EventList, MemoryEvent

Backend = Literal["auto", "frame_hook", "sys.monitoring", "setprofile", "fallback"]


def _prune_prefixes() -> list[str]:
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
    prefixes.append(os.getcwd())
    return sorted({os.path.realpath(p) for p in prefixes if p} | {p for p in prefixes if p}, key=len, reverse=True)


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


# In a forked child, threading keeps the parent's OS id for the thread that forked (3.10-3.13):
# the right one is read once in the child.
_forked_native_ids: dict[int, int] = {}


def _note_forked_thread() -> None:
    _forked_native_ids.clear()
    _forked_native_ids[threading.get_ident()] = threading.get_native_id()


os.register_at_fork(after_in_child=_note_forked_thread)


def _native_thread_ids() -> dict[int, int]:
    """Thread ident -> OS thread id of the threads threading knows (pthread ids are reused when a
    thread exits mid-session, OS ids are not). The frames running on every thread are read by
    the core itself when the session starts, with no Python code in between."""
    ids = {t.ident: t.native_id for t in threading.enumerate() if t.ident and t.native_id}
    ids.update((i, n) for i, n in _forked_native_ids.items() if i in ids)
    return ids


_FALLBACK_BACKEND = "sys.monitoring" if sys.version_info >= (3, 12) else "setprofile"


def _check_backend(backend: str) -> str:
    if backend in ("auto", "frame_hook", "fallback", "sys.monitoring", "setprofile"):
        return backend
    raise ValueError(
        f"unknown backend {backend!r}: expected 'auto', 'frame_hook', 'sys.monitoring', "
        "'setprofile' or 'fallback'"
    )


def _resolve_backend(backend: str) -> tuple[str, str | None]:
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


def _parse_bytes(limit: int | str) -> int:
    if isinstance(limit, int):
        return limit
    units = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "kb": 1000, "mb": 10**6, "gb": 10**9}
    text = limit.strip().lower()
    for unit, factor in units.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(text)


def _label_torch_modules() -> None:
    torch = sys.modules.get("torch")
    if torch is None:
        return
    try:
        call = torch.nn.Module.__call__
    except AttributeError:
        return
    code = getattr(call, "__code__", None)
    if code is not None:
        _core.label_calls(code, "nn.Module")


def label_calls(cls: type, label: str | None = None) -> None:
    """Show calls of instances of ``cls`` as ``"<label>: <instance class>"`` slices, with the
    frames of the call nested under them (as torch does for ``nn.Module``)."""
    call = getattr(cls, "__call__", None)
    code = getattr(call, "__code__", None)
    if code is None:
        raise TypeError(f"{cls!r} has no Python-level __call__ to label")
    _core.label_calls(code, label or cls.__name__)


class profile:
    """Records Python calls (``with_stack``), ``record_function`` ranges and native C/C++ ranges.

    Keyword names follow ``torch.profiler.profile`` where the meaning matches. Use as a context
    manager or with ``start()``/``stop()``. Only one session runs at a time in a process.

    Args:
        record_shapes: keep the inputs of ranges that provide them.
        profile_memory: keep ``record_memory`` events.
        with_flops: estimate flops of known ops from their input shapes.
        with_stack: record every Python call (from the PEP 523 frame hook).
        c_calls: also record builtins called from Python (sys.monitoring / setprofile).
        backend: where Python calls come from: ``"auto"`` (the frame hook, or the fallback
            when another tool's PEP 523 hook is installed at start, with a warning),
            ``"frame_hook"`` (chains to such a hook), ``"fallback"``, ``"sys.monitoring"``
            (3.12+) or ``"setprofile"`` (3.10/3.11).
        memory_limit: bytes of event buffers (int, or a string such as ``"512MiB"``).
        on_limit: ``"stop"`` keeps the oldest events, ``"keep_newest"`` is a flight recorder.
    """

    def __init__(
        self,
        *,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_flops: bool = False,
        with_stack: bool = True,
        c_calls: bool = False,
        backend: Backend = "auto",
        memory_limit: int | str = "1GiB",
        on_limit: Literal["stop", "keep_newest"] = "stop",
    ) -> None:
        if on_limit not in ("stop", "keep_newest"):
            raise ValueError(f"on_limit must be 'stop' or 'keep_newest', not {on_limit!r}")
        if c_calls and not with_stack:
            raise ValueError("c_calls=True needs with_stack=True")
        self.record_shapes = record_shapes
        self.profile_memory = profile_memory
        self.with_flops = with_flops
        self.with_stack = with_stack
        self.c_calls = c_calls
        self._requested_backend = _check_backend(backend) if with_stack else "none"
        self._backend = self._requested_backend
        self._start_warnings: list[str] = []
        self._memory_limit = _parse_bytes(memory_limit)
        if self._memory_limit <= 0:
            raise ValueError("memory_limit must be positive")
        self._keep_newest = on_limit == "keep_newest"
        self._trace: _core.Trace | None = None
        self._running = False

    # -- session -------------------------------------------------------------------------------
    def start(self) -> profile:
        if self._running:
            raise RuntimeError("this profile is already running")
        self._start_warnings = []
        if self.with_stack:
            _label_torch_modules()
            self._backend, why = _resolve_backend(self._requested_backend)
            if why:
                self._start_warnings.append(why)
        _core._start(
            record_shapes=self.record_shapes,
            profile_memory=self.profile_memory,
            with_flops=self.with_flops,
            backend=self._backend,
            c_calls=self.c_calls,
            prune_prefixes=_prune_prefixes(),
            native_ids=_native_thread_ids() if self.with_stack else None,
            memory_limit=self._memory_limit,
            keep_newest=self._keep_newest,
            # The frame hook does not see framescope's own start frames return: leave them out.
            skip_frames_prefix=_PACKAGE_DIR if self._backend == "frame_hook" else "",
        )
        self._running = True
        return self

    def stop(self) -> profile:
        if not self._running:
            raise RuntimeError("this profile is not running")
        # By native id: pthread ids are reused by threads started after others exited.
        native = _native_thread_ids()
        names = [(native[t.ident], t.name) for t in threading.enumerate() if t.ident in native]
        self._running = False
        self._trace = _core._stop(names)
        for warning in self.warnings:
            print(warning, file=sys.stderr)
        return self

    def __enter__(self) -> profile:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- results -------------------------------------------------------------------------------
    @property
    def trace(self) -> _core.Trace:
        """The replayed trace (after stop)."""
        if self._trace is None:
            raise RuntimeError("no trace yet: stop the profile first")
        return self._trace

    @property
    def backend(self) -> str:
        """Where Python calls came from: "frame_hook", "sys.monitoring", "setprofile", or
        "frame_hook->sys.monitoring" when deep recursion moved the session to the fallback."""
        return self.trace.backend if self._trace is not None else self._backend

    @property
    def warnings(self) -> list[str]:
        """What went differently than asked (backend choice, limits, lost hooks), in order."""
        return self._start_warnings + list(self.trace.warnings)

    def events(self) -> EventList:
        """Every event (Python calls, ranges, builtins, marks) as a lazy sequence."""
        return EventList(self.trace)

    def memory_events(self) -> list[MemoryEvent]:
        """The ``record_memory`` samples of the session (``profile_memory=True``), by time."""
        return [MemoryEvent(*m) for m in self.trace.memory]

    def export_chrome_trace(self, path: str | os.PathLike[str]) -> None:
        """Writes a Chrome trace JSON file (open it in ui.perfetto.dev or chrome://tracing)."""
        self.trace.export_chrome_trace(os.fspath(path))

    def export_pstats(self, path: str | os.PathLike[str]) -> None:
        """Writes a cProfile-compatible stats file (``pstats.Stats(path)`` loads it)."""
        from framescope.export import write_pstats

        write_pstats(self.trace, os.fspath(path))

    def stats(self) -> list[tuple[str, int, int, int]]:
        """(name, calls, total ns, self ns) per function or range, by self time."""
        return [(n, c, t, s) for n, c, t, s, *_ in self.trace.stats()]

    def summary(self, limit: int = 20, sort_by: Literal["self", "total", "calls"] = "self") -> str:
        """A table of the top functions and ranges by self time, total time or call count."""
        from framescope.analysis import summary_table

        return summary_table(self.trace, limit=limit, sort_by=sort_by)

    def merge(self, other: profile | _core.Trace | bytes, offset_ns: int = 0) -> None:
        """Adds the events of another trace (e.g. another process's, as ``serialize()`` bytes)."""
        if isinstance(other, profile):
            other = other.trace
        elif isinstance(other, (bytes, bytearray)):
            other = _core.Trace.deserialize(bytes(other))
        self.trace.merge(other, offset_ns)

    def serialize(self) -> bytes:
        """The trace in framescope's compact binary form (for merge() in another process)."""
        return self.trace.serialize()
