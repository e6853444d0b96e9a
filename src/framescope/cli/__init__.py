"""The ``framescope`` command line (``framescope.cli:main``, ``python -m framescope``).

One module per command (``framescope.cli.<command>``), each with ``add_parser(sub)`` and
``run(opts) -> int``, listed once in COMMANDS (in ``--help``'s order); main() builds the parser
from them and runs the one asked for. Shared pieces are private modules: _args (option values,
run's argv split), _options (run's recording options, shared with attach), _output (-o/-f and
error lines), _runpy (running the program as python would), _finish (the end of a run)."""

from __future__ import annotations

import argparse
from typing import Protocol, Sequence, cast

from framescope import __version__
from framescope.cli import attach, convert, diff, merge, report, run, sql, summary
from framescope.cli._args import Parser


class Command(Protocol):
    def add_parser(self, sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None: ...

    def run(self, opts: argparse.Namespace) -> int: ...


COMMANDS: dict[str, Command] = {
    "run": run, "convert": convert, "summary": summary, "attach": attach, "report": report,
    "merge": merge, "sql": sql, "diff": diff,
}


def _parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="framescope",
        description="Low-overhead profiler for CPython: every Python call, plus native ranges.",
    )
    parser.add_argument("-V", "--version", action="version", version=f"framescope {__version__}")
    sub = cast("argparse._SubParsersAction[argparse.ArgumentParser]",
               parser.add_subparsers(dest="command", required=True, parser_class=Parser))
    for command in COMMANDS.values():
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    if args and args[0] == "run":  # the program's own arguments are not framescope's to parse
        opts = run.parse_argv(parser, args[1:])
    else:
        opts = parser.parse_args(args)
    return COMMANDS[opts.command].run(opts)
