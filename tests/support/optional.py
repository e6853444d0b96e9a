"""Optional test dependencies: skipped where they are missing, except in CI."""

from __future__ import annotations

import os
from typing import Any

import pytest


def require(module: str) -> Any:
    """Imports `module`. In CI, which installs it (scripts/test_all.sh), a missing one fails
    rather than skips; elsewhere the test is skipped."""
    if os.environ.get("CI"):
        return __import__(module)
    return pytest.importorskip(module)
