"""Choosing an export format; every writer is native (cpp/export), this only dispatches."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Collection, Literal, NamedTuple

from framescope import _arguments, _core

if TYPE_CHECKING:
    from framescope._core import Trace

class Format(NamedTuple):
    """One export format: its name, the names and file endings that choose it, and whether a
    ``.gz`` name may compress it."""

    name: str
    extension: str  #: the default file extension
    suffixes: tuple[str, ...]  #: file name endings that pick it (before an optional ``.gz``)
    aliases: tuple[str, ...] = ()
    uncompressed: str | None = None  #: why a ``.gz`` name is refused (None: gzip allowed)


#: Why a ``.gz`` name is refused, per format that is never compressed.
_NOT_COMPRESSED = {
    "pstats": "pstats.Stats reads only uncompressed files",
    "fstrace": ".fstrace files are not compressed (they are mapped when loaded)",
    "html": "the HTML report is not compressed (open it in a browser)",
    "parquet": "Parquet files are compressed inside (zstd)",
}
#: The formats, in the order the command line lists them: the one table every chooser reads
#: (format_name, format_for_path, the CLI's -f choices, the flight recorder's dump names).
#: The native writers' names come from the core's own table (cpp/export/formats.cpp, which
#: chooses a writer from them when C++ code exports by path); the formats written from
#: Python (fstrace, html, parquet) follow.
FORMATS = tuple(
    Format(name, extension, tuple(suffixes), tuple(aliases), _NOT_COMPRESSED.get(name))
    for name, extension, suffixes, aliases in _core.export_formats()
) + (
    Format("fstrace", ".fstrace", (".fstrace",), (), _NOT_COMPRESSED["fstrace"]),
    Format("html", ".html", (".html",), (), _NOT_COMPRESSED["html"]),
    Format("parquet", ".parquet", (".parquet",), (), _NOT_COMPRESSED["parquet"]),
)
#: Format names (the CLI's -f choices).
NAMES = [f.name for f in FORMATS]
#: format name -> default file extension
EXTENSIONS = {f.name: f.extension for f in FORMATS}
#: File name endings (without .gz) -> format, longest first (.speedscope.json before .json).
SUFFIXES = sorted(((s, f.name) for f in FORMATS for s in f.suffixes), key=lambda s: -len(s[0]))
_BY_NAME = {n: f.name for f in FORMATS for n in (f.name, *f.aliases)}
_UNCOMPRESSED = {f.name: f.uncompressed for f in FORMATS if f.uncompressed}
ExportFormat = Literal["chrome", "json", "perfetto", "pftrace", "pstats", "prof", "speedscope",
                       "collapsed", "fstrace", "html"]


def format_name(format: str) -> str:
    """The canonical name of a format (``json`` -> ``chrome``...); ValueError if unknown."""
    name = _BY_NAME.get(format)
    if name is None:
        raise ValueError(
            f"unknown format {format!r}: expected one of {', '.join(sorted(EXTENSIONS))}"
        )
    return name


def format_for_path(path: str, format_option: str = "format=") -> str:
    """The format a file name's extension names (a trailing ``.gz`` is ignored). The error names
    ``format_option`` as the other way to choose (the command line's ``-f/--format``)."""
    p = path[:-3] if path.endswith(".gz") else path
    for suffix, name in SUFFIXES:
        if p.endswith(suffix):
            return name
    endings = [s for f in FORMATS for s in f.suffixes]
    raise ValueError(
        f"cannot tell the format from {path!r}: use {', '.join(endings[:-1])} or {endings[-1]} "
        f"(.gz to compress), or give {format_option}"
    )


def check_compression(name: str, path: str) -> None:
    """ValueError when ``path`` asks for gzip (``.gz``) and format ``name`` is never compressed;
    the message suggests the name without ``.gz``."""
    if path.endswith(".gz") and name in _UNCOMPRESSED:
        raise ValueError(f"{_UNCOMPRESSED[name]}: use {path[:-3]!r}, not {path!r}")


def host_marked(trace: Trace, name: str, extra_host: Collection[str] = (),
                host: Literal["mark", "drop", "show"] = "mark") -> Trace:
    """``trace`` as format ``name`` writes it: host code (framescope.analysis._host_code) marked, dropped
    or folded as export_trace() says; ``.fstrace`` keeps what was recorded."""
    if name == "fstrace":
        return trace
    from framescope.analysis import _host_code

    classes = _host_code.symbol_classes(trace, extra_host)
    if _host_code.HOST not in classes:
        return trace
    summary = name in ("pstats", "html")
    return _core._with_host(trace, classes, summary and host != "show",
                            host == "drop" and not summary)


def export_trace(trace: Trace, path: str | os.PathLike[str], format: str | None = None,
                 extra_host: Collection[str] = (),
                 host: Literal["mark", "drop", "show"] = "mark") -> None:
    """Writes ``trace`` to ``path`` in ``format`` (from the extension when None).

    Host code (framescope.analysis._host_code; ``extra_host`` names more files): with ``host="mark"``
    it is kept in traces with the category "host" (Chrome JSON, Perfetto) and folded into one
    ``[host]`` function in pstats and the HTML report; ``"drop"`` leaves it out of traces
    (what it called kept: the trace starts at the program's code), folded in pstats and the
    report; ``"show"`` marks it in traces and lists its functions in pstats and the report.
    ``.fstrace`` always keeps what was recorded, unmarked."""
    p = _arguments.path(path)
    if format is not None and not isinstance(format, str):
        raise TypeError(f"format must be a str (e.g. 'chrome', 'perfetto') or None, not "
                        f"{type(format).__name__}")
    name = format_name(format) if format is not None else format_for_path(p)
    check_compression(name, p)
    trace = host_marked(trace, name, extra_host, host)
    if name == "fstrace":
        trace.save(p)
    elif name == "html":  # the report page (framescope.export._report), written in Python
        from framescope.export import _report as report

        report.write(report.from_trace(trace, os.path.basename(p)), p)
    elif name == "parquet":  # native rows written by pyarrow (framescope.tables)
        from framescope.tables._parquet import write_parquet

        write_parquet(trace, p)
    else:
        trace.export(p, name)  # (asyncio Tasks' tracks: by the writers, cpp/export/task_tracks.h)


def write_pstats(trace: Trace, path: str) -> None:
    """Writes ``trace`` as cProfile's stats (kept for callers of the older helper)."""
    export_trace(trace, path, "pstats")
