"""Summary tables over a replayed trace: what took the time, on every thread or per thread.

Percentages are of the time recorded on the threads (the sum of every event's self time: each
thread's time under its outermost recorded frames), so a table's self percentages add up to at
most 100% however many threads ran. The header says what was measured: wall time, or time on a
CPU (``sort_by="on_cpu"``, from the CPU clocks the session sampled).

Ranges that ended on another thread than the one they began on are async spans: their thread
ran other slices meanwhile, which hold that time, so they have no self time and are not a share
of any thread's time. They are listed under the table, with their calls and total time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Collection, Literal, NamedTuple

from framescope import _core
from framescope.analysis._key_average_rows import KeyAverageRow, key_average_rows
from framescope.analysis import _host_code
from framescope.analysis._names import fit_name, name_width

if TYPE_CHECKING:
    from framescope._core import Trace

SummarySort = Literal["self", "total", "calls", "on_cpu", "memory"]
_SORTS = ("self", "total", "calls", "on_cpu", "memory")


class _Row(NamedTuple):
    name: str
    thread: int | None
    calls: int
    total_ns: int
    self_ns: int
    cpu_total_ns: int | None
    cpu_self_ns: int | None
    memory_total: int
    memory_self: int
    is_async: bool = False


def _ms(ns: float, width: int = 10) -> str:
    return f"{ns / 1e6:{width}.3f}"


def _ms_text(ns: float) -> str:
    """Milliseconds with the digits that matter: 307.1, 2.35, 0.018."""
    ms = ns / 1e6
    return f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}" if ms >= 0.1 else f"{ms:.3f}"


def _pct(part: float, whole: float, width: int = 7) -> str:
    return f"{100.0 * part / whole:{width - 1}.1f}%" if whole > 0 else f"{'--':>{width}}"


def _bytes(n: int) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:8.2f} {unit}"
    return f"{n:8d} B "


def _thread_label(threads: list[tuple[int, int, int, str]], i: int) -> str:
    pid, tid, _, name = threads[i]
    return f"{name or 'thread'} (tid {tid}, pid {pid})" if name else f"thread {tid} (pid {pid})"


_ORDER = {
    "self": lambda r: r.self_ns,
    "total": lambda r: r.total_ns,
    "calls": lambda r: r.calls,
    "on_cpu": lambda r: r.cpu_self_ns or 0,
    "memory": lambda r: r.memory_self,
}


def _limited(rows: list[_Row], limit: int) -> list[_Row]:
    """The first ``limit`` rows; a negative limit keeps them all (torch's ``row_limit=-1``)."""
    return rows if limit < 0 else rows[:limit]


def _table(rows: list[_Row], limit: int, sort_by: str, whole_wall: float,
           whole_cpu: float | None, memory: bool, whole_total: float | None = None) -> list[str]:
    """``whole_total``: the denominator of the total % column (the self % one's by default;
    everything recorded when host code is left out of the rows, as a total includes the host
    code its function called)."""
    whole_total = whole_wall if whole_total is None else whole_total
    rows = _limited(sorted(rows, key=_ORDER[sort_by], reverse=True), limit)
    if sort_by == "on_cpu":
        # Every time column says whether it is on-CPU or wall time, and self or total.
        head = (f"{'calls':>10} {'self CPU ms':>12} {'self CPU %':>10} {'total CPU ms':>12} "
                f"{'self wall ms':>12}")
        rule = f"{'-' * 10} {'-' * 12} {'-' * 10} {'-' * 12} {'-' * 12}"
    else:
        head = f"{'calls':>10} {'self ms':>10} {'self %':>7} {'total ms':>10} {'total %':>7}"
        rule = f"{'-' * 10} {'-' * 10} {'-' * 7} {'-' * 10} {'-' * 7}"
        if whole_cpu is not None:
            head += f" {'self CPU ms':>12}"
            rule += f" {'-' * 12}"
    if memory:
        head += f" {'self alloc':>11} {'total alloc':>11}"
        rule += f" {'-' * 11} {'-' * 11}"
    width = name_width(len(head) + 2)
    lines = [head + "  name", rule + "  " + "-" * 40]
    for r in rows:
        if sort_by == "on_cpu":
            line = (f"{r.calls:>10} {_ms(r.cpu_self_ns or 0, 12)} "
                    f"{_pct(r.cpu_self_ns or 0, whole_cpu or 0, 10)} "
                    f"{_ms(r.cpu_total_ns or 0, 12)} {_ms(r.self_ns, 12)}")
        else:
            line = (f"{r.calls:>10} {_ms(r.self_ns)} {_pct(r.self_ns, whole_wall)} "
                    f"{_ms(r.total_ns)} {_pct(r.total_ns, whole_total)}")
            if whole_cpu is not None:
                line += " " + (_ms(r.cpu_self_ns, 12) if r.cpu_self_ns is not None
                               else f"{'--':>12}")
        if memory:
            line += f" {_bytes(r.memory_self)} {_bytes(r.memory_total)}"
        lines.append(line + "  " + fit_name(r.name, width))
    return lines


def _async_table(rows: list[_Row], limit: int, sort_by: str) -> list[str]:
    """Ranges ended on another thread: calls and total wall time, no share of thread time."""
    if not rows or limit == 0:
        return []
    by_calls = sort_by == "calls"

    def order(r: _Row) -> tuple[int, int]:
        return (r.calls if by_calls else r.total_ns, r.total_ns)

    rows = _limited(sorted(rows, key=order, reverse=True), limit)
    lines = ["Ranges ended on another thread (async: not part of the thread times above)",
             f"{'calls':>10} {'total ms':>10}  name",
             f"{'-' * 10} {'-' * 10}  {'-' * 40}"]
    width = name_width(23)
    lines += [f"{r.calls:>10} {_ms(r.total_ns)}  {fit_name(r.name, width)}" for r in rows]
    return lines


_SUMMED = [KeyAverageRow._fields.index(f) for f in ("calls", "total_ns", "self_ns",
                                                     "memory_total", "memory_self", "flops")]
_SUMMED_IF_READ = [KeyAverageRow._fields.index(f) for f in ("cpu_total_ns", "cpu_self_ns")]


def _merge_threads(raw: list[KeyAverageRow]) -> list[KeyAverageRow]:
    """Rows of _key_averages(..., group_by_thread=True) summed per (name, category, async): the
    rows of the threads kept, as one table (totals add up: calls on two threads do not nest)."""
    merged: dict[tuple[Any, ...], list[Any]] = {}
    for r in raw:
        key = (r.name, r.category, r.is_async)
        row = merged.get(key)
        if row is None:
            merged[key] = list(r._replace(thread=None))
            continue
        for i in _SUMMED:  # calls, total, self, memory total/self, flops
            row[i] += r[i]
        for i in _SUMMED_IF_READ:  # on-CPU total/self: None without readings
            row[i] = r[i] if row[i] is None else row[i] + (r[i] or 0)
    return [KeyAverageRow._make(row) for row in merged.values()]


def _what(sort_by: str, scope: str) -> str:
    """The table's first line: what was measured, in which order, of which whole."""
    order = {"self": "self time", "total": "total time", "calls": "calls",
             "on_cpu": "self time on CPU", "memory": "bytes allocated in the function itself"}[sort_by]
    if sort_by == "on_cpu":
        return (f"Time on CPU per function, by {order} (each thread's CPU clock read every ~4 ms, "
                f"interpolated); % of {scope}")
    return f"Wall time per function, by {order}; % of {scope}"


def summary_table(trace: Trace, limit: int = 20, sort_by: str = "self",
                  by_thread: bool = False, threads: Collection[int] | None = None,
                  show_host: bool = False, extra_host: Collection[str] = ()) -> str:
    """Top ``limit`` functions/ranges (every one when ``limit`` < 0) by ``sort_by`` ("self",
    "total", "calls", "on_cpu" or "memory": bytes allocated in the function itself), over all
    threads or, with ``by_thread``, one table per thread. With memory samples (``profile_memory``) the table
    has the bytes allocated in each function itself and with its callees. Ranges ended on
    another thread (async spans) follow the table, with calls and total time only.

    ``threads`` (thread indices) keeps the table to those threads (the others' rows and time
    are left out, and the header counts only theirs).

    Host code (framescope.analysis._host_code: the Jupyter kernel, pytest, framescope itself, and what
    they call; ``extra_host`` names more files) is left out of the rows and of the percentages,
    its total said under the table; ``show_host`` lists its functions as any other.

    Raises:
        ValueError: an unknown ``sort_by``, "on_cpu" for a trace without CPU times, or
            "memory" for one without memory samples.
    """
    if sort_by not in _SORTS:
        raise ValueError(f"sort_by must be one of {', '.join(_SORTS)}, not {sort_by!r}")
    classes = b"" if show_host else _host_code.symbol_classes(trace, extra_host)
    folded = _host_code.HOST in classes
    read = _core._with_host(trace, classes, True) if folded else trace
    raw, thread_totals, has_cpu, has_memory = key_average_rows(read, False, 0, True)
    # Host self time per thread (the "[host]" rows), out of the rows and of the threads' time.
    host_wall = [0] * len(thread_totals)
    host_cpu = [0] * len(thread_totals)
    if folded:
        for r in raw:
            if r.name == _host_code.HOST_ROW and r.category == "python_function" and \
                    r.thread is not None:
                host_wall[r.thread] += r.self_ns
                host_cpu[r.thread] += r.cpu_self_ns or 0
        raw = [r for r in raw if not (r.name == _host_code.HOST_ROW
                                      and r.category == "python_function")]
        thread_totals = [(w - host_wall[i], None if c is None else c - host_cpu[i])
                         for i, (w, c) in enumerate(thread_totals)]
    recorded_total = sum(w for w, _ in thread_totals) + sum(host_wall)
    recorded_threads = sum(1 for i, (w, _) in enumerate(thread_totals) if w + host_wall[i] > 0)
    if threads is not None:
        keep = set(threads)
        raw = [r for r in raw if r.thread in keep]
        thread_totals = [t if i in keep else (0, None if t[1] is None else 0)
                         for i, t in enumerate(thread_totals)]
        host_wall = [h if i in keep else 0 for i, h in enumerate(host_wall)]
        recorded_total = sum(w for w, _ in thread_totals) + sum(host_wall)
        recorded_threads = sum(1 for i, (w, _) in enumerate(thread_totals)
                               if w + host_wall[i] > 0)
    if not by_thread:
        raw = _merge_threads(raw)
    if sort_by == "on_cpu" and not has_cpu:
        raise ValueError("this trace has no CPU times (recorded with cpu_time=False, or loaded "
                         "from an older file): sort by 'self', 'total' or 'calls'")
    if sort_by == "memory" and not has_memory:
        raise ValueError("this trace has no memory samples (record with profile_memory=True)")
    every = [_Row(r.name, r.thread, r.calls, r.total_ns, r.self_ns, r.cpu_total_ns, r.cpu_self_ns,
                  r.memory_total, r.memory_self, bool(r.is_async))
             for r in raw if r.calls > 0]
    # Async spans (ranges ended on another thread) have no self time: listed apart.
    rows = [r for r in every if not r.is_async]
    spans = [r for r in every if r.is_async]
    thread_table = trace.threads
    lines: list[str] = []
    if by_thread:
        lines.append(_what(sort_by, "each thread's own time"
                           + (" on CPU" if sort_by == "on_cpu" else " recorded")))
        for i, (wall, cpu) in enumerate(thread_totals):
            mine = [r for r in rows if r.thread == i]
            my_spans = [r for r in spans if r.thread == i]  # begun on this thread
            if not mine and not my_spans:
                continue
            cpu_text = f", {_ms_text(cpu)} ms on CPU" if cpu is not None else ""
            host_text = (f" (and {_ms_text(host_wall[i])} ms of host code, not in the table)"
                         if host_wall[i] else "")
            lines.append(f"== {_thread_label(thread_table, i)}: {_ms_text(wall)} ms recorded"
                         f"{cpu_text}{host_text}")
            if sort_by == "on_cpu" and cpu is None:
                lines.append("   (no CPU readings for this thread)")
            elif mine:
                lines += _table(mine, limit, sort_by, wall, cpu, has_memory,
                                wall + host_wall[i])
            lines += _async_table(my_spans, limit, sort_by)
    else:
        wall = sum(w for w, _ in thread_totals)
        cpu_total = sum(c or 0 for _, c in thread_totals) if has_cpu else None
        n = sum(1 for w, _ in thread_totals if w > 0)
        on = f"on {n} thread{'s' if n != 1 else ''}"
        host = sum(host_wall)
        if sort_by == "on_cpu":
            whose = "the program's code's " if host else "the "
            scope = f"{whose}{_ms_text(cpu_total or 0)} ms on CPU {on}"
        elif host:
            scope = (f"the {_ms_text(wall)} ms of the program's code (total %: of all "
                     f"{_ms_text(wall + host)} ms recorded {on})")
        else:
            scope = f"the {_ms_text(wall)} ms recorded {on}" + (
                f" ({_ms_text(cpu_total)} ms of it on CPU)" if cpu_total is not None else "")
        lines.append(_what(sort_by, scope))
        lines += _table(rows, limit, sort_by, wall, cpu_total, has_memory, wall + host)
        lines += _async_table(spans, limit, sort_by)
    host_text = ""
    if folded and sum(host_wall) > 0:
        host_text = (f"; {_ms_text(sum(host_wall))} ms of it host code, not in the table "
                     f"({_host_code.describe(trace, classes)}; show_host=True / --show-host "
                     "lists it)")
    lines.append(_time_line(trace, recorded_total, recorded_threads, host_text))
    return "\n".join(lines)


def _time_line(trace: Trace, recorded_ns: int, threads: int, host_text: str = "") -> str:
    """Wall time and the time recorded on the threads, and how the two relate, in one line
    (the table's last), with the host code's share when it is left out."""
    span = max(trace.stop_ns - trace.start_ns, 1)
    line = f"{_ms_text(span)} ms wall; {_ms_text(recorded_ns)} ms recorded "
    if threads > 1:
        line += f"across {threads} threads"
        if recorded_ns > span:
            line += " (threads overlap: their times add up past the wall time)"
        else:
            line += f" (their sum is {100.0 * recorded_ns / span:.0f}% of the wall time)"
    else:
        line += f"on {threads} thread{'' if threads == 1 else 's'}"
        line += (f" ({100.0 * recorded_ns / span:.0f}% of the wall time: the rest ran outside "
                 "recorded frames)" if recorded_ns < 0.995 * span else "")
    line += host_text + f"; {trace.recorded_events} events"
    if trace.dropped_events:
        line += f", {trace.dropped_events} dropped"
    return line
