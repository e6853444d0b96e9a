"""profile(torch_ops=True) without PyTorch: a clear error, on every Python version."""

from __future__ import annotations

import subprocess
import sys


def test_clear_error_without_torch() -> None:
    # torch unimportable (as when it is not installed): a RuntimeError that says so, at once
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import framescope\n"
        "try:\n"
        "    framescope.profile(torch_ops=True)\n"
        "except RuntimeError as e:\n"
        "    print('ERR', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "ERR torch_ops=True needs PyTorch" in out.stdout
