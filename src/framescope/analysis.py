"""Summary tables over a replayed trace."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from framescope._core import Trace


def _ms(ns: int) -> str:
    return f"{ns / 1e6:10.3f}"


def summary_table(trace: Trace, limit: int = 20, sort_by: str = "self") -> str:
    """Top ``limit`` functions/ranges by ``sort_by`` ("self", "total" or "calls")."""
    keys = {"self": 3, "total": 2, "calls": 1}
    if sort_by not in keys:
        raise ValueError(f"sort_by must be one of {sorted(keys)}, not {sort_by!r}")
    rows = sorted(trace.stats(), key=lambda r: r[keys[sort_by]], reverse=True)
    rows = [r for r in rows if r[1] > 0 and not r[0].startswith("__st")][:limit]
    wall = max(trace.stop_ns - trace.start_ns, 1)
    lines = [
        f"{'calls':>10} {'self ms':>10} {'self %':>7} {'total ms':>10}  name",
        f"{'-' * 10} {'-' * 10} {'-' * 7} {'-' * 10}  {'-' * 40}",
    ]
    for name, calls, total, self_ns, *_ in rows:
        lines.append(
            f"{calls:>10} {_ms(self_ns)} {100.0 * self_ns / wall:6.1f}% {_ms(total)}  {name}"
        )
    lines.append(
        f"{trace.recorded_events} events recorded in {wall / 1e6:.1f} ms wall"
        + (f", {trace.dropped_events} dropped" if trace.dropped_events else "")
    )
    return "\n".join(lines)
