"""Views of a stored trace's events: millions of events without millions of objects up front."""

from __future__ import annotations

import operator
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
        if isinstance(i, bool) or not isinstance(i, int):
            try:
                i = operator.index(i)  # numpy integers and other int-likes
            except TypeError:
                raise TypeError(f"events[i]: i must be an int or a slice, not "
                                f"{type(i).__name__}") from None
        n = len(self._trace)
        k = i + n if i < 0 else i
        if not 0 <= k < n:
            raise IndexError(f"events[i]: i={i} is out of range: the trace has {n} "
                             f"event{'' if n == 1 else 's'}")
        return self._trace.event_object(k)

    def __iter__(self) -> Iterator[Event]:
        return self._trace.iter_events()

    def named(self, name: str) -> list[Event]:
        """Events whose name is exactly ``name``, in index order (one replay, in C++)."""
        if not isinstance(name, str):
            raise TypeError(f"named(): name must be a str, not {type(name).__name__}")
        return self._trace.find_events(name)

    def children(self, parent: Event) -> list[Event]:
        """Direct children of ``parent``, in index order (a replay up to the parent's end)."""
        if not isinstance(parent, Event):
            raise TypeError(f"children(): parent must be an Event (of this trace: an item of "
                            f"events()), not {type(parent).__name__}")
        if not 0 <= parent.index < len(self._trace):
            raise ValueError(f"children(): parent is event {parent.index}, not an event of this "
                             f"trace ({len(self._trace)} events)")
        return self._trace.children(parent.index)
