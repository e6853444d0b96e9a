"""SQL over traces on DuckDB: ``framescope sql PATH "SELECT ..."`` and ``framescope.sql()``.

PATH is a saved trace (.fstrace: exported to a temporary Parquet file first), a .parquet file
or a dataset directory (``rank=N/part-K.parquet``). The table is the view ``events`` (every
row, see docs/tables.md for its columns); the views and macros below answer what is asked most.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import TYPE_CHECKING, Any, Iterator, Literal

from framescope.tables._dataset import is_dataset
from framescope.tables._deps import require

if TYPE_CHECKING:
    import duckdb

#: Names matched (lower case, as a regular expression) by the collectives views: torch.distributed's
#: functions and ops, NCCL/Gloo ranges.
COLLECTIVE_PATTERN = (r"all_?reduce|all_?gather|reduce_?scatter|broadcast|barrier|all_?to_?all"
                      r"|^c10d::|^nccl:|^gloo:")

#: The views and macros defined on every connection: name -> (SQL, description).
VIEWS: dict[str, tuple[str, str]] = {
    "slices": (
        "SELECT * FROM events WHERE kind NOT IN ('instant', 'memory')",
        "the rows that have a duration (no instants, no memory samples), host code included"),
    "user_slices": (
        "SELECT * FROM slices WHERE host IS NOT TRUE",
        "the slices of the program: host code (Jupyter/IPython, pytest, framescope, runpy...) "
        "left out, as summaries and key_averages() leave it out"),
    "self_time_by_function": (
        """SELECT name, kind, is_async, any_value(file) AS file, any_value(line) AS line,
                  count(*) AS calls, CAST(sum(self_ns) AS BIGINT) AS self_ns,
                  CAST(coalesce(sum(dur_ns) FILTER (WHERE NOT recursive), 0) AS BIGINT) AS total_ns,
                  CAST(sum(cpu_self_ns) AS BIGINT) AS cpu_self_ns,
                  CAST(sum(cpu_ns) FILTER (WHERE NOT recursive) AS BIGINT) AS cpu_ns,
                  CAST(sum(alloc_self_bytes) AS BIGINT) AS alloc_self_bytes,
                  CAST(coalesce(sum(alloc_bytes) FILTER (WHERE NOT recursive), 0) AS BIGINT) AS alloc_bytes
           FROM user_slices GROUP BY name, kind, is_async ORDER BY self_ns DESC, name""",
        "per function or range: calls, self and total time (recursive calls counted once), "
        "CPU time, bytes allocated, host code left out: what key_averages() gives"),
    "self_time_by_thread": (
        """SELECT rank, pid, tid, any_value(thread_name) AS thread_name, name, kind,
                  count(*) AS calls, CAST(sum(self_ns) AS BIGINT) AS self_ns,
                  CAST(coalesce(sum(dur_ns) FILTER (WHERE NOT recursive), 0) AS BIGINT) AS total_ns,
                  CAST(sum(cpu_self_ns) AS BIGINT) AS cpu_self_ns
           FROM user_slices GROUP BY rank, pid, tid, name, kind
           ORDER BY rank, pid, tid, self_ns DESC""",
        "the same per thread (rank, pid, tid)"),
    "self_time_by_rank": (
        """SELECT rank, name, kind, count(*) AS calls, CAST(sum(self_ns) AS BIGINT) AS self_ns,
                  CAST(coalesce(sum(dur_ns) FILTER (WHERE NOT recursive), 0) AS BIGINT) AS total_ns,
                  CAST(sum(cpu_self_ns) AS BIGINT) AS cpu_self_ns
           FROM user_slices GROUP BY rank, name, kind ORDER BY rank, self_ns DESC""",
        "the same per rank"),
    "host_time_by_thread": (
        """SELECT rank, pid, tid, any_value(thread_name) AS thread_name, count(*) AS calls,
                  CAST(sum(self_ns) AS BIGINT) AS self_ns,
                  CAST(sum(cpu_self_ns) AS BIGINT) AS cpu_self_ns
           FROM slices WHERE host GROUP BY rank, pid, tid ORDER BY rank, pid, tid""",
        "per thread: the self time of host code (the [host] row summaries fold it into)"),
    "step_times": (
        r"""SELECT rank, pid, tid, name AS step,
                  CAST(regexp_extract(name, '#(\d+)', 1) AS BIGINT) AS step_number,
                  start_ns, dur_ns
           FROM slices WHERE name LIKE 'ProfilerStep#%' ORDER BY rank, start_ns""",
        "every step (ProfilerStep#N ranges: profile.step(), torch.profiler's step())"),
    "step_time_by_rank": (
        """SELECT rank, count(*) AS steps, avg(dur_ns) AS mean_ns, median(dur_ns) AS median_ns,
                  max(dur_ns) AS max_ns, CAST(sum(dur_ns) AS BIGINT) AS total_ns
           FROM step_times GROUP BY rank ORDER BY rank""",
        "per rank: steps and their mean, median, longest and total time"),
    "collectives": (
        f"""SELECT * FROM slices
           WHERE regexp_matches(lower(name), '{COLLECTIVE_PATTERN}')""",
        "slices of collective communication (all_reduce, all_gather, broadcast, barrier, "
        "c10d::/nccl:/gloo: ranges...)"),
    "collective_time_by_rank": (
        """WITH c AS (SELECT rank, pid, tid, start_ns, start_ns + dur_ns AS end_ns
                      FROM collectives),
                o AS (SELECT *, max(end_ns) OVER (PARTITION BY rank, pid, tid ORDER BY start_ns,
                             end_ns DESC ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
                             AS reach FROM c),
                i AS (SELECT *, sum(CASE WHEN reach IS NULL OR start_ns > reach THEN 1 ELSE 0
                             END) OVER (PARTITION BY rank, pid, tid ORDER BY start_ns,
                             end_ns DESC) AS island FROM o),
                s AS (SELECT rank, pid, tid, min(start_ns) AS s, max(end_ns) AS e, count(*) AS n
                      FROM i GROUP BY rank, pid, tid, island)
           SELECT rank, CAST(sum(e - s) AS BIGINT) AS collective_ns, CAST(sum(n) AS BIGINT) AS calls
           FROM s GROUP BY rank ORDER BY rank""",
        "per rank: time inside collectives (nested and overlapping calls counted once per "
        "thread), and how many"),
}

#: Table macros: name -> (SQL, description).
MACROS: dict[str, tuple[str, str]] = {
    "stragglers": (
        """stragglers(pct := 10) AS TABLE
           WITH r AS (SELECT rank, median(dur_ns) AS step_ns, count(*) AS steps
                      FROM step_times GROUP BY rank),
                m AS (SELECT median(step_ns) AS median_ns FROM r)
           SELECT rank, steps, step_ns, median_ns,
                  100.0 * (step_ns / median_ns - 1) AS over_median_pct
           FROM r, m WHERE step_ns > median_ns * (1 + pct / 100.0)
           ORDER BY over_median_pct DESC""",
        "ranks whose step time (the median of their steps: one preempted step does not make a "
        "straggler) exceeds the median rank's by more than pct percent"),
    "top_functions": (
        """top_functions(n := 20) AS TABLE SELECT * FROM self_time_by_function LIMIT n""",
        "the n functions with the most self time"),
}


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def source_sql(path: str) -> str:
    """The DuckDB table expression reading a .parquet file or a dataset directory."""
    if is_dataset(path):
        pattern = os.path.join(path, "rank=*", "*.parquet")
        return (f"read_parquet({_quote(pattern)}, hive_partitioning = true, "
                "hive_types = {'rank': INTEGER}, union_by_name = true)")
    return f"read_parquet({_quote(path)})"


@contextlib.contextmanager
def connect(path: str | os.PathLike[str], memory_limit: str | None = None
            ) -> Iterator[duckdb.DuckDBPyConnection]:
    """An in-memory DuckDB connection with ``events`` on ``path`` and the views and macros of
    this module. A .fstrace is exported to a temporary Parquet file, removed on exit.

    Raises:
        MissingDependency: DuckDB (or, for a .fstrace, pyarrow) is not installed.
        ValueError / OSError: ``path`` is not a trace, Parquet file or dataset.
    """
    duckdb = require("duckdb", "sql", "framescope sql")
    p = os.fspath(path)
    if not os.path.exists(p):
        raise FileNotFoundError(2, f"framescope: cannot open {p!r}: No such file or directory", p)
    with contextlib.ExitStack() as stack:
        if os.path.isdir(p):
            if not is_dataset(p):
                raise ValueError(f"{p!r} is a directory without rank=N partitions: not a "
                                 "framescope dataset")
        elif not p.endswith(".parquet"):
            from framescope.profiler._profile import load
            from framescope.tables._parquet import write_parquet

            trace = load(p).trace  # ValueError when it is not a trace
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="framescope-sql-"))
            p = os.path.join(tmp, "trace.parquet")
            write_parquet(trace, p)
        con = duckdb.connect(":memory:")
        stack.callback(con.close)
        # DuckDB draws a progress bar on stdout for long queries: it would end up in --csv or
        # --json output and in a caller's captured stdout.
        con.execute("SET enable_progress_bar = false")
        if memory_limit:
            con.execute(f"SET memory_limit = {_quote(memory_limit)}")
        try:
            source = source_sql(p)
            con.execute(f"CREATE VIEW events AS SELECT * FROM {source}")
            columns = {r[0] for r in con.execute("DESCRIBE events").fetchall()}
        except duckdb.Error as exc:
            raise ValueError(f"{os.fspath(path)!r} cannot be read as a table: "
                             f"{str(exc).splitlines()[0]}") from None
        if "host" not in columns:
            # Files written before the host column: nothing is known to be host code.
            con.execute(f"CREATE OR REPLACE VIEW events AS SELECT *, false AS host FROM {source}")
        for name, (view, _) in VIEWS.items():
            con.execute(f"CREATE VIEW {name} AS {view}")
        for _, (macro, _) in MACROS.items():
            con.execute(f"CREATE MACRO {macro}")
        yield con


def sql(path: str | os.PathLike[str], query: str,
        result: Literal["pandas", "arrow"] = "pandas") -> Any:
    """Runs ``query`` on the trace, Parquet file or dataset at ``path`` and returns the result
    as a pandas DataFrame (``result="arrow"``: a pyarrow Table).

    The table is ``events`` (one row per slice, instant and memory sample; columns in
    docs/tables.md); views: ``slices``, ``user_slices`` (host code left out),
    ``self_time_by_function``, ``self_time_by_thread``, ``self_time_by_rank`` (over
    ``user_slices``), ``host_time_by_thread``, ``step_times``, ``step_time_by_rank``, ``collectives``,
    ``collective_time_by_rank``; table macros ``stragglers(pct := 10)`` and
    ``top_functions(n := 20)``.

    Raises:
        MissingDependency: DuckDB (pandas for a DataFrame) is not installed.
        ValueError: a bad query or a path that is not a table.
    """
    if result not in ("pandas", "arrow"):
        raise ValueError(f"result must be 'pandas' or 'arrow', not {result!r}")
    duckdb = require("duckdb", "sql", "framescope.sql")
    if result == "pandas":
        require("pandas", "sql", "framescope.sql (a pandas result)")
    with connect(path) as con:
        try:
            rel = con.sql(query)
            if rel is None:
                return None
            return rel.df() if result == "pandas" else rel.to_arrow_table()
        except duckdb.Error as exc:
            raise ValueError(f"framescope sql: {str(exc).strip().splitlines()[0]}") from None


def describe() -> str:
    """The views and macros, one per line (``framescope sql --views``)."""
    lines = ["events: every row (one per slice, instant and memory sample)"]
    lines += [f"{name}: {text}" for name, (_, text) in VIEWS.items()]
    lines += [f"{m.split(' AS ')[0]}: {text}" for m, text in MACROS.values()]
    return "\n".join(lines)
