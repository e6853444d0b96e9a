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
from typing import Literal, Sequence

from framescope.cli_traces import _FORMAT_CHOICES, add_trace_commands, resolve_output, run_trace_command
from framescope.flight_recorder import FlightRecorder, parse_signal
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
    run.add_argument("--include-files", action="append", metavar="GLOB", default=None,
                     help="record only Python frames of files matching GLOB (repeatable)")
    run.add_argument("--exclude-files", action="append", metavar="GLOB", default=None,
                     help="do not record Python frames of files matching GLOB (repeatable); "
                          "their callees in other files are recorded")
    run.add_argument("--max-depth", type=int, default=None, metavar="N",
                     help="record the outer N levels of Python calls only")
    run.add_argument("--min-duration", default=None, metavar="TIME",
                     help="leave out slices shorter than TIME (e.g. 500ns, 20us, 1.5ms) from the "
                          "outputs")
    run.add_argument("--on-limit", choices=["stop", "keep_newest"], default=None,
                     help="at the memory limit: stop recording (default) or keep the newest "
                          "events (a flight recorder)")
    run.add_argument("--dump-on", metavar="SIGNAL", default=None,
                     help="flight recorder: on this signal (e.g. SIGUSR1), and when an exception "
                          "goes unhandled in the program, write the recorded window to "
                          "OUTPUT.dumpN.EXT without stopping; implies --on-limit keep_newest")
    run.add_argument("args", nargs=argparse.REMAINDER, help="the script and its arguments")
    add_trace_commands(sub)
    return parser


_TIME_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def parse_duration_ns(text: str) -> int:
    """``500``, ``500ns``, ``20us``, ``1.5ms``, ``2s`` as nanoseconds (ValueError otherwise)."""
    t = text.strip().lower()
    for unit in ("ns", "us", "µs", "ms", "s"):
        if t.endswith(unit):
            number, factor = t[: -len(unit)], _TIME_UNITS[unit]
            break
    else:
        number, factor = t, 1
    try:
        value = float(number) * factor
    except ValueError:
        raise ValueError(f"not a duration: {text!r} (e.g. 500ns, 20us, 1.5ms)") from None
    if not value >= 0 or value > 2**62:
        raise ValueError(f"not a duration: {text!r}")
    return int(value)


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


def _load_script(path: str) -> tuple[types.CodeType, types.ModuleType] | None:
    """The code of a script file and the fresh ``__main__`` it runs in, as ``python path`` runs
    it (``__file__`` absolute, ``sys.argv[0]`` as given). Prepared before the session starts, so
    that the recording begins with the script's own code. None for directories and zip files
    with a ``__main__.py`` (runpy runs those, as python does)."""
    if os.path.isdir(path) or zipfile.is_zipfile(path):
        return None
    abspath = os.path.abspath(path)
    with io.open_code(abspath) as f:
        source = f.read()
    code = compile(source, abspath, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__file__ = abspath
    main.__cached__ = None  # type: ignore[attr-defined]
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", abspath)
    return code, main


def _load_module(name: str) -> tuple[types.CodeType, types.ModuleType]:
    """The code of a module run as ``python -m name`` and its ``__main__``, with the globals
    runpy gives it. Finding it imports its parent packages (before the session starts).

    Raises:
        ImportError: no such module (or a package without ``__main__``), as python -m says.
    """
    try:
        _, spec, code = runpy._get_module_details(name)  # type: ignore[attr-defined]
    except ImportError:
        raise
    except Exception as exc:  # runpy's own error type: the message python -m prints
        raise ImportError(str(exc)) from None
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=spec.origin, __cached__=spec.cached, __doc__=None,
                         __loader__=spec.loader, __package__=spec.parent, __spec__=spec,
                         __builtins__=builtins)
    return code, main


def run(opts: argparse.Namespace) -> int:
    args = list(opts.args)
    if args and args[0] == "--":
        args = args[1:]
    if opts.module is None and not args:
        print("framescope run: give a script or -m module", file=sys.stderr)
        return 2
    launcher = [sys.argv[0], os.path.abspath(sys.argv[0]), *_RUNPY_FILES]
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
    try:
        dump_signal = parse_signal(opts.dump_on) if opts.dump_on is not None else None
    except ValueError as exc:
        print(f"framescope run: --dump-on: {exc}", file=sys.stderr)
        return 2
    try:
        min_duration_ns = parse_duration_ns(opts.min_duration) if opts.min_duration else 0
    except ValueError as exc:
        print(f"framescope run: --min-duration: {exc}", file=sys.stderr)
        return 2
    on_limit: Literal["stop", "keep_newest"] = opts.on_limit or (
        "keep_newest" if dump_signal is not None else "stop")
    try:
        program: tuple[types.CodeType, types.ModuleType] | None
        if opts.module is not None:
            program = _load_module(target)
            sys.argv[0] = program[1].__file__ or target
        else:
            program = _load_script(target)
    except (ImportError, OSError, SyntaxError, ValueError) as exc:
        if isinstance(exc, SyntaxError):
            traceback.print_exception(type(exc), exc, None)
        else:
            print(f"framescope run: {exc}", file=sys.stderr)
        return 1
    try:
        prof = profile(with_stack=True, c_calls=opts.c_calls, backend=opts.backend,
                       memory_limit=opts.memory_limit, on_limit=on_limit,
                       include_files=opts.include_files, exclude_files=opts.exclude_files,
                       max_depth=opts.max_depth, min_duration_ns=min_duration_ns)
    except (TypeError, ValueError) as exc:
        print(f"framescope run: {exc}", file=sys.stderr)
        return 2
    # The launcher's frames (the console script, runpy for python -m framescope) are never
    # recorded, like framescope's own.
    prof._launcher_files = launcher
    recorder = FlightRecorder(prof, output, output_format, dump_signal) if dump_signal else None
    code = 0
    failure: BaseException | None = None
    if recorder is not None:
        recorder.install()
    prof.start()
    try:
        if program is None:
            runpy.run_path(target, run_name="__main__")
        else:
            # as python: the module stays __main__ afterwards
            sys.modules["__main__"] = program[1]
            exec(program[0], program[1].__dict__)
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException as exc:  # noqa: BLE001 - shown as python shows it, after the stop
        if recorder is not None:
            recorder.dump(f"unhandled {type(exc).__name__}")
        failure = exc
        code = 130 if isinstance(exc, KeyboardInterrupt) else 1
    finally:
        prof.stop()
        if recorder is not None:
            recorder.uninstall()
        if failure is not None:  # printed once stopped: traceback's code is not the program's
            _print_user_traceback(failure)
        sys.stdout.flush()
        prof.export(output, format=output_format)
        if opts.limit > 0:
            print(prof.summary(limit=opts.limit, sort_by=opts.sort), file=sys.stderr)
        print(f"framescope: trace written to {output} (backend: {prof.backend})",
              file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    opts = _parser().parse_args(argv)
    if opts.command == "run":
        return run(opts)
    return run_trace_command(opts)


if __name__ == "__main__":
    sys.exit(main())
