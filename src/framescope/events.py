"""Lazy views of a replayed trace: millions of events without millions of objects up front."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Sequence, overload

if TYPE_CHECKING:
    from framescope._core import Trace


@dataclass(frozen=True)
class Event:
    """One event: a Python call, a range, a builtin call or a mark (``duration_ns == -1``)."""

    index: int
    name: str
    category: str
    thread: int
    start_ns: int
    duration_ns: int
    parent: int | None
    depth: int

    @property
    def end_ns(self) -> int:
        return self.start_ns + max(self.duration_ns, 0)


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
    """A sequence view over a trace's events; an Event is built only when it is read."""

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
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self._trace)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("event index out of range")
        name, cat, thread, start, dur, parent, depth, _sym, _c = self._trace.event(i)
        return Event(i, name, cat, thread, start, dur, None if parent < 0 else parent, depth)

    def __iter__(self) -> Iterator[Event]:
        for i in range(len(self._trace)):
            yield self[i]

    def named(self, name: str) -> list[Event]:
        """Events whose name is exactly ``name`` (searched in C++)."""
        return [self[i] for i in self._trace.find(name)]

    def children(self, parent: Event) -> list[Event]:
        """Direct children of ``parent`` (events are ordered, so this scans only its span)."""
        out: list[Event] = []
        i = parent.index + 1
        while i < len(self):
            e = self[i]
            if e.thread != parent.thread or e.start_ns > parent.end_ns:
                break
            if e.parent == parent.index:
                out.append(e)
            i += 1
        return out
