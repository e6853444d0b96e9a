"""The HTML view of ``framescope diff``: ``framescope report --diff A B`` (one self-contained
page: the comparison table, sortable and filterable, changes beyond noise marked)."""

from __future__ import annotations

import html
import json
import os
from importlib import resources

from framescope.tables._diff import DiffRow


def _asset(name: str) -> str:
    return resources.files("framescope.export").joinpath("report_assets", name).read_text("utf-8")


def render(rows: list[DiffRow], side_a: list[str], side_b: list[str],
           title: str = "framescope diff") -> str:
    """The page as one HTML string."""
    several = len(side_a) > 1 and len(side_b) > 1
    data_rows = []
    for r in rows:
        a_self, b_self = r.mean("a", "self_ns"), r.mean("b", "self_ns")
        data_rows.append({
            "name": r.name,
            "self_a": a_self / 1e6, "self_b": b_self / 1e6, "self_d": (b_self - a_self) / 1e6,
            "self_abs": abs(b_self - a_self) / 1e6,
            "self_pct": None if a_self == 0 else 100.0 * (b_self - a_self) / a_self,
            "total_a": r.mean("a", "total_ns") / 1e6, "total_b": r.mean("b", "total_ns") / 1e6,
            "calls_a": round(r.mean("a", "calls")), "calls_b": round(r.mean("b", "calls")),
            "cpu_a": r.mean("a", "cpu_ns") / 1e6, "cpu_b": r.mean("b", "cpu_ns") / 1e6,
            "alloc_a": round(r.mean("a", "alloc_bytes")),
            "alloc_b": round(r.mean("b", "alloc_bytes")),
            "flag": "" if r.changed.get("self_ns") is None else
                    ("yes" if r.changed["self_ns"] else "no"),
        })
    payload = json.dumps({"title": title, "a": [os.path.basename(p) for p in side_a],
                          "b": [os.path.basename(p) for p in side_b], "several": several,
                          "rows": data_rows}, separators=(",", ":"))
    payload = payload.replace("<", "\\u003c")  # no "</script" inside the script element
    return (_asset("diff.html").replace("{{TITLE}}", html.escape(title))
            .replace("{{STYLE}}", _asset("report.css")).replace("{{DATA}}", payload))


def write(rows: list[DiffRow], side_a: list[str], side_b: list[str], output: str) -> None:
    """Writes the page to ``output``."""
    text = render(rows, side_a, side_b)
    with open(output, "w", encoding="utf-8") as f:
        f.write(text)
