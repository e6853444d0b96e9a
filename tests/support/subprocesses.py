"""Runs code in a fresh interpreter (the one running the tests), for tests that need a process of their own."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

#: The repository's root (tests/support/ is two levels below it).
REPO_ROOT = Path(__file__).resolve().parents[2]


def run_python(code: str, *args: str, cwd: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Runs ``code`` in a fresh interpreter (the one running the tests)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
    )


def run_example(name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Runs ``examples/<name>`` as a script in a fresh interpreter (the one running the tests)."""
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "examples" / name), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
