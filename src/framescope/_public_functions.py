"""framescope's public functions of the C++ core, as Python functions with real signatures:
nanobind's functions have none that ``inspect.signature``, ``help()`` or an IDE can read. Each is
one call into the core (framescope's own frames are never recorded, so a trace is unchanged)."""

from __future__ import annotations

from framescope import _core


def is_enabled() -> bool:
    """True while a framescope session records."""
    return _core.is_enabled()


def mark(name: str) -> None:
    """Records an instant event (a mark) named ``name`` on the calling thread; no-op without a
    session. TypeError for a name that is not a str; lone surrogates are stored as U+FFFD."""
    _core.mark(name)


def record_memory(address: int, bytes: int, total_allocated: int, total_reserved: int = 0,
                  device: int = -1) -> None:
    """Records a memory sample when profile_memory is on, as torch's memory profiler reports
    one: ``bytes`` allocated (> 0) or freed (< 0) at ``address``, the allocator's totals after it
    (``total_allocated``, ``total_reserved``) and the device (-1: CPU). All ints (TypeError
    otherwise)."""
    _core.record_memory(address, bytes, total_allocated, total_reserved, device)
