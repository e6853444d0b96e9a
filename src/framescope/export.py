"""Exporters written in Python: cProfile-compatible pstats."""

from __future__ import annotations

import marshal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from framescope._core import Trace


def write_pstats(trace: Trace, path: str) -> None:
    """Writes ``trace`` as a marshalled pstats dict (what ``cProfile`` writes), built from the
    replayed call tree: primitive/total calls, self and cumulative seconds, and callers."""
    stats: dict[tuple[str, int, str], list[float]] = {}
    callers: dict[tuple[str, int, str], dict[tuple[str, int, str], list[float]]] = {}
    keys: dict[int, tuple[str, int, str]] = {}
    totals = {name: (calls, total, self_ns) for name, calls, total, self_ns, *_ in trace.stats()}

    def key_of(symbol: int) -> tuple[str, int, str]:
        k = keys.get(symbol)
        if k is None:
            name, file, line, function = trace.symbol(symbol)
            k = (file, line, function) if file and file != "~" else ("~", 0, name)
            keys[symbol] = k
        return k

    n = len(trace)
    for i in range(n):
        name, _cat, _thread, _start, dur, parent, _depth, symbol, _c = trace.event(i)
        if dur < 0:
            continue
        k = key_of(symbol)
        if k not in stats:
            calls, total, self_ns = totals.get(name, (0, 0, 0))
            stats[k] = [calls, calls, self_ns / 1e9, total / 1e9]
        if parent >= 0:
            pk = key_of(trace.event(parent)[7])
            c = callers.setdefault(k, {}).setdefault(pk, [0, 0, 0.0, 0.0])
            c[0] += 1
            c[1] += 1
            c[2] += 0.0
            c[3] += dur / 1e9
    out = {
        k: (v[0], v[1], v[2], v[3], {pk: tuple(c) for pk, c in callers.get(k, {}).items()})
        for k, v in stats.items()
    }
    with open(path, "wb") as f:
        marshal.dump(out, f)
