"""Shared fixtures: a temporary trace path, a checker of exported traces, subprocess helpers."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from trace_checker import check_trace, load_trace  # noqa: E402


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


def run_python(code: str, *args: str, cwd: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Runs ``code`` in a fresh interpreter (the one running the tests)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
    )
