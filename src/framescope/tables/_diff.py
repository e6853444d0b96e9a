"""``framescope diff A B``: what changed between two runs (or two groups of runs), per function
or range: self and total time, calls, CPU time, bytes allocated.

Each side is one input or several runs of the same program (``A1,A2,A3``); an input is a saved
trace (.fstrace: read natively, no extra needed), a .parquet file or a dataset directory (read
with DuckDB: ``framescope[sql]``). With several runs per side, a change is flagged only when it
is beyond the run-to-run noise: the difference of the means exceeds three standard errors
(Welch: sqrt(varA/nA + varB/nB)) and no run of one side overlaps the other's range.
"""

from __future__ import annotations

import csv
import io
import math
import os
import statistics
from dataclasses import dataclass, field


#: The compared quantities: (key, column heading, unit). Times are ns, memory bytes.
METRICS = [("self_ns", "self", "ns"), ("total_ns", "total", "ns"), ("calls", "calls", ""),
           ("cpu_ns", "on-CPU self", "ns"), ("alloc_bytes", "allocated", "B")]
_KEYS = [m[0] for m in METRICS]


def run_stats(path: str) -> dict[str, dict[str, int]]:
    """Per name: calls, self_ns, total_ns (recursion counted once), cpu_ns (on-CPU self time,
    0 when not sampled), alloc_bytes (allocated directly inside). Every rank and thread of the
    input is summed."""
    if not os.path.exists(path):
        raise FileNotFoundError(2, f"framescope: cannot open {path!r}: No such file or directory",
                                path)
    out: dict[str, dict[str, int]] = {}

    def add(name: str, calls: int, self_ns: int, total_ns: int, cpu: int | None,
            alloc: int) -> None:
        e = out.setdefault(name, dict.fromkeys(_KEYS, 0))
        e["calls"] += int(calls)
        e["self_ns"] += int(self_ns)
        e["total_ns"] += int(total_ns)
        e["cpu_ns"] += int(cpu or 0)
        e["alloc_bytes"] += int(alloc or 0)

    if os.path.isdir(path) or path.endswith(".parquet"):
        from framescope.tables._sql import connect

        with connect(path) as con:
            rows = con.execute(
                "SELECT name, sum(calls), sum(self_ns), sum(total_ns), sum(cpu_self_ns), "
                "sum(alloc_self_bytes) FROM self_time_by_function GROUP BY name").fetchall()
        for row in rows:
            add(*row)
        return out
    from framescope.analysis import _host_code
    from framescope.analysis._key_average_rows import key_average_rows
    from framescope.profiler._profile import load

    # Host code folded into "[host]" and left out, as the SQL view (user_slices) does.
    trace = _host_code.host_view(load(path).trace, fold=True)
    for e in key_average_rows(trace).rows:
        if not (e.name == _host_code.HOST_ROW and e.category == "python_function"):
            add(e.name, e.calls, e.self_ns, e.total_ns, e.cpu_self_ns, e.memory_self)
    return out


@dataclass
class DiffRow:
    """One name's values on each side (one per run) and whether it changed beyond noise."""

    name: str
    a: dict[str, list[int]]
    b: dict[str, list[int]]
    changed: dict[str, bool | None] = field(default_factory=dict)

    def mean(self, side: str, key: str) -> float:
        values = (self.a if side == "a" else self.b)[key]
        return statistics.fmean(values) if values else 0.0

    def delta(self, key: str) -> float:
        return self.mean("b", key) - self.mean("a", key)


def beyond_noise(a: list[int], b: list[int]) -> bool | None:
    """Whether the means of ``a`` and ``b`` differ beyond their noise; None with fewer than
    two runs on a side (no noise to judge by)."""
    if len(a) < 2 or len(b) < 2:
        return None
    delta = statistics.fmean(b) - statistics.fmean(a)
    se = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
    apart = min(b) > max(a) or max(b) < min(a)
    return apart and abs(delta) > 3 * se


