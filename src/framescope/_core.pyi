"""Type stubs of framescope._core, the C++ extension (sessions, ranges, traces, eval_frame API)."""

from __future__ import annotations

from types import CodeType, FrameType, TracebackType
from typing import Any, Callable, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])

# --- sessions and ranges

def _start(
    record_shapes: bool,
    profile_memory: bool,
    with_flops: bool,
    backend: str,
    c_calls: bool,
    prune_prefixes: list[str],
    current_frames: dict[int, FrameType | tuple[FrameType, int]] | None,
    memory_limit: int,
    keep_newest: bool,
    propagated_only: bool = False,
) -> None:
    """Starts the session (RuntimeError if one runs, ValueError for a bad backend)."""

def _stop(thread_names: list[tuple[int, str]]) -> Trace:
    """Stops the session and replays its events into a Trace."""

def is_enabled() -> bool:
    """True while a framescope session records."""

def _backend() -> str: ...
def mark(name: str) -> None:
    """Records an instant event on the calling thread; no-op without a session."""

def record_memory(
    address: int, bytes: int, total_allocated: int, total_reserved: int = 0, device: int = -1
) -> None:
    """Records a memory sample (bytes > 0: allocation, < 0: free) when profile_memory is on."""

def label_calls(code: CodeType, label: str) -> None:
    """Shows calls of ``code`` as ``"<label>: <class of first argument>"``."""

class record_function:
    """A user range: a context manager, or a decorator when called with a function."""

    def __init__(self, name: str, args: str | None = None) -> None: ...
    def __enter__(self) -> record_function: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...
    def __call__(self, fn: _F) -> _F: ...

class Trace:
    """A replayed session: events (one tree per thread), symbols, threads, warnings."""

    def __len__(self) -> int: ...
    def event(self, i: int) -> tuple[str, str, int, int, int, int, int, int, int]:
        """(name, category, thread, start ns, duration ns (-1: instant), parent (-1: none),
        depth, symbol, category id)."""

    def symbol(self, s: int) -> tuple[str, str, int, str]:
        """(name, file, line, function) of symbol ``s``."""

    @property
    def symbol_count(self) -> int: ...
    def find(self, name: str) -> list[int]:
        """Indices of the events with this exact name."""

    def detail(self, i: int) -> tuple[int, int, int, list[Any]] | None:
        """(handle, sequence number, flops, inputs) of a range that recorded them."""

    @property
    def threads(self) -> list[tuple[int, int, int, str]]:
        """(pid, OS thread id, pthread id, name) per recorded thread, by thread index."""

    def stats(self) -> list[tuple[str, int, int, int, str, int, str]]:
        """(name, calls, total ns, self ns, file, line, function) per symbol, by self time."""

    def export_chrome_trace(self, path: str) -> None: ...
    def serialize(self) -> bytes: ...
    @staticmethod
    def deserialize(data: bytes) -> Trace:
        """Raises ValueError for data that is not a serialized trace."""

    def merge(self, other: Trace, offset_ns: int = 0) -> None: ...
    @property
    def warnings(self) -> list[str]: ...
    @property
    def dropped_events(self) -> int: ...
    @property
    def recorded_events(self) -> int: ...
    @property
    def start_ns(self) -> int: ...
    @property
    def stop_ns(self) -> int: ...
    @property
    def backend(self) -> str: ...
    @property
    def memory(self) -> list[tuple[int, int, int, int, int, int, int]]:
        """(time ns, thread, address, bytes, total allocated, total reserved, device)."""

