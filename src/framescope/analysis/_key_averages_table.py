"""The text table of ``key_averages().table()``: torch's layout (``_build_table``), plus on-CPU."""

from __future__ import annotations

import math
from typing import Protocol, Sequence

from framescope.analysis._names import fit_name, terminal_columns


class TableRow(Protocol):
    """What the table reads of a row (key_averages()'s FunctionEventAvg is one): torch's
    attribute names and units (µs, bytes)."""

    key: str
    count: int
    cpu_time_total: float
    self_cpu_time_total: float
    on_cpu_time_total: float | None
    self_on_cpu_time_total: float | None
    cpu_memory_usage: int
    self_cpu_memory_usage: int
    flops: int
    input_shapes: list[list[int]] | str
    stack: list[str]
    is_async: bool
    is_top_level: bool

    @property
    def cpu_time(self) -> float: ...


def _format_time(time_us: float) -> str:
    if time_us >= 1e6:
        return f"{time_us / 1e6:.3f}s"
    if time_us >= 1e3:
        return f"{time_us / 1e3:.3f}ms"
    return f"{time_us:.3f}us"


def _format_time_share(time_us: float, total_us: float) -> str:
    if total_us == 0:
        return "NaN"
    return f"{time_us * 100.0 / total_us:.2f}%"


def _format_memory(nbytes: int) -> str:
    kb, mb, gb = 1024, 1024 * 1024, 1024 * 1024 * 1024
    if abs(nbytes) >= gb:
        return f"{nbytes / gb:.2f} GB"
    if abs(nbytes) >= mb:
        return f"{nbytes / mb:.2f} MB"
    if abs(nbytes) >= kb:
        return f"{nbytes / kb:.2f} KB"
    return f"{nbytes} B"


def _sort_value(evt: TableRow, sort_by: str) -> float:
    value = getattr(evt, sort_by)
    return -math.inf if value is None else float(value)


_SPACING = 2
_COLUMN = 12
_FLOP_UNITS = ["FLOPs", "KFLOPs", "MFLOPs", "GFLOPs", "TFLOPs", "PFLOPs"]


def _time(time_us: float | None, unit: str | None) -> str:
    if time_us is None:
        return "--"
    if unit == "s":
        return f"{time_us / 1e6:.3f}s"
    if unit == "ms":
        return f"{time_us / 1e3:.3f}ms"
    if unit == "us":
        return f"{time_us:.3f}us"
    return _format_time(time_us)


def _trim_path(path: str, width: int) -> str:
    return fit_name(path, width)


