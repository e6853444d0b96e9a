"""``framescope summary TRACE``: the summary table of a saved trace or a Chrome JSON trace."""

from __future__ import annotations

import argparse
import sys

from framescope.cli._options import add_summary_options
from framescope.cli._output import error_text, load_trace


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    summary = sub.add_parser("summary", help="print the summary table of a saved trace")
    summary.add_argument("input", help="a trace saved with profile.save() or -o x.fstrace, or "
                                       "a Chrome JSON trace (framescope's, torch.profiler's)")
    add_summary_options(summary)


def run(opts: argparse.Namespace) -> int:
    from framescope.export._chrome_summary import is_chrome_json, summary_of_chrome

    if is_chrome_json(opts.input):
        try:
            print(summary_of_chrome(opts.input, opts.limit))
        except (OSError, ValueError) as exc:
            print(f"framescope summary: {error_text(exc)}", file=sys.stderr)
            return 1
        return 0
    prof = load_trace("summary", opts.input)
    if prof is None:
        return 1
    try:
        print(prof.summary(limit=opts.limit, sort_by=opts.sort, by_thread=opts.by_thread,
                           show_host=opts.show_host, by_task=opts.by_task))
    except ValueError as exc:  # no CPU times / no memory samples in this trace
        print(f"framescope summary: {exc}", file=sys.stderr)
        return 1
    return 0
