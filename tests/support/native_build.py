"""Compiles small C extensions for the tests with the compiler CPython was built with."""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sysconfig
from pathlib import Path
from types import ModuleType
from typing import Sequence


def build_extension(name: str, source: str, workdir: Path, include_dirs: Sequence[str] = ()) -> ModuleType:
    """Compiles C ``source`` as module ``name`` in ``workdir`` and imports it."""
    src = workdir / f"{name}.c"
    src.write_text(source)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    out = workdir / f"{name}{suffix}"
    cc = shlex.split(sysconfig.get_config_var("CC") or "cc")
    cmd = [
        *cc,
        "-shared",
        "-fPIC",
        "-O1",
        "-Wall",
        "-Werror",
        f"-I{sysconfig.get_paths()['include']}",
        *[f"-I{d}" for d in include_dirs],
        str(src),
        "-o",
        str(out),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"compiling {name} failed:\n{' '.join(cmd)}\n{result.stderr}")
    spec = importlib.util.spec_from_file_location(name, os.fspath(out))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
