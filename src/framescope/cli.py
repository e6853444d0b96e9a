"""The framescope command line: ``framescope run [options] script.py [args] | -m module [args]``."""

from __future__ import annotations

import argparse
import builtins
import importlib.machinery
import io
import os
import runpy
import sys
import traceback
import types
import zipfile
from typing import Sequence

from framescope.cli_traces import _FORMAT_CHOICES, add_trace_commands, resolve_output, run_trace_command
from framescope import clock_sync, follow, ranks
from framescope.profiler import profile


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="framescope",
        description="Low-overhead profiler for CPython: every Python call, plus native ranges.",
    )
    parser.add_argument("-V", "--version", action="version", version="framescope 0.1.0")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run",
        help="run a script or module under the profiler, write a trace, print a summary",
        usage="framescope run [options] (script.py | -m module) [args ...]",
    )
    run.add_argument("-o", "--output", default=None,
                     help="trace file to write; its extension picks the format (.json, .json.gz, "
                          ".pftrace, .speedscope.json, .collapsed, .prof, .fstrace; default: "
                          "framescope.trace + the format's extension)")
    run.add_argument("-f", "--format", choices=_FORMAT_CHOICES, default=None,
                     help="trace format (default: from -o's extension, else chrome)")
    run.add_argument("-m", dest="module", metavar="MODULE", help="run a library module as a script")
    run.add_argument("--c-calls", action="store_true", help="also record builtins")
    run.add_argument("--backend", default="auto",
                     choices=["auto", "frame_hook", "fallback", "sys.monitoring", "setprofile"],
                     help="where Python calls come from (default auto: the PEP 523 frame hook, or "
                          "the fallback when another tool's frame hook is installed)")
    run.add_argument("--limit", type=int, default=20, help="rows of the summary (0: none)")
    run.add_argument("--sort", choices=["self", "total", "calls"], default="self",
                     help="summary order (default: self time)")
    run.add_argument("--memory-limit", default="1GiB", help="event buffer limit (default: 1GiB)")
    _add_torch_options(run)
    _add_process_options(run)
    run.add_argument("args", nargs=argparse.REMAINDER, help="the script and its arguments")
    add_trace_commands(sub)
    _add_report_parser(sub)
    _add_merge_parser(sub)
    return parser


def _add_process_options(run: argparse.ArgumentParser) -> None:
    run.add_argument("--no-follow", action="store_true",
                     help="record this process only, not its Python children (multiprocessing "
                          "workers, subprocesses of sys.executable)")


def _add_merge_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
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
    merge.add_argument("-f", "--format", choices=_FORMAT_CHOICES, default=None,
                       help="output format (default: from -o's extension)")
    merge.add_argument("--limit", type=int, default=0,
                       help="rows of a summary of the merged trace to print (default: none)")


def merge(opts: argparse.Namespace) -> int:
    from framescope.merge import merge_files

    try:
        output, name = resolve_output(opts.output or "merged.pftrace", opts.format)
        prof, placed, warnings = merge_files(list(opts.inputs))
        prof.export(output, format=name)
    except (OSError, ValueError) as exc:
        print(f"framescope merge: {exc}", file=sys.stderr)
        return 1
    for part in placed:
        print(f"framescope merge: {part.describe()}", file=sys.stderr)
    for warning in warnings:
        print(warning, file=sys.stderr)
    if opts.limit > 0:
        print(prof.summary(limit=opts.limit))
    print(f"framescope: merged {len(placed)} traces into {output}", file=sys.stderr)
    return 0


def _add_report_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    from framescope.report import DEFAULT_MAX_NODES

    report = sub.add_parser(
        "report",
        help="write a self-contained HTML report (flame graph per thread, summary table)",
        usage="framescope report TRACE [-o report.html]",
    )
    report.add_argument("trace", help="a saved framescope trace (.fstrace) or a Chrome JSON "
                                      "trace (.json, .json.gz: framescope's, torch.profiler's)")
    report.add_argument("-o", "--output", default=None,
                        help="HTML file to write (default: TRACE with .html)")
    report.add_argument("--max-nodes", type=int, default=DEFAULT_MAX_NODES,
                        help="call paths kept in the flame graphs (default: %(default)s)")


def report(opts: argparse.Namespace) -> int:
    from framescope import report as html_report

    output = opts.output
    if output is None:
        base = opts.trace[:-3] if opts.trace.endswith(".gz") else opts.trace
        output = os.path.splitext(base)[0] + ".html"
    try:
        data = html_report.load(opts.trace)
        html_report.write(data, output, max_nodes=opts.max_nodes)
    except (OSError, ValueError) as exc:
        print(f"framescope report: {exc}", file=sys.stderr)
        return 1
    print(f"framescope: report written to {output}", file=sys.stderr)
    return 0


def _add_torch_options(run: argparse.ArgumentParser) -> None:
    run.add_argument("--torch-ops", action="store_true",
                     help="also record torch operators (aten::...) through torch's "
                          "RecordFunction observers")
    run.add_argument("--record-shapes", action="store_true",
                     help="keep input shapes of torch operators and ranges that provide them")


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


