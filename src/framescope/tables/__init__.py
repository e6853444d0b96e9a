"""Traces as tables: Parquet export, datasets of many ranks, SQL on DuckDB, diffs of runs.

pyarrow (``pip install 'framescope[parquet]'``) and DuckDB (``framescope[sql]``) are optional:
imported on first use, with an error naming the extra when absent. See docs/tables.md.
"""

from __future__ import annotations

from framescope.tables._dataset import write_dataset
from framescope.tables._deps import MissingDependency
from framescope.tables._parquet import COLUMNS, schema, write_parquet
from framescope.tables._diff import diff
from framescope.tables._sql import connect, sql

__all__ = ["COLUMNS", "MissingDependency", "connect", "diff", "schema", "sql", "write_dataset",
           "write_parquet"]
