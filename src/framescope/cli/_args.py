"""Option values of the command line (durations, byte sizes, depths, signals), its one-line
usage errors, and ``framescope run``'s argv split as python splits its own."""

from __future__ import annotations

import argparse
import signal
from typing import NoReturn, Sequence

from framescope.profiler._flight_recorder import parse_signal
from framescope.profiler._options import MAX_DEPTH_LIMIT, parse_memory_limit


class Parser(argparse.ArgumentParser):
    """Reports a usage error on one line (and exits with status 2), as a command should."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def memory_limit_arg(text: str) -> int:
    try:
        return parse_memory_limit(text)
    except (TypeError, ValueError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def duration_arg(text: str) -> int:
    try:
        return parse_duration_ns(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def max_depth_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of levels: {text!r}") from None
    if not 1 <= value <= MAX_DEPTH_LIMIT:
        raise argparse.ArgumentTypeError(f"must be in 1..{MAX_DEPTH_LIMIT}, not {text}")
    return value


def signal_arg(text: str) -> signal.Signals:
    try:
        return parse_signal(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


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


def split_run_argv(
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
