"""What every benchmark writes beside its figures: the machine it ran on, and the JSON file."""

from __future__ import annotations

import json
import os
import platform
from typing import Any


def write_results(path: str | os.PathLike[str], doc: dict[str, Any]) -> None:
    """Writes a benchmark's results (JSON) to `path`, creating its directory."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {path}")


def machine_info() -> dict[str, Any]:
    """The machine and its load now (cores shared with other work skew every figure)."""
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    return {
        "python": platform.python_version(),
        "node": platform.node(),
        "cpu": cpu,
        "machine": platform.machine(),
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "loadavg_start": os.getloadavg(),
    }
