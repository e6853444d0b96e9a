"""The optional libraries of the tables (pyarrow, DuckDB), imported on first use with an error
that says which extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingDependency(ImportError):
    """An optional library a table feature needs is not installed; the message names the
    ``pip install`` that adds it."""


def require(module: str, extra: str, what: str) -> ModuleType:
    """Imports ``module``; raises MissingDependency naming ``framescope[extra]`` when it is
    absent. ``what``: the feature, for the message (e.g. "Parquet export")."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        raise MissingDependency(
            f"{what} needs {top}, which is not installed ({exc}): "
            f"pip install 'framescope[{extra}]' (or pip install {top})"
        ) from None
