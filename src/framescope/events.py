"""Views of a stored trace's events: millions of events without millions of objects up front."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Sequence, overload

from framescope._core import Event

if TYPE_CHECKING:
    from framescope._core import Trace

__all__ = ["Event", "EventList", "MemoryEvent"]


@dataclass(frozen=True)
class MemoryEvent:
    """One ``record_memory`` sample: ``bytes`` > 0 is an allocation, < 0 a free."""

    time_ns: int
    thread: int
    address: int
    bytes: int
    total_allocated: int
    total_reserved: int
    device: int


class EventList(Sequence[Event]):
    """A sequence view over a trace's events; an Event (a small C++ object) is built only when it
    is read. Iterating, slicing, ``named()`` and ``children()`` replay the trace as they go (the
    first iteration also keeps every event's duration: 8 bytes per event); indexing one event
    (``events[i]``) uses an index of the trace built on first use (48 bytes per event)."""

    def __init__(self, trace: Trace) -> None:
        self._trace = trace

    def __len__(self) -> int:
        return len(self._trace)

    @overload
    def __getitem__(self, i: int) -> Event: ...
    @overload
    def __getitem__(self, i: slice) -> list[Event]: ...
    def __getitem__(self, i: int | slice) -> Event | list[Event]:
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step == 1:
                return list(self._trace.iter_events(start, max(start, stop)))
            return [self[j] for j in range(start, stop, step)]
        n = len(self._trace)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("event index out of range")
        return self._trace.event_object(i)

    def __iter__(self) -> Iterator[Event]:
        return self._trace.iter_events()

    def named(self, name: str) -> list[Event]:
        """Events whose name is exactly ``name``, in index order (one replay, in C++)."""
        return self._trace.find_events(name)

    def children(self, parent: Event) -> list[Event]:
        """Direct children of ``parent``, in index order (a replay up to the parent's end)."""
        return self._trace.children(parent.index)
