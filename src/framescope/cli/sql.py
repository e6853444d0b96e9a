"""``framescope sql PATH "SELECT ..."``: SQL (DuckDB) on a trace, a .parquet file or a dataset."""

from __future__ import annotations

import argparse

from framescope.cli._tables import run_sql as run


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
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


__all__ = ["add_parser", "run"]
