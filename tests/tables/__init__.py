"""Traces as tables: Parquet, datasets, SQL (framescope.tables)."""
