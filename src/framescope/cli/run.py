"""``framescope run [options] script.py [args] | -m module [args]``: the program under a
session, its children followed, the trace written at its exit."""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import types
from typing import Literal, Sequence

from framescope.cli._args import split_run_argv
from framescope.cli._finish import Finisher, cli_wording, say
from framescope.cli._options import (add_analysis_options, add_process_options,
                                     add_recording_options, add_torch_options)
from framescope.cli._output import check_output, resolve_output, stream_file
from framescope.cli._runpy import (RUNPY_FILES, has_main, load_module, load_script,
                                   quiet_excepthook, report_exception)
from framescope.processes import _clock_sync as clock_sync
from framescope.processes import _follow as follow
from framescope.processes import _ranks as ranks
from framescope.profiler import _session
from framescope.profiler._flight_recorder import FlightRecorder
from framescope.profiler._profile import profile
from framescope.cli._tables import prepare_output


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    run = sub.add_parser(
        "run",
        help="run a script or module under the profiler, write a trace, print a summary",
        usage="framescope run [options] (script.py | -m module) [args ...]",
        description="Runs a script or module as python would and writes its trace. Options go "
        "before the script or -m MODULE; everything after it goes to the program.",
        allow_abbrev=False,  # the target's arguments are split off by option name
    )
    run.add_argument("-m", dest="module", metavar="MODULE",
                     help="run a library module as a script (the rest of the line is its argv)")
    run.add_argument("--listen", action="store_true",
                     help="record nothing from the start; accept framescope attach PID through a "
                          "user-owned Unix socket instead (no ptrace needed; docs/attach.md)")
    add_recording_options(run)
    add_analysis_options(run)
    add_torch_options(run)
    add_process_options(run)


