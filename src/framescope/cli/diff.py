"""``framescope diff A B``: two runs (or groups of runs) compared per function."""

from __future__ import annotations

import argparse

from framescope.cli._tables import run_diff as run


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    diff = sub.add_parser(
        "diff",
        help="compare two runs (or groups of runs) per function: self/total time, calls...",
        usage="framescope diff A B  (A, B: a trace, .parquet or dataset; or runs A1,A2,A3)",
    )
    diff.add_argument("a", help="the base: one input or several runs, comma-separated")
    diff.add_argument("b", help="the comparison: one input or several runs, comma-separated")
    diff.add_argument("--sort", choices=["self_ns", "total_ns", "calls", "cpu_ns", "alloc_bytes"],
                      default="self_ns", help="order by the absolute change of (default: self)")
    diff.add_argument("--limit", type=int, default=30, help="rows (default: 30; -1: every row)")
    diff.add_argument("--csv", action="store_true", help="print every row as CSV")


__all__ = ["add_parser", "run"]
