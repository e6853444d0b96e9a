"""Names that keep their meaning when cut: tables cut a long name from the left, so the function
(the end of ``path/to/module.py(215): Class.method``) is always shown, and size their name column
to the terminal."""

from __future__ import annotations

import re
import shutil

from framescope.unrecorded import unrecorded

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
def terminal_columns() -> int:
    """Columns of the terminal (the ``COLUMNS`` variable first; 80 when there is none)."""
    return shutil.get_terminal_size((80, 24)).columns


def name_width(fixed: int, least: int = 30) -> int:
    """Width left for a table's name column after ``fixed`` columns of numbers, on this
    terminal; never under ``least`` (a pipe or a notebook has no width of its own)."""
    return max(least, terminal_columns() - fixed - 1)
