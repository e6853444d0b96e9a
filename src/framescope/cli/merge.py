"""``framescope merge TRACE.fstrace ... [-o job.pftrace]``: the traces of several processes or
ranks as one, on one clock."""

from __future__ import annotations

import argparse
import sys

from framescope.cli._output import FORMAT_CHOICES, error_text, resolve_output
from framescope.cli._tables import write_dataset_command


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    merge = sub.add_parser(
        "merge",
        help="merge saved traces of several processes or ranks into one, on one clock",
        usage="framescope merge TRACE.fstrace ... [-o job.pftrace]",
    )
    merge.add_argument("inputs", nargs="+", metavar="TRACE",
                       help="saved traces (.fstrace): e.g. the rankN.fstrace of each rank")
    merge.add_argument("-o", "--output", default=None,
                       help="the merged trace; its extension picks the format "
                            "(default: merged.pftrace)")
    merge.add_argument("-f", "--format", choices=FORMAT_CHOICES, default=None,
                       help="output format (default: from -o's extension)")
    merge.add_argument("--limit", type=int, default=0,
                       help="rows of a summary of the merged trace to print (default 0: no "
                            "summary; -1: every row)")


def run(opts: argparse.Namespace) -> int:
    from framescope.processes._merge import merge_files
    from framescope.tables._dataset import is_dataset_output

    if opts.output is not None and is_dataset_output(opts.output):  # merge ... -o DIR/
        return write_dataset_command("merge", list(opts.inputs), opts.output)
    try:
        output, name = resolve_output(opts.output or "merged.pftrace", opts.format)
        prof, placed, warnings = merge_files(list(opts.inputs))
        prof.export(output, format=name)
    except (OSError, ValueError, ImportError) as exc:  # ImportError: no pyarrow for .parquet
        print(f"framescope merge: {error_text(exc)}", file=sys.stderr)
        return 1
    for part in placed:
        print(f"framescope merge: {part.describe()}", file=sys.stderr)
    for warning in warnings:
        print(warning, file=sys.stderr)
    if opts.limit != 0:
        print(prof.summary(limit=opts.limit))
    print(f"framescope: merged {len(placed)} trace{'' if len(placed) == 1 else 's'} into "
          f"{output}", file=sys.stderr)
    return 0
