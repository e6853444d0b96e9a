"""The package is typed: mypy --strict (pyproject's [tool.mypy]) passes over src/framescope with
the extension's .pyi stubs, and the wheel ships py.typed. Runs where mypy is installed (CI: 3.12)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.subprocesses import REPO_ROOT


def test_mypy_strict_passes_on_the_package() -> None:
    pytest.importorskip("mypy", reason="mypy runs on the Python whose venv has it (3.12 in CI)")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(REPO_ROOT / "pyproject.toml")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_package_ships_py_typed_and_stubs() -> None:
    package = REPO_ROOT / "src" / "framescope"
    assert (package / "py.typed").is_file()
    assert (package / "_core.pyi").is_file()
