"""Host code: what runs the program rather than the program (a Jupyter kernel, pytest, a launcher,
framescope itself), recorded like anything else but kept out of the user's tables.

Every frame is recorded; what is host is decided when the trace is read, once per symbol (code
object), never while recording. Each symbol gets one of three classes from its file name:

- **host** (1): files of the host packages (IPython, ipykernel, traitlets, zmq, tornado,
  jupyter_client, executing, stack_data, _pytest, pluggy, framescope, ...), ``runpy``, and the
  files a caller names (the notebook cell that ran ``%%framescope``);
- **the program's** (0): every other file outside the standard library and the installed
  packages: the project's code, a notebook cell, a script;
- **as its caller** (2): the standard library, installed libraries, builtins and code compiled
  from a string (``<string>``: namedtuple's and dataclasses' generated methods). Their time is
  the time of whoever called them: ``tokenize`` called by IPython's compiler and ``inspect`` or
  ``posixpath`` called by IPython's traceback formatting are host time; numpy called by the
  cell is the cell's. At a thread's root they are the program's.

The replay (cpp/analysis/replay_filter.cpp, HostVisitor) applies the classes with one stack of
booleans per thread: host slices are marked (category ``"host"`` in Chrome JSON and Perfetto) or
folded (every host frame named ``[host]``: summaries, key_averages, pstats).
"""

from __future__ import annotations

import os
import re
import sys
import sysconfig
from typing import TYPE_CHECKING, Iterable

from framescope import _core

if TYPE_CHECKING:
    from framescope._core import Trace

#: Name of the folded row (the symbol the replay names every host frame with).
HOST_ROW = "[host]"

PROGRAM, HOST, CALLER = 0, 1, 2

#: Top-level packages (directories or single modules) that host programs: notebook kernels and
#: their traceback formatting, test runners, debuggers and coverage, framescope itself.
HOST_PACKAGES = (
    "IPython", "ipykernel", "ipykernel_launcher", "traitlets", "zmq", "tornado",
    "jupyter_client", "jupyter_core", "comm", "debugpy", "executing", "stack_data", "asttokens",
    "pure_eval", "nbclient", "matplotlib_inline", "ipywidgets", "jedi", "parso",
    "_pytest", "pytest", "pluggy", "py", "iniconfig", "xdist", "pytest_asyncio", "pytest_cov",
    "pytest_timeout", "pytest_mock", "coverage", "pydevd", "_pydevd_bundle", "_pydev_bundle",
    "framescope",
)
#: Standard-library modules that launch programs: host wherever they are called from.
HOST_STDLIB = ("runpy", "pdb", "bdb", "cProfile", "profile", "trace")

_PACKAGES = re.compile(
    r"[/\\](?:site|dist)-packages[/\\](?:" + "|".join(map(re.escape, HOST_PACKAGES))
    + r")(?:[/\\]|\.py$)"
)
_STDLIB_HOST = re.compile(
    r"(?:^<frozen (?:" + "|".join(HOST_STDLIB) + r")>$)|(?:[/\\]lib[/\\]python3\.\d+[/\\](?:"
    + "|".join(HOST_STDLIB) + r")\.py$)"
)
_LIBRARY = re.compile(
    r"^<frozen |^<string>$|^~$|^$|[/\\](?:site|dist)-packages[/\\]|[/\\]lib[/\\]python3\.\d+[/\\]"
)


def _loaded_host_dirs() -> tuple[str, ...]:
    """Directories of the host packages loaded in this process (a checkout is not under
    site-packages: framescope's own src/framescope, an editable pytest)."""
    dirs = []
    for name in HOST_PACKAGES:
        path = getattr(sys.modules.get(name), "__file__", None)
        if path:
            path = os.path.abspath(path)
            if os.path.basename(path) == "__init__.py":
                dirs.append(os.path.dirname(path) + os.sep)
            else:
                dirs.append(path)
    return tuple(dirs)


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(
        os.path.join(p, "") for p in {paths.get(k, "") for k in
                                      ("stdlib", "platstdlib", "purelib", "platlib")} if p
    )


def classify_file(file: str, extra_host: Iterable[str] = (),
                  _dirs: tuple[tuple[str, ...], tuple[str, ...]] | None = None) -> int:
    """The class (PROGRAM, HOST or CALLER) of a code object's file name."""
    host_dirs, library_dirs = _dirs or (_loaded_host_dirs(), _library_dirs())
    if file in extra_host or _PACKAGES.search(file) or _STDLIB_HOST.search(file):
        return HOST
    if any(file == d or file.startswith(d) for d in host_dirs):
        return HOST
    if _LIBRARY.search(file) or file.startswith(library_dirs):
        return CALLER
    return PROGRAM


def symbol_classes(trace: Trace, extra_host: Iterable[str] = ()) -> bytes:
    """One class per symbol of ``trace`` (symbols are per code object, so few)."""
    extra = frozenset(extra_host)
    dirs = (_loaded_host_dirs(), _library_dirs())
    out = bytearray()
    for i in range(trace.symbol_count):
        _name, file, _line, _function = trace.symbol(i)
        out.append(classify_file(file, extra, dirs))
    return bytes(out)


def host_view(trace: Trace, fold: bool, extra_host: Iterable[str] = ()) -> Trace:
    """``trace`` read with host frames marked (category "host") or folded into ``[host]``
    (``trace`` itself when it has no host code)."""
    classes = symbol_classes(trace, extra_host)
    return _core._with_host(trace, classes, fold) if HOST in classes else trace


def has_host(trace: Trace, extra_host: Iterable[str] = ()) -> bool:
    """True when some symbol of ``trace`` is host code (a loaded torch trace has none)."""
    return HOST in symbol_classes(trace, extra_host)


def describe(trace: Trace, classes: bytes, most: int = 4) -> str:
    """The host packages among ``trace``'s symbols, for a footnote: "IPython, ipykernel, ..."."""
    seen: list[str] = []
    for i, c in enumerate(classes):
        if c != HOST:
            continue
        file = trace.symbol(i)[1]
        parts = re.split(r"[/\\]", file)
        name = next((p for p in parts if p in HOST_PACKAGES), None)
        if name is None:
            stem = os.path.splitext(parts[-1])[0]
            name = stem[len("<frozen "):-1] if stem.startswith("<frozen ") else "notebook cell"
            if stem in HOST_PACKAGES or stem in HOST_STDLIB:
                name = stem
        if name not in seen:
            seen.append(name)
    more = len(seen) - most
    return ", ".join(seen[:most]) + (f" and {more} more" if more > 0 else "")
