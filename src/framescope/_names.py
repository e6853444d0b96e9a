"""Names that keep their meaning when cut: tables cut a long name from the left, so the function
(the end of ``path/to/module.py(215): Class.method``) is always shown, and size their name column
to the terminal."""

from __future__ import annotations

import shutil

#: The mark of a name cut from the left.
ELLIPSIS = "…"


def fit_name(name: str, width: int) -> str:
    """``name`` in at most ``width`` characters: whole when it fits, else its end after "…",
    starting at a directory of its path when that leaves the file name and function whole
    (``…/sub/module.py(215): hot``)."""
    if len(name) <= width:
        return name
    if width <= len(ELLIPSIS):
        return name[len(name) - max(width, 0):]
    tail = name[len(name) - (width - len(ELLIPSIS)):]
    # The file part of "path(line): function" is what precedes "(" or ": ".
    end_of_path = tail.find("(")
    if end_of_path < 0:
        end_of_path = tail.find(": ")
    slash = tail.find("/")
    if 0 < slash < end_of_path:
        tail = tail[slash:]
    elif end_of_path < 0 and tail[:1] in (" ", ":"):
        tail = tail.lstrip(": ")  # only the function is left: "…hot", not "… hot"
    return ELLIPSIS + tail


def terminal_columns() -> int:
    """Columns of the terminal (the ``COLUMNS`` variable first; 80 when there is none)."""
    return shutil.get_terminal_size((80, 24)).columns


def name_width(fixed: int, least: int = 40) -> int:
    """Width left for a table's name column after ``fixed`` columns of numbers, on this
    terminal; never under ``least`` (a pipe or a notebook has no width of its own)."""
    return max(least, terminal_columns() - fixed - 1)
