"""``framescope summary TRACE``: the summary table of a saved trace or a Chrome JSON trace."""

from __future__ import annotations

import argparse
import sys

from framescope.cli._output import error_text, load_trace


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
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
