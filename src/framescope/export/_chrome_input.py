"""Reading Chrome JSON traces for ``framescope report``: the file (gzip or not) and the fields of
each event the report uses, checked, so that a malformed trace gives one ValueError naming the
event and the field, never a traceback from deep in the aggregation."""

from __future__ import annotations

import gzip
import json
import math
import zlib
from typing import Any

#: Times beyond this many nanoseconds (146 years) from the trace's zero are not times.
_MAX_NS = 2**62


def read_document(path: str, data: bytes | None = None) -> Any:
    """The parsed JSON of ``path`` (gunzipped when it starts with gzip's magic); ``data``: its
    bytes when already read (a pipe or FIFO can be read once only).

    Raises:
        ValueError: a damaged gzip file, invalid or too deeply nested JSON.
        OSError: the file cannot be read.
    """
    if data is None:
        with open(path, "rb") as f:
            data = f.read()
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            reason = str(exc) or type(exc).__name__
            if isinstance(exc, EOFError):
                reason = "it ends before the compressed stream does (truncated)"
            raise ValueError(f"{path}: not a valid gzip file: {reason}") from None
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    except RecursionError:
        raise ValueError(f"{path}: its JSON is nested too deeply to be a trace") from None


def _where(index: int, event: dict[str, Any]) -> str:
    name = event.get("name")
    shown = f" ({name!r})" if isinstance(name, str) and len(name) <= 80 else ""
    return f"traceEvents[{index}]{shown}"


def time_ns(event: dict[str, Any], field: str, index: int, default: float | None = None) -> int:
    """``event[field]`` (microseconds, as Chrome traces give times) as integer nanoseconds.

    Raises:
        ValueError: missing (without a default), not a number, not finite, or out of range.
    """
    value = event.get(field, default)
    if value is None:
        missing = field not in event
        raise ValueError(f"{_where(index, event)}: {field!r} is "
                         f"{'missing' if missing else 'null'}; it must be a number of microseconds")
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{_where(index, event)}: {field!r} must be a number of microseconds, "
                         f"not {type(value).__name__}")
    try:
        us = float(value)
    except (ValueError, OverflowError):
        raise ValueError(f"{_where(index, event)}: {field!r} must be a number of microseconds, "
                         f"not {value!r}") from None
    if not math.isfinite(us) or abs(us) * 1000 > _MAX_NS:
        raise ValueError(f"{_where(index, event)}: {field!r} is {value!r}, not a usable time")
    return int(round(us * 1000))


def thread_key(event: dict[str, Any], index: int) -> tuple[Any, Any]:
    """``(pid, tid)``, each a number, a string or absent.

    Raises:
        ValueError: a pid or tid of another type (a list, an object, ...).
    """
    out = []
    for field in ("pid", "tid"):
        value = event.get(field)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{_where(index, event)}: {field!r} is {value!r}, not an id")
        if value is not None and (isinstance(value, bool)
                                  or not isinstance(value, (int, float, str))):
            raise ValueError(f"{_where(index, event)}: {field!r} must be a number or a string, "
                             f"not {type(value).__name__}")
        out.append(value)
    return out[0], out[1]


def args_of(event: dict[str, Any], index: int) -> dict[str, Any]:
    """``event["args"]`` ({} when absent or null).

    Raises:
        ValueError: args that is not an object.
    """
    args = event.get("args")
    if args is None:
        return {}
    if not isinstance(args, dict):
        raise ValueError(f"{_where(index, event)}: 'args' must be an object, not "
                         f"{type(args).__name__}")
    return args


def python_id(value: Any, field: str, index: int, event: dict[str, Any]) -> Any:
    """A "Python id" / "Python parent id" arg: a number, a string or null.

    Raises:
        ValueError: another type (it is used as a key).
    """
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float, str))):
        raise ValueError(f"{_where(index, event)}: args[{field!r}] must be a number or a "
                         f"string, not {type(value).__name__}")
    return value


def warnings_of(doc: Any) -> list[str]:
    """``otherData.warnings`` of a trace (framescope's), as strings; [] when absent or odd."""
    if not isinstance(doc, dict):
        return []
    other = doc.get("otherData")
    warnings = other.get("warnings") if isinstance(other, dict) else None
    return [str(w) for w in warnings] if isinstance(warnings, list) else []
