"""Shared fixtures: a temporary trace path and a checker of exported traces (helpers: tests.support)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from tests.support.trace_checker import check_trace, load_trace


@pytest.fixture
def checked_trace(tmp_path: Path) -> Callable[[Any], dict[str, Any]]:
    """Exports a stopped profile to JSON, checks it independently, returns the parsed data."""

    def export(prof: Any) -> dict[str, Any]:
        path = tmp_path / "trace.json"
        prof.export_chrome_trace(path)
        data = load_trace(str(path))
        check_trace(data)
        return data

    return export