_RUNPY_FILES = {"<frozen runpy>", getattr(runpy, "__file__", "runpy.py")}


def _print_user_traceback(exc: BaseException) -> None:
    """Print the traceback as python would: without framescope's and runpy's frames."""
    tb = exc.__traceback__
    here = os.path.dirname(os.path.abspath(__file__))
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not (filename.startswith(here) or filename in _RUNPY_FILES):
            break
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)


def _run_script(path: str) -> None:
    """Runs a script file as ``python path`` does: a fresh ``__main__`` whose ``__file__`` is
    absolute (3.9+) while ``sys.argv[0]`` stays as given. Directories and zip files with a
    ``__main__.py`` go through runpy, as python does."""
    if os.path.isdir(path) or zipfile.is_zipfile(path):
        runpy.run_path(path, run_name="__main__")
        return
    abspath = os.path.abspath(path)
    with io.open_code(abspath) as f:
        source = f.read()
    code = compile(source, abspath, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__file__ = abspath
    main.__cached__ = None  # type: ignore[attr-defined]
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", abspath)
    sys.modules["__main__"] = main  # as python: the script's module stays __main__ afterwards
    exec(code, main.__dict__)


def _rank_output(opts: argparse.Namespace, output: str, output_format: str,
                 rank: ranks.RankInfo) -> tuple[str, str]:
    """A rank's own output file (framescope.ranks.rank_output): ``rankN.fstrace`` by default,
    for ``framescope merge``."""
    if opts.output is None and opts.format is None:
        return ranks.rank_output(None, rank), "fstrace"
    return ranks.rank_output(output, rank), output_format


def _start_following(opts: argparse.Namespace, profile_kwargs: dict[str, object],
                     rank: ranks.RankInfo | None) -> follow.Follower | None:
    """Sets up recording of the program's children (unless --no-follow) and, in a rank of a
    job, the clock sync points (framescope.clock_sync)."""
    if rank is not None:
        clock_sync.install_hooks()
    if opts.no_follow:
        return None
    try:
        return follow.Follower(profile_kwargs)
    except OSError as exc:
        print(f"framescope run: not following child processes: {exc}", file=sys.stderr)
        return None


def _finish_following(prof: profile, follower: follow.Follower | None) -> None:
    if follower is None:
        return
    for warning in follower.collect(prof.trace):
        print(warning, file=sys.stderr)


def run(opts: argparse.Namespace) -> int:
    args = list(opts.args)
    if args and args[0] == "--":
        args = args[1:]
    if opts.module is None and not args:
        print("framescope run: give a script or -m module", file=sys.stderr)
        return 2
    if opts.module is not None:
        target = opts.module
        sys.argv = [target, *args]
        sys.path.insert(0, os.getcwd())
    else:
        target = args[0]
        if not os.path.exists(target):
            print(f"framescope run: can't open file {target!r}: no such file", file=sys.stderr)
            return 2
        sys.argv = list(args)
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))

    try:
        output, output_format = resolve_output(opts.output, opts.format)
    except ValueError as exc:
        print(f"framescope run: {exc}", file=sys.stderr)
        return 2
    rank = ranks.current()
    if rank is not None:
        output, output_format = _rank_output(opts, output, output_format, rank)
    profile_kwargs = dict(with_stack=True, c_calls=opts.c_calls, backend=opts.backend,
                          memory_limit=opts.memory_limit, torch_ops=opts.torch_ops,
                          record_shapes=opts.record_shapes)
    try:
        prof = profile(**profile_kwargs)
    except RuntimeError as exc:  # torch_ops without a usable torch
        print(f"framescope run: {exc}", file=sys.stderr)
        return 2
    code = 0
    follower = _start_following(opts, profile_kwargs, rank)
    try:
        prof.start()
    except BaseException:
        if follower is not None:
            follower.close()
        raise
    try:
        if opts.module is not None:
            runpy.run_module(opts.module, run_name="__main__", alter_sys=True)
        else:
            _run_script(target)
    except SystemExit as exc:
        code = _exit_code(exc)
    except KeyboardInterrupt as exc:
        _print_user_traceback(exc)
        code = 130
    except BaseException as exc:  # noqa: BLE001 - shown as python shows it
        _print_user_traceback(exc)
        code = 1
    finally:
        prof.stop()
        _finish_following(prof, follower)
        sys.stdout.flush()
        prof.export(output, format=output_format)
        if opts.limit > 0 and (rank is None or rank.rank == 0):  # one summary per job
            print(prof.summary(limit=opts.limit, sort_by=opts.sort), file=sys.stderr)
        print(f"framescope: trace written to {output} (backend: {prof.backend})",
              file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    opts = _parser().parse_args(argv)
    if opts.command == "run":
        return run(opts)
    if opts.command == "report":
        return report(opts)
    if opts.command == "merge":
        return merge(opts)
    return run_trace_command(opts)


if __name__ == "__main__":
    sys.exit(main())
