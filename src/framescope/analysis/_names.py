"""Names that keep their meaning when cut: tables cut a long name from the left, so the function
(the end of ``path/to/module.py(215): Class.method``) is always shown, and size their name column
to the terminal."""

from __future__ import annotations

import os
import re
import shutil
import sys

from framescope._unrecorded import unrecorded

#: The mark of a name cut from the left.
ELLIPSIS = "…"


_FRAME = re.compile(r"^(.*)\((\d+)\): (.*)$")


def fit_name(name: str, width: int) -> str:
    """``name`` in at most ``width`` characters: whole when it fits, else its end after "…".
    For a Python function (``path(line): function``) the function and line stay whole and the
    path is cut from the left, at a directory when one fits (``…/sub/module.py(215): hot``);
    when not even the line fits, the end of the function's name is what is shown."""
    if len(name) <= width:
        return name
    if width <= len(ELLIPSIS):
        return name[len(name) - max(width, 0):]
    m = _FRAME.match(name)
    if m:
        path, line, function = m.groups()
        suffix = f"({line}): {function}"
        room = width - len(ELLIPSIS) - len(suffix)
        if room > 0:
            tail = path[len(path) - room:]
            slash = tail.find("/")
            if slash >= 0:
                return ELLIPSIS + tail[slash:] + suffix
            if len(tail) >= 8:  # most of the file's name: still tells the file
                return ELLIPSIS + tail + suffix
        name = function
        if len(name) <= width - len(ELLIPSIS):
            return ELLIPSIS + name
    return ELLIPSIS + name[len(name) - (width - len(ELLIPSIS)):].lstrip(": ")


@unrecorded  # (key_averages().table() may run while a session records: framescope's work)
def terminal_columns() -> int | None:
    """Columns of the terminal the output goes to (``COLUMNS`` first), or None when it goes to
    no terminal (a pipe, a file, a notebook): tables then keep their natural width."""
    if "COLUMNS" not in os.environ:
        try:
            if not sys.stdout.isatty():
                return None
        except (AttributeError, ValueError):  # no stdout, or a closed one
            return None
    return shutil.get_terminal_size((80, 24)).columns


#: Width of a summary's name column when the output goes to no terminal.
NO_TERMINAL_WIDTH = 120


def name_width(fixed: int, least: int = 30) -> int:
    """Width left for a table's name column after ``fixed`` columns of numbers, on this
    terminal (never under ``least``); NO_TERMINAL_WIDTH when the output goes to none."""
    columns = terminal_columns()
    return NO_TERMINAL_WIDTH if columns is None else max(least, columns - fixed - 1)