def build_table(
    events: Sequence[TableRow],
    *,
    sort_by: str | None,
    row_limit: int,
    max_src_column_width: int | None,
    max_name_column_width: int | None,
    max_shapes_column_width: int | None,
    header: str | None,
    top_level_events_only: bool,
    time_unit: str | None,
    profile_memory: bool,
    with_flops: bool,
    with_on_cpu: bool,
) -> str:
    if len(events) == 0:
        return ""
    rows: list[TableRow] = list(events)
    if sort_by is not None:
        rows.sort(key=lambda e: _sort_value(e, sort_by), reverse=True)
    has_shapes = any(isinstance(e.input_shapes, list) and e.input_shapes for e in rows)
    stacks = [e.stack for e in rows if e.stack]
    name_width = max(len(e.key) for e in rows) + 4
    if max_name_column_width is not None:
        name_width = min(name_width, max_name_column_width)
    # On a terminal too narrow for the table, the name column gives way (to 30 at least).
    others = (_COLUMN + _SPACING) * (5 + 2 * with_on_cpu + 2 * profile_memory + 1) + _SPACING
    columns = terminal_columns()
    if columns is not None:
        name_width = min(name_width, max(30, columns - others - 1))
    shapes_width = max(len(str(e.input_shapes)) for e in rows) + 4
    if max_shapes_column_width is not None:
        shapes_width = min(shapes_width, max_shapes_column_width)
    src_width = 0
    if stacks:
        src_width = max(len(entry) for stack in stacks for entry in stack) + 4
        if max_src_column_width is not None:
            src_width = min(src_width, max_src_column_width)

    headers = ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"]
    if with_on_cpu:
        headers += ["Self on-CPU", "On-CPU total"]
    if profile_memory:
        headers += ["CPU Mem", "Self CPU Mem"]
    headers.append("# of Calls")
    formats: list[str] = []
    widths: list[int] = []

    def add_column(width: int, align: str = ">") -> None:
        formats.append("{: " + align + str(width) + "}")
        widths.append(width)

    add_column(name_width)
    for _ in headers[1:]:
        add_column(_COLUMN)
    if has_shapes:
        headers.append("Input Shapes")
        add_column(shapes_width)
    if stacks:
        headers.append("Source Location")
        add_column(src_width, "<")
    flops_scale, flops_unit = 1.0, ""
    raw_flops = [e.flops for e in rows if e.flops > 0]
    if with_flops and raw_flops:
        exponent = max(0, min(int(math.log10(min(raw_flops)) / 3), len(_FLOP_UNITS) - 1))
        flops_scale, flops_unit = 10.0 ** (-3 * exponent), _FLOP_UNITS[exponent]
        headers.append(f"Total {flops_unit}")
        add_column(_COLUMN)
    show_flops = bool(flops_unit)
    row_format = (" " * _SPACING).join(formats) + " " * _SPACING
    line_length = sum(widths) + _SPACING * (len(widths) - 1)
    header_sep = "".join("-" * w + " " * _SPACING for w in widths)

    sum_self = sum(e.self_cpu_time_total for e in rows)
    on_cpu_selves = [e.self_on_cpu_time_total for e in rows if e.self_on_cpu_time_total is not None]
    out: list[str] = []
    if header is not None:
        out += ["=" * line_length, header]
    if top_level_events_only:
        out += ["=" * line_length, "This report only display top-level ops statistics"]
    out += [header_sep, row_format.format(*headers), header_sep]
    shown = 0
    for e in rows:
        if shown == row_limit:
            break
        if top_level_events_only and not e.is_top_level:
            continue
        shown += 1
        # Cut from the left (torch cuts from the right): the function's name stays.
        name = fit_name(e.key, name_width - 1) if len(e.key) > name_width - 1 else e.key
        values: list[object] = [
            name,
            _format_time_share(e.self_cpu_time_total, sum_self),
            _time(e.self_cpu_time_total, time_unit),
            _format_time_share(e.cpu_time_total, sum_self) if not e.is_async else 0,
            _time(e.cpu_time_total, time_unit),
            _time(e.cpu_time, time_unit),
        ]
        if with_on_cpu:
            values += [_time(e.self_on_cpu_time_total, time_unit),
                       _time(e.on_cpu_time_total, time_unit)]
        if profile_memory:
            values += [_format_memory(e.cpu_memory_usage), _format_memory(e.self_cpu_memory_usage)]
        values.append(e.count)
        if has_shapes:
            values.append(str(e.input_shapes)[:shapes_width])
        if stacks:
            values.append(_trim_path(e.stack[0], src_width) if e.stack else "")
        if show_flops:
            values.append("--" if e.flops <= 0 else f"{e.flops * flops_scale:8.3f}")
        out.append(row_format.format(*values))
        if stacks:
            # The rest of the stack under the row, in the Source Location column.
            blank = [""] * (len(headers) - 1 - (1 if show_flops else 0))
            for entry in e.stack[1:]:
                cells = blank + [_trim_path(entry, src_width)] + ([""] if show_flops else [])
                out.append(row_format.format(*cells))
            out.append(row_format.format(*([""] * len(headers))))
    out.append(header_sep)
    out.append(f"Self CPU time total: {_time(sum_self, time_unit)}")
    if with_on_cpu and on_cpu_selves:
        out.append(f"Self on-CPU time total: {_time(sum(on_cpu_selves), time_unit)}")
    return "\n".join(out) + "\n"
