"""``framescope convert in.fstrace out.EXT`` (or ``rank*.fstrace --to DIR``): a saved trace in
another format, or traces as a Parquet dataset."""

from __future__ import annotations

import argparse
import sys

from framescope.cli._output import FORMAT_CHOICES, error_text, load_trace, resolve_output
from framescope.tables._deps import MissingDependency


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
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
    convert.add_argument("-f", "--format", choices=FORMAT_CHOICES, default=None,
                         help="output format (default: from the output's extension)")


def _convert_paths(opts: argparse.Namespace) -> str | None:
    """Sets opts.input/opts.output from convert's paths; an error text when they do not fit."""
    if opts.to is not None:
        return None
    if len(opts.paths) != 2:
        return ("give one trace and the file to write (framescope convert in.fstrace out.EXT), "
                "or several traces and --to DIR")
    opts.input, opts.output = opts.paths
    return None


def run(opts: argparse.Namespace) -> int:
    from framescope.cli._tables import write_dataset_command
    from framescope.tables._dataset import is_dataset_output

    problem = _convert_paths(opts)
    if problem:
        print(f"framescope convert: error: {problem}", file=sys.stderr)
        return 2
    if opts.to is not None:
        return write_dataset_command("convert", list(opts.paths), opts.to)
    if is_dataset_output(opts.output):  # convert in.fstrace DIR/
        return write_dataset_command("convert", [opts.input], opts.output)
    prof = load_trace("convert", opts.input)
    if prof is None:
        return 1
    try:
        output, name = resolve_output(opts.output, opts.format)
        prof.export(output, format=name)
    except (OSError, ValueError, MissingDependency) as exc:  # no pyarrow for a .parquet
        print(f"framescope convert: {error_text(exc)}", file=sys.stderr)
        return 1
    print(f"framescope: {opts.input} -> {output} ({name})", file=sys.stderr)
    return 0
