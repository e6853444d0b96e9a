"""Checks of the arguments of framescope's public functions, made in Python before anything
reaches the C++ core: a wrong argument is a TypeError or ValueError naming it and saying what
it takes, never the core binding's signature dump ("incompatible function arguments") nor a
value cut short on its way in (a NUL ends a C string) or accepted and failing later."""

from __future__ import annotations

import os
from typing import Any


def flag(name: str, value: object) -> bool:
    """A True/False option as a bool: any value by its truth, as torch.profiler takes its flags
    (``record_shapes=1`` records shapes), and as Python's own ``if`` would.

    Raises:
        TypeError: a value without a truth value (``bool()`` raises: a numpy array...).
    """
    try:
        return bool(value)
    except Exception:  # noqa: BLE001 - any failure of __bool__/__len__
        raise TypeError(f"{name} must be True or False, not {type(value).__name__} (it has "
                        "no truth value)") from None


def integer(name: str, value: object, low: int, high: int) -> int:
    """An int in ``low..high`` (bool is not an int here).

    Raises:
        TypeError: not an int. ValueError: out of range.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in {low}..{high}, not {value!r}")
    return value


def text(name: str, value: object, *, empty: bool = True) -> str:
    """A str that reaches the core whole: no NUL character (a C string would end there), no lone
    surrogate (not UTF-8: ``"\\udcff"``), non-empty unless ``empty``.

    Raises:
        TypeError: not a str. ValueError: NUL, lone surrogate, or empty.
    """
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if "\0" in value:
        raise ValueError(f"{name} contains a NUL character: {value!r}")
    if not empty and not value:
        raise ValueError(f"{name} must not be empty")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{name} is not valid text (it has a lone surrogate, e.g. from a file "
                         f"name that is not UTF-8): {value!r}") from None
    return value


def path(value: object, name: str = "path") -> str:
    """A file path (str or os.PathLike[str]) as str, checked as ``text``.

    Raises:
        TypeError: not a str path (bytes paths are not taken). ValueError: see ``text``.
    """
    try:
        p: Any = os.fspath(value)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"{name} must be a str or os.PathLike[str], not "
                        f"{type(value).__name__}") from None
    if not isinstance(p, str):
        raise TypeError(f"{name} must be a str or os.PathLike[str], not {type(p).__name__}")
    return text(name, p, empty=False)


def glob_list(name: str, patterns: object) -> list[str]:
    """include_files / exclude_files: one glob or a sequence of them, each a str or
    os.PathLike[str], as str (not yet made absolute).

    Raises:
        TypeError: bytes, a non-iterable, or an item that is not a str path.
        ValueError: an empty glob, a NUL or a lone surrogate in one.
    """
    if isinstance(patterns, (str, os.PathLike)):
        patterns = [patterns]
    if isinstance(patterns, (bytes, bytearray, memoryview)):
        raise TypeError(f"{name} takes file globs (str) or a list of them, not "
                        f"{type(patterns).__name__} {bytes(patterns)!r}")
    try:
        items = list(patterns)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"{name} takes file globs (str) or a list of them, not "
                        f"{type(patterns).__name__}") from None
    out = []
    for item in items:
        try:
            glob: Any = os.fspath(item)
        except TypeError:
            glob = item
        if not isinstance(glob, str):
            raise TypeError(f"{name} takes file globs (str), not {item!r}")
        out.append(text(f"{name} glob", glob, empty=False))
    return out