def parse_argv(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """``framescope run``'s options, with ``opts.module`` and ``opts.target_argv`` (the program's
    own arguments, never parsed by framescope: see split_run_argv)."""
    run_parser = _subparser(parser, "run")
    options, module, target_argv = split_run_argv(run_parser, argv)
    opts = parser.parse_args(["run", *options])
    opts.module, opts.target_argv = module, target_argv
    return opts


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:  # noqa: SLF001 - argparse keeps subparsers as an action
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            return action.choices[name]  # type: ignore[no-any-return]
    raise LookupError(name)


def _rank_output(opts: argparse.Namespace, output: str, output_format: str,
                 rank: ranks.RankInfo) -> tuple[str, str]:
    """A rank's own output file (framescope.processes._ranks.rank_output): ``rankN.fstrace`` by default,
    for ``framescope merge``."""
    if opts.output is None and opts.format is None:
        return ranks.rank_output(None, rank), "fstrace"
    return ranks.rank_output(output, rank), output_format


def _start_following(opts: argparse.Namespace, prof: profile, profile_kwargs: dict[str, object],
                     rank: ranks.RankInfo | None) -> follow.Follower | None:
    """Sets up recording of the program's children (unless --no-follow) and, in a rank of a
    job, the clock sync points (framescope.processes._clock_sync)."""
    if rank is not None:
        clock_sync.install_hooks()
    if opts.no_follow:
        return None
    try:
        return follow.Follower(prof, profile_kwargs)
    except OSError as exc:
        print(f"framescope run: not following child processes: {exc}", file=sys.stderr)
        return None


def _after_session(prof: profile, follower: follow.Follower | None) -> None:
    """Once the session stopped (and ended: Finisher's stop_quietly named this process in its
    trace), merges the children's traces in (a session streamed to the output itself is written
    again in full by the finisher, with them)."""
    trace = _session.recorded_trace(prof)
    if trace is None:
        if follower is not None:
            follower.close()
        return
    if follower is not None:
        for warning in follower.collect(trace):
            say(cli_wording(warning))


def run(opts: argparse.Namespace) -> int:
    """Runs the program under a session. The program's exceptions propagate (python reports
    them, and exits as it would); the trace is written at interpreter exit (see Finisher)."""
    module: str | None = opts.module
    target_argv: list[str] = opts.target_argv
    if module is None:
        if not target_argv:
            print("framescope run: error: give a script or -m module (see framescope run --help)",
                  file=sys.stderr)
            return 2
        target = target_argv[0]
        # As python: a file it cannot open is status 2, a directory or zip file without a
        # __main__ module status 1, each on one line.
        if not os.path.exists(target):
            print(f"framescope run: can't open file {os.path.abspath(target)!r}: [Errno 2] No "
                  "such file or directory", file=sys.stderr)
            return 2
        if not has_main(target):
            print(f"framescope run: can't find '__main__' module in {os.path.abspath(target)!r}",
                  file=sys.stderr)
            return 1
    if opts.listen:
        from framescope.attach._listen import exec_listening

        return exec_listening(module, target_argv)  # returns only when exec fails
    try:
        output, output_format = resolve_output(opts.output, opts.format)
    except ValueError as exc:
        print(f"framescope run: error: {exc}", file=sys.stderr)
        return 2
    rank = ranks.current()
    if rank is not None:
        output, output_format = _rank_output(opts, output, output_format, rank)
        if rank.rank != 0:
            opts.limit = 0  # one summary per job: rank 0's
    if (problem := check_output(output)) is not None:
        print(f"framescope run: error: {problem}", file=sys.stderr)
        return 2
    if (problem := prepare_output(output_format)) is not None:
        print(f"framescope run: error: {problem}", file=sys.stderr)
        return 2
    opts.output, opts.format = output, output_format
    if opts.sort == "on_cpu" and opts.no_cpu_time:
        print("framescope run: error: --sort on_cpu needs the CPU times that --no-cpu-time turns "
              "off", file=sys.stderr)
        return 2
    profile_memory = opts.profile_memory or opts.sort == "memory"
    on_limit: Literal["stop", "keep_newest"] = opts.on_limit or (
        "keep_newest" if opts.dump_on is not None else "stop")
    if opts.stream and on_limit == "keep_newest":
        print("framescope run: error: --stream writes every event to the file; it cannot be "
              "combined with --dump-on or --on-limit keep_newest (a flight recorder keeps the "
              "newest events in memory)", file=sys.stderr)
        return 2
    opts.stream_to = stream_file(output, output_format) if opts.stream else None
    # Followed children get the same options but record in memory, each to its own file, and
    # keep their oldest events at the limit (the flight recorder, --dump-on, is this process's).
    profile_kwargs = dict(with_stack=True, c_calls=opts.c_calls, backend=opts.backend,
                          memory_limit=opts.memory_limit, torch_ops=opts.torch_ops,
                          record_shapes=opts.record_shapes, cpu_time=not opts.no_cpu_time,
                          profile_memory=profile_memory,
                          include_files=opts.include_files, exclude_files=opts.exclude_files,
                          max_depth=opts.max_depth, min_duration_ns=opts.min_duration)
    try:
        prof = profile(**profile_kwargs, on_limit=on_limit,
                       stream_to=opts.stream_to)
    except (RuntimeError, TypeError, ValueError) as exc:  # torch_ops without torch, bad options
        print(f"framescope run: error: {exc}", file=sys.stderr)
        return 2
    # The launcher's frames (the console script; runpy under python -m framescope) are never
    # recorded, like framescope's own.
    _session.set_launcher_files(prof, [sys.argv[0], os.path.abspath(sys.argv[0]), *RUNPY_FILES])
    if module is not None:
        sys.argv = [module, *target_argv]
        sys.path.insert(0, os.getcwd())
    else:
        sys.argv = list(target_argv)
        sys.path.insert(0, os.path.dirname(os.path.abspath(target_argv[0])))
    script: tuple[types.CodeType, dict[str, object]] | None
    if module is not None:
        try:
            code, namespace, origin = load_module(module)
        except ImportError as exc:
            print(f"framescope run: {exc}", file=sys.stderr)
            return 1
        script = (code, namespace)
        sys.argv[0] = origin
    else:
        try:
            script = load_script(target_argv[0])
        except OSError as exc:  # e.g. unreadable: as python, status 2
            print(f"framescope run: can't open file {os.path.abspath(target_argv[0])!r}: "
                  f"[Errno {exc.errno}] {exc.strerror}", file=sys.stderr)
            return 2
        except (SyntaxError, ValueError) as exc:  # as python reports a script it can't run
            sys.excepthook(type(exc), exc.with_traceback(None), None)
            return 1
    recorder = None
    if opts.dump_on is not None:
        recorder = FlightRecorder(prof, opts.output, opts.format, opts.dump_on)
        recorder.install()  # before the session: signal.signal is Python code
    finisher = Finisher(prof, opts)
    follower = _start_following(opts, prof, profile_kwargs, rank)
    finisher.after_stop.append(lambda: _after_session(prof, follower))
    finisher.install()
    try:
        prof.start()
    except OSError as exc:  # the stream's file cannot be created
        finisher.finished = True  # nothing to write
        if follower is not None:
            follower.close()
        print(f"framescope run: error: {exc}", file=sys.stderr)
        return 2
    try:
        if script is None:
            runpy.run_path(target_argv[0], run_name="__main__")
        else:
            exec(script[0], script[1])
    except SystemExit:
        raise  # python exits with its code (the trace is written at exit)
    except BaseException as exc:  # noqa: BLE001 - reported as python reports it
        if recorder is not None:
            recorder.dump(f"unhandled {type(exc).__name__}")
        report_exception(exc)
        if isinstance(exc, KeyboardInterrupt):
            # As python after an uncaught Ctrl-C: exit by SIGINT, once the interpreter has
            # finalized (threads joined, atexit run: the trace is written then).
            sys.excepthook = quiet_excepthook
            raise KeyboardInterrupt from None
        return 1
    return 0
