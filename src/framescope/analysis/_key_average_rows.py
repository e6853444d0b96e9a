"""The typed boundary of the core's per-key totals (``_core._key_averages``, one native replay,
cpp/python/bindings/bindings_analysis.cpp): each row as a KeyAverageRow read by field name, the
whole answer as KeyAverageTotals. key_averages(), the summary table, ``framescope diff`` and the
pytest plugin's table all read the totals through here."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from framescope import _core

if TYPE_CHECKING:
    from framescope._core import Trace


class KeyAverageRow(NamedTuple):
    """One key's totals (times in ns; on-CPU times None where the thread had no CPU readings)."""

    name: str
    category: str  #: "python_function", "user_annotation", "cpu_op"...
    thread: int | None  #: thread index with group_by_thread, else None
    shapes: str  #: input shapes (Python literal text) with group_by_input_shape, else ""
    stack: list[str]  #: innermost calling frames with a stack depth, else []
    calls: int
    total_ns: int
    self_ns: int
    cpu_total_ns: int | None
    cpu_self_ns: int | None
    memory_total: int  #: bytes allocated, profile_memory
    memory_self: int
    flops: int
    is_async: bool  #: a range ended on another thread than its own
    top_level: bool
    file: str
    line: int


class KeyAverageTotals(NamedTuple):
    rows: list[KeyAverageRow]
    thread_totals: list[tuple[int, int | None]]  #: per thread: (self ns, on-CPU self ns)
    has_cpu: bool
    has_memory: bool


def key_average_rows(trace: Trace, group_by_input_shape: bool = False, stack_depth: int = 0,
                     group_by_thread: bool = False,
                     merge_nested_same_name: bool = False) -> KeyAverageTotals:
    """The core's totals of ``trace`` per key (name, category, and the groupings asked for)."""
    rows, thread_totals, has_cpu, has_memory = _core._key_averages(
        trace, group_by_input_shape, stack_depth, group_by_thread, merge_nested_same_name)
    return KeyAverageTotals([KeyAverageRow._make(r) for r in rows], thread_totals, has_cpu,
                            has_memory)
