"""Runs code in a fresh interpreter (the one running the tests), for tests that need a process of their own."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run_python(code: str, *args: str, cwd: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Runs ``code`` in a fresh interpreter (the one running the tests)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
    )
