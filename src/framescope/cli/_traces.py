"""``framescope convert`` and ``framescope summary`` (saved traces), and how ``run -o/-f`` pick
the output file and format."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

from framescope.export._formats import EXTENSIONS, check_compression, format_for_path, format_name
from framescope.tables._deps import MissingDependency

_FORMAT_CHOICES = ["chrome", "perfetto", "pstats", "speedscope", "collapsed", "fstrace", "html",
                   "parquet"]


def resolve_output(output: str | None, format: str | None) -> tuple[str, str]:
    """The file and format ``framescope run`` writes: ``-f`` wins, else ``-o``'s extension;
    without ``-o`` the name follows the format (``framescope.trace.json``,
    ``framescope.trace.prof``...). Raises ValueError for a bad combination."""
    if output is not None and "\0" in output:
        raise ValueError("the output path contains a NUL character")
    if format is not None:
        name = format_name(format)
    elif output is not None:
        name = format_for_path(output, "-f/--format")
    else:
        name = "chrome"
    if output is None:
        output = "framescope.trace" + EXTENSIONS[name]
    check_compression(name, output)
    return output, name


def error_text(exc: BaseException) -> str:
    """An error as one clean line for the command line: framescope's own OSErrors carry their
    whole message (``framescope: cannot open 'x': No such file or directory``) as strerror,
    which str() would wrap in ``[Errno 2] ...: 'x'``; a plain OSError reads as python's."""
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror
        if text.startswith("framescope: "):
            return text[len("framescope: "):]
        if exc.filename is not None:
            return f"{exc.filename!r}: {text}"
        return text
    return str(exc)


def stream_file(output: str, format: str) -> str:
    """Where ``framescope run --stream`` streams the events: ``output`` itself for a .fstrace,
    else a hidden temporary next to it (converted to ``output`` at the end, then removed). An
    output that is not a regular file (/dev/null, a FIFO, /dev/stdout) cannot be streamed into
    (the file is completed in place and read back) and has no folder to put a temporary in: the
    stream then goes to a temporary in the system's temporary folder."""
    folder, name = os.path.split(os.path.abspath(output))
    if written_in_place(output):
        return os.path.join(tempfile.gettempdir(),
                            f".framescope-{os.getpid()}-{name}.stream.fstrace")
    if format == "fstrace":
        return output
    return os.path.join(folder, f".{name}.{os.getpid()}.stream.fstrace")


def written_in_place(output: str) -> bool:
    """True when ``output`` is written in place rather than replaced (the core's rule: an
    existing path that is not a regular file, or any path in /dev but /dev/shm, or in /proc)."""
    if os.path.exists(output) and not os.path.isfile(output):
        return True
    real = os.path.realpath(os.path.dirname(os.path.abspath(output)))
    if real == "/dev/shm" or real.startswith("/dev/shm/"):
        return False
    return any(real == top or real.startswith(top + "/") for top in ("/dev", "/proc"))


def add_trace_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    convert = sub.add_parser(
        "convert",
        help="write a saved trace (.fstrace) in another format",
        usage="framescope convert [-f FORMAT] in.fstrace out.EXT | "
              "framescope convert rank*.fstrace --to DIR",
    )
    convert.add_argument("paths", nargs="+", metavar="PATH",
                         help="in.fstrace out.EXT: a trace saved with profile.save() or "
                              "-o x.fstrace, and the file to write (its extension picks the "
                              "format); with --to: the traces to write as a dataset")
    convert.add_argument("--to", default=None, metavar="DIR",
                         help="write the traces (one per rank) as a Hive-partitioned Parquet "
                              "dataset DIR/rank=N/part-K.parquet, on the merged clock")
    convert.add_argument("-f", "--format", choices=_FORMAT_CHOICES, default=None,
                         help="output format (default: from the output's extension)")
    summary = sub.add_parser("summary", help="print the summary table of a saved trace")
    summary.add_argument("input", help="a trace saved with profile.save() or -o x.fstrace, or "
                                       "a Chrome JSON trace (framescope's, torch.profiler's)")
    summary.add_argument("--limit", type=int, default=20, help="rows (default: 20; -1: every row)")
    summary.add_argument("--sort", choices=["self", "total", "calls", "on_cpu", "memory"],
                         default="self",
                         help="order (default: self time; on_cpu: self time on CPU; memory: "
                              "bytes allocated, for a trace recorded with profile_memory)")
    summary.add_argument("--by-thread", action="store_true",
                         help="one table per thread, in percent of its own time")
    summary.add_argument("--by-task", action="store_true",
                         help="one row per asyncio Task (its steps, time running and awaiting)")
    summary.add_argument("--show-host", action="store_true",
                         help="list the functions of host code too (a Jupyter kernel, pytest, "
                              "framescope; by default their total is one line under the table)")


def _convert_paths(opts: argparse.Namespace) -> str | None:
    """Sets opts.input/opts.output from convert's paths; an error text when they do not fit."""
    if opts.to is not None:
        return None
    if len(opts.paths) != 2:
        return ("give one trace and the file to write (framescope convert in.fstrace out.EXT), "
                "or several traces and --to DIR")
    opts.input, opts.output = opts.paths
    return None


def run_trace_command(opts: argparse.Namespace) -> int:
    from framescope.profiler._profile import load

    if opts.command == "convert":
        from framescope.tables._cli import write_dataset_command
        from framescope.tables._dataset import is_dataset_output

        problem = _convert_paths(opts)
        if problem:
            print(f"framescope convert: error: {problem}", file=sys.stderr)
            return 2
        if opts.to is not None:
            return write_dataset_command("convert", list(opts.paths), opts.to)
        if is_dataset_output(opts.output):  # convert in.fstrace DIR/
            return write_dataset_command("convert", [opts.input], opts.output)
    if opts.command == "summary":
        from framescope.analysis._chrome_summary import is_chrome_json, summary_of_chrome

        if is_chrome_json(opts.input):
            try:
                print(summary_of_chrome(opts.input, opts.limit))
            except (OSError, ValueError) as exc:
                print(f"framescope summary: {error_text(exc)}", file=sys.stderr)
                return 1
            return 0

    try:
        prof = load(opts.input)
    except (OSError, ValueError) as exc:
        print(f"framescope {opts.command}: {error_text(exc)}", file=sys.stderr)
        return 1
    if opts.command == "summary":
        try:
            print(prof.summary(limit=opts.limit, sort_by=opts.sort, by_thread=opts.by_thread,
                               show_host=opts.show_host, by_task=opts.by_task))
        except ValueError as exc:  # no CPU times / no memory samples in this trace
            print(f"framescope summary: {exc}", file=sys.stderr)
            return 1
        return 0
    try:
        output, name = resolve_output(opts.output, opts.format)
        prof.export(output, format=name)
    except (OSError, ValueError, MissingDependency) as exc:  # no pyarrow for a .parquet
        print(f"framescope convert: {error_text(exc)}", file=sys.stderr)
        return 1
    print(f"framescope: {opts.input} -> {output} ({name})", file=sys.stderr)
    return 0
