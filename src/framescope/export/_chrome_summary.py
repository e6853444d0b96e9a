"""``framescope summary`` of a Chrome JSON trace (framescope's own, or one torch.profiler wrote):
the table of the HTML report's reader (framescope.export._report), as text."""

from __future__ import annotations

import os

from framescope.analysis._names import fit_name, name_width


def is_chrome_json(path: str | os.PathLike[str]) -> bool:
    """True when the file starts as JSON or gzip (a saved .fstrace does neither)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return False
    return head[:2] == b"\x1f\x8b" or head.lstrip()[:1] in (b"{", b"[")


def summary_of_chrome(path: str | os.PathLike[str], limit: int = 20) -> str:
    """The functions and ops of a Chrome trace by self time (its bookkeeping spans left out)."""
    from framescope.export import _report as report

    data = report.load(path)
    whole = sum(r[4] for r in data.table)
    rows = data.table if limit < 0 else data.table[:limit]
    head = f"{'calls':>10} {'self ms':>10} {'self %':>7} {'total ms':>10}  {'category':<16}"
    width = name_width(len(head) + 2)
    lines = [f"Wall time per function or op, by self time; % of the {whole / 1e6:.1f} ms on "
             f"{len(data.threads)} thread{'s' if len(data.threads) != 1 else ''} of "
             f"{os.path.basename(os.fspath(path))}",
             head + "  name", "-" * len(head) + "  " + "-" * 40]
    for name, category, calls, total, self_ns in rows:
        pct = f"{100.0 * self_ns / whole:6.1f}%" if whole else f"{'--':>7}"
        lines.append(f"{calls:>10} {self_ns / 1e6:10.3f} {pct} {total / 1e6:10.3f}  "
                     f"{category[:16]:<16}  {fit_name(name, width)}")
    lines.append(f"{data.wall_ns / 1e6:.1f} ms wall; {data.events} events")
    return "\n".join(lines)
