"""``framescope report TRACE [-o report.html]`` (or ``--diff A B``): the HTML report page."""

from __future__ import annotations

import argparse
import os
import sys

from framescope.cli._output import error_text
from framescope.cli._tables import report_diff


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    from framescope.export._report import DEFAULT_MAX_NODES

    report = sub.add_parser(
        "report",
        help="write a self-contained HTML report (flame graph per thread, summary table)",
        usage="framescope report TRACE [-o report.html] | framescope report --diff A B "
              "[-o diff.html]",
    )
    report.add_argument("--diff", nargs=2, metavar=("A", "B"), default=None,
                        help="instead: the comparison of two runs (or groups of runs A1,A2,A3) "
                             "as framescope diff prints it, as a page")
    report.add_argument("trace", nargs="?", default=None, help="a saved framescope trace (.fstrace) or a Chrome JSON "
                                      "trace (.json, .json.gz: framescope's, torch.profiler's)")
    report.add_argument("-o", "--output", default=None,
                        help="HTML file to write (default: TRACE with .html)")
    report.add_argument("--max-nodes", type=int, default=DEFAULT_MAX_NODES,
                        help="call paths kept in the flame graphs (default: %(default)s)")


def run(opts: argparse.Namespace) -> int:
    from framescope.export import _report as html_report

    if opts.diff is not None:
        if opts.trace is not None:
            print("framescope report: give a TRACE or --diff A B, not both", file=sys.stderr)
            return 2
        return report_diff(opts.diff[0], opts.diff[1], opts.output)
    if opts.trace is None:
        print("framescope report: give a TRACE (or --diff A B)", file=sys.stderr)
        return 2
    output = opts.output
    if output is None:
        base = opts.trace[:-3] if opts.trace.endswith(".gz") else opts.trace
        output = os.path.splitext(base)[0] + ".html"
    try:
        data = html_report.load(opts.trace)
        html_report.write(data, output, max_nodes=opts.max_nodes)
    except (OSError, ValueError) as exc:
        print(f"framescope report: {error_text(exc)}", file=sys.stderr)
        return 1
    print(f"framescope: report written to {output}", file=sys.stderr)
    return 0
