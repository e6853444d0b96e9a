"""The framescope command line: ``framescope run [options] script.py [args] | -m module [args]``."""

from __future__ import annotations

import argparse
import atexit
import builtins
import importlib.machinery
import io
import os
import runpy
import signal
import sys
import types
import zipfile
from typing import Callable, Literal, NoReturn, Sequence, cast

from framescope import __version__, _core
from framescope.attach import _command as _attach_command
from framescope.processes import _clock_sync as clock_sync
from framescope.processes import _follow as follow
from framescope.processes import _process_table as processes
from framescope.processes import _ranks as ranks
from framescope.cli._traces import (
    _FORMAT_CHOICES,
    add_trace_commands,
    error_text,
    resolve_output,
    run_trace_command,
    stream_file,
    written_in_place,
)
from framescope.profiler._flight_recorder import FlightRecorder, parse_signal
from framescope.profiler._profile import parse_memory_limit, profile
from framescope.tables._cli import (
    TABLE_COMMANDS,
    add_table_commands,
    prepare_output,
    report_diff,
    run_table_command,
    write_dataset_command,
)


class _Parser(argparse.ArgumentParser):
    """Reports a usage error on one line (and exits with status 2), as a command should."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _memory_limit_arg(text: str) -> int:
    try:
        return parse_memory_limit(text)
    except (TypeError, ValueError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="framescope",
        description="Low-overhead profiler for CPython: every Python call, plus native ranges.",
    )
    parser.add_argument("-V", "--version", action="version", version=f"framescope {__version__}")
    sub = cast("argparse._SubParsersAction[argparse.ArgumentParser]",
                parser.add_subparsers(dest="command", required=True, parser_class=_Parser))
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
    _add_recording_options(run)
    _add_analysis_options(run)
    _add_torch_options(run)
    _add_process_options(run)
    add_trace_commands(sub)
    _attach_command.add_parser(sub, [_add_recording_options, _add_analysis_options,
                                     _add_torch_options])
    _add_report_parser(sub)
    _add_merge_parser(sub)
    add_table_commands(sub)
    return parser


def _add_recording_options(run: argparse.ArgumentParser) -> None:
    """The output and recording options of ``framescope run``, shared by ``framescope attach``."""
    run.add_argument("-o", "--output", default=None,
                     help="trace file to write; its extension picks the format (.json, .json.gz, "
                          ".pftrace, .speedscope.json, .collapsed, .prof, .fstrace, .html; default: "
                          "framescope.trace + the format's extension)")
    run.add_argument("-f", "--format", choices=_FORMAT_CHOICES, default=None,
                     help="trace format (default: from -o's extension, else chrome)")
    run.add_argument("--c-calls", action="store_true", help="also record builtins")
    run.add_argument("--backend", default="auto",
                     choices=["auto", "frame_hook", "fallback", "sys.monitoring", "setprofile"],
                     help="where Python calls come from (default auto: the PEP 523 frame hook, or "
                          "the fallback when another tool's frame hook is installed)")
    run.add_argument("--limit", type=int, default=20,
                     help="rows of the summary (default 20; 0: no summary; -1: every row)")
    run.add_argument("--sort", choices=["self", "total", "calls", "on_cpu", "memory"], default="self",
                     help="summary order (default: self time; on_cpu: self time on CPU)")
    run.add_argument("--by-thread", action="store_true",
                     help="one summary table per thread, in percent of its own time")
    run.add_argument("--by-task", action="store_true",
                     help="one summary row per asyncio Task: its steps, time running and "
                          "awaiting, its hottest functions")
    run.add_argument("--show-host", action="store_true",
                     help="list host code (framescope, runpy, a test runner) in the summary")
    run.add_argument("--memory-limit", default=None, type=_memory_limit_arg,
                     help="event buffer limit, e.g. 512MiB or 1.5GB (default: 1GiB; with "
                          "--stream 64MiB)")
    run.add_argument("--stream", action="store_true",
                     help="write the events to a .fstrace file while the program runs, so "
                          "memory stays flat: the -o file itself when it is a .fstrace, else a "
                          "temporary one next to it, converted to -o at the end (not with "
                          "--dump-on or --on-limit keep_newest)")


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
                       help="rows of a summary of the merged trace to print (default 0: no "
                            "summary; -1: every row)")


def merge(opts: argparse.Namespace) -> int:
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


def _add_report_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
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


def report(opts: argparse.Namespace) -> int:
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


def _duration_arg(text: str) -> int:
    try:
        return parse_duration_ns(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _max_depth_arg(text: str) -> int:
    from framescope.profiler._profile import MAX_DEPTH_LIMIT

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of levels: {text!r}") from None
    if not 1 <= value <= MAX_DEPTH_LIMIT:
        raise argparse.ArgumentTypeError(f"must be in 1..{MAX_DEPTH_LIMIT}, not {text}")
    return value


def _signal_arg(text: str) -> signal.Signals:
    try:
        return parse_signal(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _add_analysis_options(run: argparse.ArgumentParser) -> None:
    run.add_argument("--include-files", action="append", metavar="GLOB", default=None,
                     help="record only Python frames of files matching GLOB (repeatable)")
    run.add_argument("--exclude-files", action="append", metavar="GLOB", default=None,
                     help="do not record Python frames of files matching GLOB (repeatable); "
                          "their callees in other files are recorded")
    run.add_argument("--max-depth", type=_max_depth_arg, default=None, metavar="N",
                     help="keep the outer N levels of Python calls only")
    run.add_argument("--min-duration", type=_duration_arg, default=0, metavar="TIME",
                     help="leave out slices shorter than TIME (e.g. 500ns, 20us, 1.5ms) from the "
                          "outputs")
    run.add_argument("--no-cpu-time", action="store_true",
                     help="do not sample the threads' CPU clocks (no on-CPU times)")
    run.add_argument("--profile-memory", action="store_true",
                     help="count Python allocations: self/total bytes per function, a memory "
                          "counter track (implied by --sort memory)")
    run.add_argument("--on-limit", choices=["stop", "keep_newest"], default=None,
                     help="at the memory limit: stop recording (default) or keep the newest "
                          "events (a flight recorder)")
    run.add_argument("--dump-on", metavar="SIGNAL", type=_signal_arg, default=None,
                     help="flight recorder: on this signal (e.g. SIGUSR1), and when an exception "
                          "goes unhandled in the program, write the recorded window to "
                          "OUTPUT.dumpN.EXT without stopping; implies --on-limit keep_newest")


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


def _add_torch_options(run: argparse.ArgumentParser) -> None:
    run.add_argument("--torch-ops", action="store_true",
                     help="also record torch operators (aten::...) through torch's "
                          "RecordFunction observers")
    run.add_argument("--record-shapes", action="store_true",
                     help="keep input shapes of torch operators and ranges that provide them")


def _split_run_argv(
    run_parser: argparse.ArgumentParser, argv: Sequence[str]
) -> tuple[list[str], str | None, list[str]]:
    """Splits ``framescope run``'s arguments as python splits its own: framescope's options, then
    ``-m MODULE`` or the script, then the program's arguments, which framescope never parses
    (``framescope run -m pkg -o x`` passes ``-o x`` to pkg). Returns (framescope's options,
    the module or None, the program's argv: [script, *args] or [*args] for a module)."""
    actions = run_parser._option_string_actions  # noqa: SLF001 - argparse's option table
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return list(argv[:i]), None, list(argv[i + 1 :])
        if arg == "-m" or (arg.startswith("-m") and not arg.startswith("--")):
            module = arg[2:] or (argv[i + 1] if i + 1 < len(argv) else "")
            rest = argv[i + 1 :] if arg[2:] else argv[i + 2 :]
            if not module:
                run_parser.error("argument -m: expected a module name")
            return list(argv[:i]), module, list(rest)
        if arg.startswith("-") and arg != "-":
            name, has_value, _ = arg.partition("=")
            action = actions.get(name)
            attached = False
            if action is None and not arg.startswith("--"):  # -oFILE
                action, attached = actions.get(arg[:2]), len(arg) > 2
            takes_value = action is not None and action.nargs != 0
            i += 2 if takes_value and not has_value and not attached else 1
            continue
        return list(argv[:i]), None, list(argv[i:])
    return list(argv), None, []


def _check_output(path: str) -> str | None:
    """Why the trace cannot be written to ``path``, or None: checked before the program runs by
    creating (and removing) a temporary file next to it, as the final atomic write will (asking
    os.access is not enough: root is told yes where the file system says no, e.g. in /sys)."""
    target = os.path.abspath(path)
    folder = os.path.dirname(target)
    if os.path.isdir(target):
        return f"cannot write the trace to {path!r}: it is a directory"
    if not os.path.isdir(folder):
        return f"cannot write the trace to {path!r}: no directory {folder!r}"
    if os.path.exists(target) and not os.access(target, os.W_OK):
        return f"cannot write the trace to {path!r}: permission denied"
    if written_in_place(path):
        # A device, FIFO or /dev/stdout: written in place, no file is made next to it (nor a
        # new one in /dev).
        if not os.path.exists(target):
            return (f"cannot write the trace to {path!r}: no such file "
                    "(none is made in /dev or /proc)")
        return None
    probe = os.path.join(folder, f".{os.path.basename(target)}.{os.getpid()}.check.tmp")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        os.unlink(probe)
    except OSError as e:
        return f"cannot write the trace to {path!r}: {(e.strerror or str(e)).lower()}"
    return None


_RUNPY_FILES = {"<frozen runpy>", getattr(runpy, "__file__", "runpy.py")}
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _is_ours(tb: types.TracebackType) -> bool:
    filename = tb.tb_frame.f_code.co_filename
    return filename.startswith(_HERE) or filename in _RUNPY_FILES


def _user_traceback(tb: types.TracebackType | None) -> types.TracebackType | None:
    """The traceback without the framescope and runpy frames above the program's (and the
    console-script launcher above those), as python would show it for the program alone."""
    head = tb
    if tb is not None and tb.tb_next is not None and not _is_ours(tb) and _is_ours(tb.tb_next):
        tb = tb.tb_next  # the `framescope` launcher script: sys.exit(main())
    while tb is not None and _is_ours(tb):
        tb = tb.tb_next
    if tb is None:
        return head  # an error of framescope's own: show it whole
    # The innermost frame may be framescope's SIGINT handler (a Ctrl-C), where python's is C.
    node = tb
    while node.tb_next is not None:
        if node.tb_next.tb_next is None and node.tb_next.tb_frame.f_code is _SIGINT_HANDLER_CODE:
            node.tb_next = None
            break
        node = node.tb_next
    return tb


_SIGINT_HANDLER_CODE: types.CodeType | None = None  # _Finisher._on_signal's, set below


def _say(text: str) -> None:
    """Prints to stderr, even when the program closed or replaced it; never raises."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None and not stream.closed:
                print(text, file=stream, flush=True)
                return
        except (OSError, ValueError, AttributeError):
            continue


#: The profile's arguments a warning names, as framescope run's flags.
_CLI_FLAGS = (("raise memory_limit or use on_limit=\"keep_newest\"",
               "raise --memory-limit or use --on-limit keep_newest"),)


def cli_wording(warning: str) -> str:
    """A session's warning as framescope run says it: its flags for the profile's arguments."""
    for api, flags in _CLI_FLAGS:
        warning = warning.replace(api, flags)
    return warning


class _Finisher:
    """Ends a ``framescope run``: stops the session, writes the trace, prints the summary. Once.

    The session ends at interpreter exit, after threading joins the non-daemon threads and the
    program's own atexit functions ran (this one is registered before the program runs, so it
    runs after them). SIGTERM, SIGHUP, SIGQUIT and a second Ctrl-C end it at once instead: the
    trace is written, then the process dies of the signal as it would have without framescope
    (SIGQUIT: with a core dump, where the limits allow one). Signals the program or the shell
    set a handler for (or ignore) are left alone."""

    _SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")

    def __init__(self, prof: profile, opts: argparse.Namespace) -> None:
        self.prof = prof
        self.opts = opts
        self.after_stop: list[Callable[[], None]] = []  # run once the session stopped
        self.finished = False
        self.interrupts = 0
        self.deferred: int | None = None  # a signal that came while the trace was written
        self.pid = os.getpid()
        self.stop_error: BaseException | None = None  # why stopping the session failed

    def _stop(self) -> None:
        """Stops the session (framescope's frames are not recorded: this one is not). A
        streamed session whose file could not be written to (the disk filled up) fails here:
        said once by finish(), not as a traceback."""
        try:
            _core._stop(self.prof)
        except (OSError, RuntimeError, ValueError) as e:
            self.stop_error = e

    def install(self) -> None:
        # A trace lost at exit (the disk filled, the directory went away) is said on stderr; the
        # exit status stays the program's: it is fixed before atexit functions run, and only
        # os._exit() could change it, skipping the rest of the program's own shutdown (atexit
        # functions registered before this one, such as logging's and multiprocessing's, and
        # the flushing of its open files). A profiler must never cost the program its data.
        atexit.register(self.finish)
        # Runs first (atexit is last-in, first-out): stops the session, so that none of the
        # finishing code shows in the trace.
        atexit.register(self._stop)
        for name in self._SIGNALS:
            signum = getattr(signal, name, None)
            if signum is None:
                continue
            current = signal.getsignal(signum)
            default = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
            if current is default:  # leave handlers the program or the shell (nohup) set alone
                signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: types.FrameType | None) -> None:
        if signum == signal.SIGINT and self.interrupts == 0 and not self.finished:
            self.interrupts += 1
            raise KeyboardInterrupt  # the first Ctrl-C: as python, the program may handle it
        self.finish()
        self._die(signum)

    def _while_finishing(self, signum: int, frame: types.FrameType | None) -> None:
        if self.deferred is None:
            self.deferred = signum
            _say("framescope: writing the trace, the run ends when it is written")

    @staticmethod
    def _die(signum: int) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)  # (not reached: the signal ends the process)

    def finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        if os.getpid() != self.pid:
            # A child the program forked (os.fork) and that exits through python's exit path:
            # the trace file is the parent's, which must not be overwritten by the child's.
            _core._stop(self.prof, keep=False)
            return
        self._stop()  # first: none of the finishing shows in the trace
        for hook in self.after_stop:
            hook()
        opts = self.opts
        if self.prof._trace is None:
            why = error_text(self.stop_error) if self.stop_error is not None else "no trace"
            _say(f"framescope: could not write the trace to {opts.output}: {why}")
            return self._end()
        for name in self._SIGNALS:
            if (signum := getattr(signal, name, None)) is not None:
                if signal.getsignal(signum) == self._on_signal:
                    signal.signal(signum, self._while_finishing)
        for warning in self.prof.warnings:
            _say(cli_wording(warning))
        try:
            if opts.stream_to != opts.output:
                self.prof.export(opts.output, format=opts.format)
            else:
                # The streamed .fstrace is the output, but it was completed at stop: what came
                # after (this process's description, its followed children's traces) is only in
                # the trace in memory. Written again in full (atomically; the trace keeps mapping
                # the streamed file) so that none of it is lost.
                self.prof.save(opts.output)
        except (OSError, RuntimeError, ValueError) as e:
            _say(f"framescope: could not write the trace to {opts.output}: {error_text(e)}")
            return self._end()
        finally:
            if opts.stream_to is not None and opts.stream_to != opts.output:
                try:
                    os.unlink(opts.stream_to)  # the trace maps it: readable until the exit
                except OSError:
                    pass
        if opts.limit != 0:
            try:
                _say(self.prof.summary(limit=opts.limit, sort_by=opts.sort,
                                       by_thread=opts.by_thread,
                                       show_host=getattr(opts, "show_host", False),
                                       by_task=getattr(opts, "by_task", False)))
            except ValueError as e:  # e.g. no CPU times: the sampler thread could not start
                _say(f"framescope: no summary: {e}")
        _say(f"framescope: trace written to {opts.output} (backend: {self.prof.backend})")
        return self._end()

    def _end(self) -> None:
        if self.deferred is not None:
            self._die(self.deferred)


_SIGINT_HANDLER_CODE = _Finisher._on_signal.__code__


def _has_main(path: str) -> bool:
    """Whether python can run ``path``: a file, or a directory or zip file with a ``__main__``
    module (else python says "can't find '__main__' module")."""
    names = ("__main__.py", "__main__.pyc", "__main__")
    if os.path.isdir(path):
        return any(os.path.exists(os.path.join(path, name)) for name in names)
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as archive:
                return any(n in names or n.startswith("__main__/") for n in archive.namelist())
        except (OSError, zipfile.BadZipFile):
            return True  # let runpy report it
    return True


def _load_script(path: str) -> tuple[types.CodeType, dict[str, object]] | None:
    """The code and the fresh ``__main__`` namespace to run a script file in, as ``python path``
    does: ``__file__`` absolute (3.9+), ``sys.argv[0]`` as given, and the module stays
    ``sys.modules["__main__"]`` afterwards. None for a directory or zip file with a
    ``__main__.py``, which go through runpy, as python does. Done before the session starts,
    so that reading and compiling the file are not in the trace."""
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
    sys.modules["__main__"] = main
    return code, main.__dict__


def _load_module(name: str) -> tuple[types.CodeType, dict[str, object], str]:
    """The code of a module run as ``python -m name``, the fresh ``__main__`` namespace with the
    globals runpy gives it, and its file (``sys.argv[0]``). The module becomes
    ``sys.modules["__main__"]``. Done before the session starts, as _load_script, so that the
    trace begins with the module's own code; finding it imports its parent packages.

    Raises:
        ImportError: no such module (or a package without ``__main__``), as python -m says.
    """
    try:
        _, spec, code = runpy._get_module_details(name)  # type: ignore[attr-defined]
    except ImportError:
        raise
    except Exception as exc:  # runpy's own error type, with the message python -m prints
        raise ImportError(str(exc)) from None
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=spec.origin, __cached__=spec.cached, __doc__=None,
                         __loader__=spec.loader, __package__=spec.parent, __spec__=spec,
                         __builtins__=builtins)
    sys.modules["__main__"] = main
    return code, main.__dict__, spec.origin or name


def _report(exc: BaseException) -> None:
    """Reports an exception of the program as python would: through sys.excepthook (the
    program's own, if it set one), without framescope's frames in the traceback."""
    tb = _user_traceback(exc.__traceback__)
    try:
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
    except BaseException:  # noqa: BLE001 - a failing hook: python falls back the same way
        sys.__excepthook__(type(exc), exc, tb)


def _quiet_excepthook(*args: object) -> None:
    """Installed just before the final KeyboardInterrupt leaves main(): already reported."""


def _rank_output(opts: argparse.Namespace, output: str, output_format: str,
                 rank: ranks.RankInfo) -> tuple[str, str]:
    """A rank's own output file (framescope.ranks.rank_output): ``rankN.fstrace`` by default,
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
    """Once the session stopped: names this process in its trace and merges the children's (a
    session streamed to the output itself is written again in full by the finisher, with them)."""
    if prof._trace is None:
        if follower is not None:
            follower.close()
        return
    processes.session_stopped(prof._trace, prof._clock)
    if follower is not None:
        for warning in follower.collect(prof._trace):
            _say(cli_wording(warning))


def run(opts: argparse.Namespace, module: str | None, target_argv: list[str]) -> int:
    """Runs the program under a session. The program's exceptions propagate (python reports
    them, and exits as it would); the trace is written at interpreter exit (see _Finisher)."""
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
        if not _has_main(target):
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
    if (problem := _check_output(output)) is not None:
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
    prof._launcher_files = [sys.argv[0], os.path.abspath(sys.argv[0]), *_RUNPY_FILES]
    if module is not None:
        sys.argv = [module, *target_argv]
        sys.path.insert(0, os.getcwd())
    else:
        sys.argv = list(target_argv)
        sys.path.insert(0, os.path.dirname(os.path.abspath(target_argv[0])))
    script: tuple[types.CodeType, dict[str, object]] | None
    if module is not None:
        try:
            code, namespace, origin = _load_module(module)
        except ImportError as exc:
            print(f"framescope run: {exc}", file=sys.stderr)
            return 1
        script = (code, namespace)
        sys.argv[0] = origin
    else:
        try:
            script = _load_script(target_argv[0])
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
    finisher = _Finisher(prof, opts)
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
        _report(exc)
        if isinstance(exc, KeyboardInterrupt):
            # As python after an uncaught Ctrl-C: exit by SIGINT, once the interpreter has
            # finalized (threads joined, atexit run: the trace is written then).
            sys.excepthook = _quiet_excepthook
            raise KeyboardInterrupt from None
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    if args and args[0] == "run":
        run_parser = _subparser(parser, "run")
        options, module, target_argv = _split_run_argv(run_parser, args[1:])
        opts = parser.parse_args(["run", *options])
        return run(opts, module, target_argv)
    opts = parser.parse_args(args)
    if opts.command == "report":
        return report(opts)
    if opts.command == "merge":
        return merge(opts)
    if opts.command in TABLE_COMMANDS:
        return run_table_command(opts)
    if opts.command == "attach":
        return _attach_command.attach(opts)
    return run_trace_command(opts)


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:  # noqa: SLF001 - argparse keeps subparsers as an action
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            return action.choices[name]  # type: ignore[no-any-return]
    raise LookupError(name)


if __name__ == "__main__":
    sys.exit(main())
