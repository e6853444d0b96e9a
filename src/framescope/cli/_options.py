"""The recording options of ``framescope run``, shared with ``framescope attach``."""

from __future__ import annotations

import argparse

from framescope.cli._args import duration_arg, max_depth_arg, memory_limit_arg, signal_arg
from framescope.cli._output import FORMAT_CHOICES


def add_summary_options(parser: argparse.ArgumentParser,
                        limit_help: str = "rows (default: 20; -1: every row)") -> None:
    """How the summary table is cut and ordered: ``framescope run``'s, attach's and
    ``framescope summary``'s."""
    parser.add_argument("--limit", type=int, default=20, help=limit_help)
    parser.add_argument("--sort", choices=["self", "total", "calls", "on_cpu", "memory"],
                        default="self",
                        help="order (default: self time; on_cpu: self time on CPU; memory: "
                             "bytes allocated, with --profile-memory / profile_memory)")
    parser.add_argument("--by-thread", action="store_true",
                        help="one table per thread, in percent of its own time")
    parser.add_argument("--by-task", action="store_true",
                        help="one row per asyncio Task: its steps, time running and awaiting, "
                             "its hottest functions")
    parser.add_argument("--show-host", action="store_true",
                        help="list the functions of host code too (a Jupyter kernel, pytest, "
                             "runpy, framescope; by default their total is one line under the "
                             "table)")


def add_recording_options(run: argparse.ArgumentParser) -> None:
    """The output and recording options of ``framescope run``, shared by ``framescope attach``."""
    run.add_argument("-o", "--output", default=None,
                     help="trace file to write; its extension picks the format (.json, .json.gz, "
                          ".pftrace, .speedscope.json, .collapsed, .prof, .fstrace, .html; default: "
                          "framescope.trace + the format's extension)")
    run.add_argument("-f", "--format", choices=FORMAT_CHOICES, default=None,
                     help="trace format (default: from -o's extension, else chrome)")
    run.add_argument("--c-calls", action="store_true", help="also record builtins")
    run.add_argument("--backend", default="auto",
                     choices=["auto", "frame_hook", "fallback", "sys.monitoring", "setprofile"],
                     help="where Python calls come from (default auto: the PEP 523 frame hook, or "
                          "the fallback when another tool's frame hook is installed)")
    add_summary_options(run, limit_help="rows of the summary (default 20; 0: no summary; "
                                         "-1: every row)")
    run.add_argument("--memory-limit", default=None, type=memory_limit_arg,
                     help="event buffer limit, e.g. 512MiB or 1.5GB (default: 1GiB; with "
                          "--stream 64MiB)")
    run.add_argument("--stream", action="store_true",
                     help="write the events to a .fstrace file while the program runs, so "
                          "memory stays flat: the -o file itself when it is a .fstrace, else a "
                          "temporary one next to it, converted to -o at the end (not with "
                          "--dump-on or --on-limit keep_newest)")


def add_process_options(run: argparse.ArgumentParser) -> None:
    run.add_argument("--no-follow", action="store_true",
                     help="record this process only, not its Python children (multiprocessing "
                          "workers, subprocesses of sys.executable)")


def add_analysis_options(run: argparse.ArgumentParser) -> None:
    run.add_argument("--include-files", action="append", metavar="GLOB", default=None,
                     help="record only Python frames of files matching GLOB (repeatable)")
    run.add_argument("--exclude-files", action="append", metavar="GLOB", default=None,
                     help="do not record Python frames of files matching GLOB (repeatable); "
                          "their callees in other files are recorded")
    run.add_argument("--max-depth", type=max_depth_arg, default=None, metavar="N",
                     help="keep the outer N levels of Python calls only")
    run.add_argument("--min-duration", type=duration_arg, default=0, metavar="TIME",
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
    run.add_argument("--dump-on", metavar="SIGNAL", type=signal_arg, default=None,
                     help="flight recorder: on this signal (e.g. SIGUSR1), and when an exception "
                          "goes unhandled in the program, write the recorded window to "
                          "OUTPUT.dumpN.EXT without stopping; implies --on-limit keep_newest")


def add_torch_options(run: argparse.ArgumentParser) -> None:
    run.add_argument("--torch-ops", action="store_true",
                     help="also record torch operators (aten::...) through torch's "
                          "RecordFunction observers")
    run.add_argument("--record-shapes", action="store_true",
                     help="keep input shapes of torch operators and ranges that provide them")