def diff(side_a: list[str], side_b: list[str], sort: str = "self_ns") -> list[DiffRow]:
    """Compares the runs of side A with those of side B; rows sorted by the absolute change of
    ``sort`` (a METRICS key), largest first.

    Raises:
        ValueError: an empty side, an unknown sort key, an input that is not a trace.
        OSError: an input cannot be read.
        MissingDependency: a Parquet input without DuckDB installed.
    """
    if sort not in _KEYS:
        raise ValueError(f"sort must be one of {', '.join(_KEYS)}, not {sort!r}")
    if not side_a or not side_b:
        raise ValueError("give at least one run on each side")
    runs_a = [run_stats(p) for p in side_a]
    runs_b = [run_stats(p) for p in side_b]
    names = sorted({n for r in runs_a + runs_b for n in r})
    zero = dict.fromkeys(_KEYS, 0)
    rows = []
    for name in names:
        a = {k: [r.get(name, zero)[k] for r in runs_a] for k in _KEYS}
        b = {k: [r.get(name, zero)[k] for r in runs_b] for k in _KEYS}
        row = DiffRow(name, a, b)
        row.changed = {k: beyond_noise(a[k], b[k]) for k in _KEYS}
        rows.append(row)
    rows.sort(key=lambda r: (-abs(r.delta(sort)), r.name))
    return rows


def split_side(text: str) -> list[str]:
    """``A1,A2,A3`` -> its runs (an existing path holding a comma stays whole)."""
    if os.path.exists(text):
        return [text]
    return [p for p in text.split(",") if p]


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


def _pct(a: float, b: float) -> str:
    if a == 0:
        return "new" if b else ""
    return f"{100.0 * (b - a) / a:+.1f}%"


def format_table(rows: list[DiffRow], limit: int = 30, sort: str = "self_ns") -> str:
    """The comparison as a text table (times in ms)."""
    several = any(v is not None for r in rows[:1] for v in r.changed.values())
    head = ["name", "self A ms", "self B ms", "Δ self ms", "Δ", "total A ms", "total B ms",
            "calls A", "calls B", "cpu A ms", "cpu B ms", "alloc A", "alloc B"]
    if several:
        head.append("beyond noise")
    shown = rows if limit < 0 else rows[:limit]
    body = []
    for r in shown:
        m = r.mean
        name = r.name if len(r.name) <= 60 else r.name[:59] + "…"
        line = [name, _ms(m("a", "self_ns")), _ms(m("b", "self_ns")), _ms(r.delta("self_ns")),
                _pct(m("a", "self_ns"), m("b", "self_ns")), _ms(m("a", "total_ns")),
                _ms(m("b", "total_ns")), f"{m('a', 'calls'):.0f}", f"{m('b', 'calls'):.0f}",
                _ms(m("a", "cpu_ns")), _ms(m("b", "cpu_ns")), f"{m('a', 'alloc_bytes'):.0f}",
                f"{m('b', 'alloc_bytes'):.0f}"]
        if several:
            line.append("yes" if r.changed[sort] else "")
        body.append(line)
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h)
              for i, h in enumerate(head)]
    out = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in
                     enumerate(zip(head, widths)))]
    for b in body:
        out.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in
                             enumerate(zip(b, widths))))
    if limit >= 0 and len(rows) > limit:
        out.append(f"... {len(rows) - limit} more (--limit -1: every row)")
    return "\n".join(out)


def format_csv(rows: list[DiffRow]) -> str:
    """Every row as CSV: per metric the mean of A, of B, the difference, and whether it is
    beyond the noise (empty with one run per side). Times in ns."""
    buf = io.StringIO()
    w = csv.writer(buf)
    head = ["name"]
    for k in _KEYS:
        head += [f"{k}_a", f"{k}_b", f"{k}_delta", f"{k}_beyond_noise"]
    w.writerow(head)
    for r in rows:
        line: list[object] = [r.name]
        for k in _KEYS:
            flag = r.changed.get(k)
            line += [round(r.mean("a", k), 1), round(r.mean("b", k), 1), round(r.delta(k), 1),
                     "" if flag is None else str(flag).lower()]
        w.writerow(line)
    return buf.getvalue()
