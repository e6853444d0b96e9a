"""``profile.key_averages()``: torch.profiler's per-key averages and table, computed natively.

Attribute names and units follow ``torch.autograd.profiler_util.FunctionEventAvg`` where the
meaning is the same (times in microseconds, memory in bytes); ``on_cpu_time_total`` and
``self_on_cpu_time_total`` add the time the threads were actually on a CPU.
"""

from __future__ import annotations

import ast
import operator
from typing import TYPE_CHECKING, Iterable, SupportsIndex, overload

from framescope.analysis._key_average_rows import key_average_rows
from framescope.analysis._key_averages_table import _format_time, _sort_value, build_table

if TYPE_CHECKING:
    from framescope._core import Trace

__all__ = ["FunctionEventAvg", "KeyAverages", "key_averages", "SORT_KEYS"]

#: What ``table(sort_by=...)`` accepts: torch's names, and framescope's on-CPU times. torch's
#: device keys (``device_time_total``, and its ``cuda_``/``xpu_``/``privateuse1_`` spellings) are
#: accepted too: framescope records no device, so they are 0 for every entry.
SORT_KEYS = (
    "cpu_time_total",
    "self_cpu_time_total",
    "cpu_time",
    "self_cpu_time",
    "count",
    "cpu_memory_usage",
    "self_cpu_memory_usage",
    "flops",
    "on_cpu_time_total",
    "self_on_cpu_time_total",
    "on_cpu_time",
    "device_time_total",
    "self_device_time_total",
    "device_time",
    "device_memory_usage",
    "self_device_memory_usage",
)


def _canonical_sort_key(sort_by: str) -> str:
    """torch's spelling rule: ``cuda``, ``xpu`` and ``privateuse1`` in a key mean ``device``."""
    for alias in ("cuda", "xpu", "privateuse1"):
        sort_by = sort_by.replace(alias, "device")
    return sort_by


