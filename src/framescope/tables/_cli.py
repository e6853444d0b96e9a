"""The command line of the tables: ``framescope sql`` and ``framescope diff`` (registered by
framescope.cli), and the dataset outputs of ``convert --to DIR`` and ``merge -o DIR/``."""

from __future__ import annotations

import argparse
import csv
import datetime
import decimal
import json
import sys
from typing import Any

from framescope.tables._deps import MissingDependency

TABLE_COMMANDS = ("sql", "diff")


def add_table_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    sql = sub.add_parser(
        "sql",
        help="run SQL (DuckDB) on a trace, a .parquet file or a dataset directory",
        usage='framescope sql PATH "SELECT ..." [--csv | --json]',
        description="The table is `events`; views: slices, user_slices (host code left "
                    "out), self_time_by_function, self_time_by_thread, self_time_by_rank (over "
                    "user_slices), host_time_by_thread, step_times, step_time_by_rank, "
                    "collectives, collective_time_by_rank; table macros stragglers(pct := 10), "
                    "top_functions(n := 20). See --views and docs/tables.md.",
    )
    sql.add_argument("path", help="a saved trace (.fstrace), a .parquet file or a dataset dir")
    sql.add_argument("query", nargs="?", default=None, help="the SQL query")
    fmt = sql.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="print the result as CSV")
    fmt.add_argument("--json", action="store_true", help="print the result as a JSON array")
    sql.add_argument("--max-rows", type=int, default=1000,
                     help="rows of the printed table (default: %(default)s; -1: every row; "
                          "--csv and --json print every row)")
    sql.add_argument("--views", action="store_true", help="list the views and macros")
    sql.add_argument("--memory-limit", default=None, metavar="SIZE",
                     help="DuckDB's memory limit, e.g. 1GB (default: DuckDB's)")
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


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}" if abs(v) < 1e15 else f"{v:.0f}"
    return str(v)


def _jsonable(v: Any) -> Any:
    if isinstance(v, decimal.Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, (datetime.date, datetime.datetime, datetime.time, datetime.timedelta)):
        return str(v)
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    return v


def _print_result(names: list[str], rows: list[tuple[Any, ...]], opts: argparse.Namespace) -> None:
    if opts.csv:
        w = csv.writer(sys.stdout)
        w.writerow(names)
        w.writerows([[("" if c is None else c) for c in r] for r in rows])
        return
    if opts.json:
        json.dump([{n: _jsonable(c) for n, c in zip(names, r)} for r in rows], sys.stdout,
                  default=str)
        print()
        return
    shown = rows if opts.max_rows < 0 else rows[:opts.max_rows]
    text = [[_cell(c) for c in r] for r in shown]
    widths = [max([len(n)] + [len(t[i]) for t in text]) for i, n in enumerate(names)]
    numeric = [all(isinstance(r[i], (int, float, decimal.Decimal)) or r[i] is None
                   for r in shown) and bool(shown) for i in range(len(names))]
    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if numeric[i] else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    print(line(names))
    print(line(["-" * w for w in widths]))
    for t in text:
        print(line(t))
    more = len(rows) - len(shown)
    print(f"({len(rows)} row{'' if len(rows) == 1 else 's'}"
          f"{f', {more} not shown: --max-rows -1' if more else ''})")


def prepare_output(format: str) -> str | None:
    """Before ``framescope run`` starts the program: a Parquet output imports pyarrow now (the
    trace is written at exit, when an import may no longer register its exit handlers), or
    says it is missing."""
    if format != "parquet":
        return None
    try:
        from framescope.tables._deps import require

        for module in ("pyarrow.parquet", "pyarrow.compute", "pyarrow.fs"):  # fs: at write
            require(module, "parquet", "-o x.parquet")
        # pyarrow looks for pandas on its first array from a list, and pandas starts a thread
        # pool, which registers its exit handler: both now, while registering is allowed.
        require("pyarrow", "parquet", "-o x.parquet").array([0])
        import concurrent.futures.thread  # noqa: F401
    except MissingDependency as exc:
        return str(exc)
    return None