class FunctionEventAvg:
    """The events of one key (a function, range or builtin, and what the grouping adds).

    Times are microseconds, as torch's: ``cpu_time_total`` is the wall time inside the key's
    events (a call nested in a call of the same key counted once, in the outermost, as
    cProfile's cumtime), ``self_cpu_time_total`` that time minus the direct children's,
    ``cpu_time`` the average per call. ``on_cpu_time_total`` / ``self_on_cpu_time_total`` are the
    parts of those the thread spent on a CPU (None when the session did not sample CPU time).
    ``cpu_memory_usage`` / ``self_cpu_memory_usage``: bytes allocated inside the events, with and
    without their children (``profile_memory=True``).

    (A plain class, not a dataclass: a dataclass's generated ``__init__`` is code of no file,
    which a session recording while key_averages() runs on a snapshot would record.)
    """

    __slots__ = ("key", "count", "cpu_time_total", "self_cpu_time_total", "on_cpu_time_total",
                 "self_on_cpu_time_total", "cpu_memory_usage", "self_cpu_memory_usage", "flops",
                 "input_shapes", "stack", "category", "thread", "file", "line", "is_async",
                 "is_top_level", "node_id", "is_remote", "is_legacy", "overload_name", "scope",
                 "cpu_parent", "use_device", "device_type", "device_time_total",
                 "self_device_time_total", "device_memory_usage", "self_device_memory_usage")

    def __init__(
        self,
        key: str,
        count: int = 0,
        cpu_time_total: float = 0.0,
        self_cpu_time_total: float = 0.0,
        on_cpu_time_total: float | None = None,
        self_on_cpu_time_total: float | None = None,
        cpu_memory_usage: int = 0,
        self_cpu_memory_usage: int = 0,
        flops: int = 0,
        input_shapes: list[list[int]] | str = "",
        stack: list[str] | None = None,
        category: str = "",
        thread: int | None = None,
        file: str = "",
        line: int = 0,
        is_async: bool = False,
        is_top_level: bool = False,
    ) -> None:
        self.key = key
        self.count = count
        self.cpu_time_total = cpu_time_total
        self.self_cpu_time_total = self_cpu_time_total
        self.on_cpu_time_total = on_cpu_time_total
        self.self_on_cpu_time_total = self_on_cpu_time_total
        self.cpu_memory_usage = cpu_memory_usage
        self.self_cpu_memory_usage = self_cpu_memory_usage
        self.flops = flops
        self.input_shapes = input_shapes
        self.stack: list[str] = stack if stack is not None else []
        self.category = category
        self.thread = thread
        self.file = file
        self.line = line
        self.is_async = is_async
        self.is_top_level = is_top_level
        self.node_id = -1
        # torch's attributes that a CPU-only, single-process profile fills the same way for
        # every entry: no device, no remote or legacy events, no operator overloads.
        self.is_remote = False
        self.is_legacy = False
        self.overload_name = ""
        self.scope = 0
        self.cpu_parent = None
        self.use_device: str | None = None
        self.device_type = "CPU"
        self.device_time_total = 0.0
        self.self_device_time_total = 0.0
        self.device_memory_usage = 0
        self.self_device_memory_usage = 0

    @property
    def is_user_annotation(self) -> bool:
        """A ``record_function`` range (or a C ABI range), as torch's user annotations."""
        return self.category == "user_annotation"

    @property
    def device_time(self) -> float:
        """Average device time per call: always 0 (framescope records no device)."""
        return 0.0

    # torch's deprecated cuda_* spellings of the device attributes.
    @property
    def cuda_time(self) -> float:
        return self.device_time

    @property
    def cuda_time_total(self) -> float:
        return self.device_time_total

    @property
    def self_cuda_time_total(self) -> float:
        return self.self_device_time_total

    @property
    def cuda_memory_usage(self) -> int:
        return self.device_memory_usage

    @property
    def self_cuda_memory_usage(self) -> int:
        return self.self_device_memory_usage

    @property
    def cpu_time(self) -> float:
        """Average wall time per call (µs)."""
        return 0.0 if self.count == 0 else self.cpu_time_total / self.count

    @property
    def self_cpu_time(self) -> float:
        """Average self time per call (µs)."""
        return 0.0 if self.count == 0 else self.self_cpu_time_total / self.count

    @property
    def on_cpu_time(self) -> float | None:
        """Average on-CPU time per call (µs), None without CPU sampling."""
        if self.on_cpu_time_total is None:
            return None
        return 0.0 if self.count == 0 else self.on_cpu_time_total / self.count

    @property
    def cpu_time_str(self) -> str:
        return _format_time(self.cpu_time)

    @property
    def cpu_time_total_str(self) -> str:
        return _format_time(self.cpu_time_total)

    @property
    def self_cpu_time_total_str(self) -> str:
        return _format_time(self.self_cpu_time_total)

    def add(self, other: FunctionEventAvg) -> FunctionEventAvg:
        """Adds another average's totals (torch's ``FunctionEventAvg.add``)."""
        self.count += other.count
        self.cpu_time_total += other.cpu_time_total
        self.self_cpu_time_total += other.self_cpu_time_total
        self.on_cpu_time_total = _add_optional(self.on_cpu_time_total, other.on_cpu_time_total)
        self.self_on_cpu_time_total = _add_optional(
            self.self_on_cpu_time_total, other.self_on_cpu_time_total
        )
        self.cpu_memory_usage += other.cpu_memory_usage
        self.self_cpu_memory_usage += other.self_cpu_memory_usage
        self.flops += other.flops
        return self

    def __repr__(self) -> str:
        return (
            f"<FunctionEventAvg key={self.key} self_cpu_time={self.self_cpu_time_total_str} "
            f"cpu_time={self.cpu_time_str} input_shapes={self.input_shapes} "
            f"cpu_memory_usage={self.cpu_memory_usage}>"
        )


def _add_optional(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else a + b


class KeyAverages(list[FunctionEventAvg]):
    """What ``key_averages()`` returns: a list of FunctionEventAvg with torch's ``table()``."""

    def __init__(
        self,
        items: Iterable[FunctionEventAvg] = (),
        *,
        profile_memory: bool = False,
        with_flops: bool = False,
        has_on_cpu: bool = False,
    ) -> None:
        super().__init__(items)
        self._profile_memory = profile_memory
        self._with_flops = with_flops
        self._has_on_cpu = has_on_cpu

    @overload
    def __getitem__(self, i: SupportsIndex) -> FunctionEventAvg: ...
    @overload
    def __getitem__(self, i: slice) -> KeyAverages: ...
    def __getitem__(self, i: SupportsIndex | slice) -> FunctionEventAvg | KeyAverages:
        if isinstance(i, slice):
            return self._like(list.__getitem__(self, i))
        return list.__getitem__(self, i)

    def _like(self, items: Iterable[FunctionEventAvg]) -> KeyAverages:
        return KeyAverages(items, profile_memory=self._profile_memory,
                           with_flops=self._with_flops, has_on_cpu=self._has_on_cpu)

    def sorted_by(self, sort_by: str) -> KeyAverages:
        """The entries by ``sort_by`` (an attribute in SORT_KEYS), largest first."""
        key = _check_sort_key(sort_by)
        return self._like(sorted(self, key=lambda e: _sort_value(e, key), reverse=True))

    def total_average(self) -> FunctionEventAvg:
        """One entry adding up every entry (torch's ``total_average``), keyed "Total"."""
        total = FunctionEventAvg(key="Total")
        for evt in self:
            total.add(evt)
        return total

    def self_cpu_time_total(self) -> float:
        """Sum of the entries' self times (µs): the denominator of the table's percentages."""
        return sum(e.self_cpu_time_total for e in self)

    def table(
        self,
        sort_by: str | None = None,
        row_limit: int = 100,
        max_src_column_width: int | None = 75,
        max_name_column_width: int | None = 55,
        max_shapes_column_width: int | None = 80,
        header: str | None = None,
        top_level_events_only: bool = False,
        time_unit: str | None = None,
    ) -> str:
        """torch's table: Name, Self CPU %, Self CPU, CPU total %, CPU total, CPU time avg,
        Self on-CPU and On-CPU total (when CPU time was sampled), CPU Mem and Self CPU Mem
        (``profile_memory``), # of Calls, Input Shapes (grouped by them), Source Location
        (grouped by stack), Total FLOPs (``with_flops``). Percentages are of the sum of every
        entry's self time (the time recorded on all threads), so they never exceed 100%.

        Raises:
            ValueError: an unknown ``sort_by`` or ``time_unit``, a negative column width.
            TypeError: ``sort_by`` is not a str.
        """
        if sort_by is not None:
            sort_by = _check_sort_key(sort_by)
        for name, width in (("max_src_column_width", max_src_column_width),
                            ("max_name_column_width", max_name_column_width),
                            ("max_shapes_column_width", max_shapes_column_width)):
            if width is not None and (isinstance(width, bool) or not isinstance(width, int)
                                      or width < 0):
                raise ValueError(f"{name} must be an int >= 0 or None, not {width!r}")
        if isinstance(row_limit, bool) or not isinstance(row_limit, int):
            raise TypeError(f"row_limit must be an int (-1: every row), not "
                            f"{type(row_limit).__name__}")
        if header is not None and not isinstance(header, str):
            raise TypeError(f"header must be a str or None, not {type(header).__name__}")
        if time_unit not in (None, "s", "ms", "us"):
            raise ValueError(f"time_unit must be 's', 'ms', 'us' or None, not {time_unit!r}")
        return build_table(
            self,
            sort_by=sort_by,
            row_limit=row_limit,
            max_src_column_width=max_src_column_width,
            max_name_column_width=max_name_column_width,
            max_shapes_column_width=max_shapes_column_width,
            header=header,
            top_level_events_only=top_level_events_only,
            time_unit=time_unit,
            profile_memory=self._profile_memory,
            with_flops=self._with_flops,
            with_on_cpu=self._has_on_cpu,
        )

    def __str__(self) -> str:
        return self.table()


def _check_sort_key(sort_by: str) -> str:
    """The attribute ``sort_by`` names (torch's device spellings mapped as torch maps them)."""
    if not isinstance(sort_by, str):
        raise TypeError(f"sort_by must be a str, not {type(sort_by).__name__}")
    key = _canonical_sort_key(sort_by)
    if key not in SORT_KEYS:
        raise ValueError(f"unknown sort_by {sort_by!r}: expected one of {', '.join(SORT_KEYS)} "
                         f"(or a cuda_/xpu_ spelling of a device key)")
    return key


def stack_depth(group_by_stack_n: object) -> int:
    """``group_by_stack_n`` as a frame count (torch takes any int; 0: no grouping).

    Raises:
        TypeError: not an integer. ValueError: negative.
    """
    if isinstance(group_by_stack_n, bool) or not hasattr(group_by_stack_n, "__index__"):
        raise TypeError(f"group_by_stack_n must be an int, not {type(group_by_stack_n).__name__}")
    n = operator.index(group_by_stack_n)
    if n < 0:
        raise ValueError(f"group_by_stack_n must be >= 0, not {n}")
    return min(n, 2**32 - 1)  # deeper than any stack: every frame


def key_averages(
    trace: Trace,
    *,
    group_by_input_shape: bool = False,
    group_by_stack_n: int = 0,
    group_by_thread: bool = False,
    profile_memory: bool = False,
    with_flops: bool = False,
    merge_nested_same_name: bool = True,
) -> KeyAverages:
    """Per-key averages of ``trace`` (one native replay). As torch's, a range whose nearest
    enclosing range has the same name and no other range child is not an event of its own
    (``merge_nested_same_name``; torch's ``EventList._remove_dup_nodes``); the flags take any
    truthy value, as torch's.

    Raises:
        TypeError: ``group_by_stack_n`` is not an int. ValueError: it is negative.
    """
    totals = key_average_rows(
        trace, bool(group_by_input_shape), stack_depth(group_by_stack_n), bool(group_by_thread),
        bool(merge_nested_same_name)
    )
    out: list[FunctionEventAvg] = []
    for r in totals.rows:
        if r.calls == 0:
            continue
        out.append(FunctionEventAvg(
            key=r.name,
            count=r.calls,
            cpu_time_total=r.total_ns / 1e3,
            self_cpu_time_total=r.self_ns / 1e3,
            on_cpu_time_total=None if r.cpu_total_ns is None else r.cpu_total_ns / 1e3,
            self_on_cpu_time_total=None if r.cpu_self_ns is None else r.cpu_self_ns / 1e3,
            cpu_memory_usage=r.memory_total,
            self_cpu_memory_usage=r.memory_self,
            flops=r.flops,
            input_shapes=(ast.literal_eval(r.shapes) if r.shapes else []) if group_by_input_shape
            else "",
            stack=list(r.stack),
            category=r.category,
            thread=r.thread,
            file=r.file,
            line=r.line,
            is_async=r.is_async,
            is_top_level=r.top_level,
        ))
    return KeyAverages(_merge_profiler_steps(out),
                       profile_memory=profile_memory or totals.has_memory,
                       with_flops=with_flops, has_on_cpu=totals.has_cpu)


def _merge_profiler_steps(rows: list[FunctionEventAvg]) -> list[FunctionEventAvg]:
    """The ``ProfilerStep#N`` ranges of a schedule as one ``ProfilerStep*`` entry per grouping,
    as torch's key_averages() shows them (its events are renamed with that wildcard)."""
    merged: dict[tuple[str, str, int | None], FunctionEventAvg] = {}
    out: list[FunctionEventAvg] = []
    for row in rows:
        if not (row.key.startswith("ProfilerStep#") and row.key[13:].isdigit()):
            out.append(row)
            continue
        group = (str(row.input_shapes), "\n".join(row.stack), row.thread)
        first = merged.get(group)
        if first is None:
            row.key = "ProfilerStep*"
            merged[group] = row
            out.append(row)
        else:
            first.add(row)
    return out