def run_sql(opts: argparse.Namespace) -> int:
    from framescope.tables import _sql as sql_mod

    if opts.views:
        print(sql_mod.describe())
        if opts.query is None:
            return 0
    if opts.query is None:
        print('framescope sql: give a query: framescope sql PATH "SELECT ..." (tables: --views)',
              file=sys.stderr)
        return 2
    try:
        from framescope.tables._deps import require

        duckdb = require("duckdb", "sql", "framescope sql")
        with sql_mod.connect(opts.path, memory_limit=opts.memory_limit) as con:
            try:
                cur = con.execute(opts.query)
                names = [d[0] for d in cur.description] if cur.description else []
                rows = cur.fetchall() if names else []
            except duckdb.Error as exc:
                print(f"framescope sql: {str(exc).strip().splitlines()[0]}", file=sys.stderr)
                return 1
    except (MissingDependency, OSError, ValueError) as exc:
        from framescope.cli_traces import error_text

        print(f"framescope sql: {error_text(exc)}", file=sys.stderr)
        return 1
    if names:
        _print_result(names, rows, opts)
    return 0


def run_diff(opts: argparse.Namespace) -> int:
    from framescope.cli_traces import error_text
    from framescope.tables import _diff as diff_mod

    try:
        side_a, side_b = diff_mod.split_side(opts.a), diff_mod.split_side(opts.b)
        rows = diff_mod.diff(side_a, side_b, opts.sort)
    except (MissingDependency, OSError, ValueError) as exc:
        print(f"framescope diff: {error_text(exc)}", file=sys.stderr)
        return 1
    if opts.csv:
        sys.stdout.write(diff_mod.format_csv(rows))
    else:
        print(f"A: {', '.join(side_a)}\nB: {', '.join(side_b)}")
        if len(side_a) < 2 or len(side_b) < 2:
            print("(one run on a side: give several runs per side, A1,A2,A3, to tell changes "
                  "from run-to-run noise)")
        print(diff_mod.format_table(rows, opts.limit, opts.sort))
    return 0


def run_table_command(opts: argparse.Namespace) -> int:
    return run_sql(opts) if opts.command == "sql" else run_diff(opts)


def write_dataset_command(command: str, inputs: list[str], folder: str) -> int:
    """``convert ... --to DIR`` and ``merge ... -o DIR/``: the dataset, and a line per rank."""
    from framescope.cli_traces import error_text
    from framescope.tables._dataset import write_dataset

    try:
        written, warnings = write_dataset(inputs, folder)
    except (MissingDependency, OSError, ValueError) as exc:
        print(f"framescope {command}: {error_text(exc)}", file=sys.stderr)
        return 1
    for w in warnings:
        print(w, file=sys.stderr)
    for part in written:
        print(f"framescope {command}: {part.path} -> rank={part.rank} ({part.rows:,} rows, "
              f"{part.offset_ns / 1e6:+.3f} ms by {part.method})", file=sys.stderr)
    print(f"framescope: {len(written)} trace{'' if len(written) == 1 else 's'} -> dataset "
          f"{folder}", file=sys.stderr)
    return 0


def report_diff(a: str, b: str, output: str | None) -> int:
    """``framescope report --diff A B [-o diff.html]``."""
    from framescope.cli_traces import error_text
    from framescope.tables import _diff as diff_mod, _diff_report

    output = output or "diff.html"
    try:
        side_a, side_b = diff_mod.split_side(a), diff_mod.split_side(b)
        _diff_report.write(diff_mod.diff(side_a, side_b), side_a, side_b, output)
    except (MissingDependency, OSError, ValueError) as exc:
        print(f"framescope report: {error_text(exc)}", file=sys.stderr)
        return 1
    print(f"framescope: diff report written to {output}", file=sys.stderr)
    return 0
