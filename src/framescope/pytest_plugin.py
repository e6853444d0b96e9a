"""pytest plugin: ``pytest --framescope[=DIR]`` profiles each test (setup, call and teardown)
into ``DIR/<test id>.json`` and prints the functions with the most self time across the run.

Registered through the ``pytest11`` entry point, so installing framescope is enough; without
``--framescope`` it only adds its options. ``-p no:framescope`` disables it. A test marked
``@pytest.mark.no_framescope`` runs unprofiled (needed by tests that start their own framescope
session: only one runs at a time in a process).
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Any, Generator

import pytest

DEFAULT_DIR = "framescope-traces"
# Frames of the test runner itself, left out of the end-of-run table (not of the traces).
_RUNNER_PREFIXES = ("_pytest/", "pluggy/", "framescope/", "<frozen ")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("framescope", "profiling with framescope")
    group.addoption(
        "--framescope", nargs="?", const=DEFAULT_DIR, default=None, metavar="DIR",
        help=f"profile each test into DIR/<test>.json (default DIR: {DEFAULT_DIR}) and print "
             "the slowest functions at the end; write --framescope=DIR (a bare word after "
             "--framescope is taken as DIR)",
    )
    group.addoption(
        "--framescope-top", type=int, default=15, metavar="N",
        help="rows of the end-of-run table of functions by self time (default: 15, 0: none)",
    )
    group.addoption(
        "--framescope-c-calls", action="store_true",
        help="also record builtins called from Python",
    )


def _looks_like_test_path(value: str) -> bool:
    if "::" in value or value.endswith(".py"):
        return True
    return os.path.isdir(value) and any(
        name.endswith(".py") for name in os.listdir(value)
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "no_framescope: run this test without the framescope profiler"
    )
    directory = config.getoption("framescope", None)
    if directory is None:
        return
    if _looks_like_test_path(directory):
        raise pytest.UsageError(
            f"--framescope took {directory!r} as its trace directory, but it looks like tests "
            f"to run; write --framescope=DIR (or put --framescope after the test paths)"
        )
    recorder = Recorder(
        directory, config.getoption("framescope_top"), config.getoption("framescope_c_calls")
    )
    config.pluginmanager.register(recorder, "framescope-recorder")


def trace_file_name(nodeid: str) -> str:
    """A file name for a test id: readable, unique, and short enough for any file system."""
    name = re.sub(r"[^A-Za-z0-9._\[\]=-]+", "_", nodeid.replace("::", ".")).strip("._")
    if len(name) > 150:
        digest = hashlib.sha1(nodeid.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        name = name[:137] + "-" + digest
    return name + ".json"


class Recorder:
    """Profiles each test and keeps the per-function totals of the run.

    Setup, call and teardown are each recorded around their own hook, so the trace holds the
    test's fixtures and body but not pytest's reporting in between (formatting a failure's
    traceback can take longer than the test); the three traces are merged into one file."""

    def __init__(self, directory: str, top: int, c_calls: bool) -> None:
        self.directory = os.path.abspath(directory)
        self.top = top
        self.c_calls = c_calls
        self.totals: dict[str, list[int]] = {}  # name -> [calls, total ns, self ns]
        self.written = 0
        self.failures: list[str] = []
        self._phases: list[Any] = []  # the stopped profiles of the current test

    def _record(self, item: pytest.Item) -> Generator[None, None, None]:
        if item.get_closest_marker("no_framescope") is not None:
            yield
            return
        from framescope import profiler

        prof = profiler.profile(c_calls=self.c_calls)
        try:
            prof.start()
        except RuntimeError as exc:  # another framescope session runs
            self.failures.append(f"{item.nodeid}: not profiled ({exc})")
            yield
            return
        profiler._plugin_profile = prof  # names the plugin in a test's own start's error
        try:
            yield
        finally:
            profiler._plugin_profile = None
            try:
                prof.stop()
                self._phases.append(prof)
            except RuntimeError as exc:  # the test stopped the session itself
                self.failures.append(f"{item.nodeid}: {exc}")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, None, None]:
        self._phases = []
        yield from self._record(item)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        yield from self._record(item)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, None, None]:
        yield from self._record(item)
        phases, self._phases = self._phases, []
        if not phases:
            return
        prof = phases[0]
        for other in phases[1:]:
            prof.merge(other)
        os.makedirs(self.directory, exist_ok=True)
        prof.export_chrome_trace(os.path.join(self.directory, trace_file_name(item.nodeid)))
        self.written += 1
        for name, calls, total, self_ns in prof.stats():
            if calls <= 0 or name.startswith("__st"):
                continue
            row = self.totals.setdefault(name, [0, 0, 0])
            row[0] += calls
            row[1] += total
            row[2] += self_ns

    def table(self) -> list[str]:
        rows = sorted(
            ((n, v) for n, v in self.totals.items() if not n.startswith(_RUNNER_PREFIXES)),
            key=lambda r: r[1][2], reverse=True,
        )[: self.top]
        lines = [f"{'calls':>10} {'self ms':>10} {'total ms':>10}  function"]
        for name, (calls, total, self_ns) in rows:
            lines.append(f"{calls:>10} {self_ns / 1e6:10.3f} {total / 1e6:10.3f}  {name}")
        return lines

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        tr = terminalreporter
        tr.write_sep("=", "framescope")
        if self.top > 0 and self.totals:
            tr.write_line(f"slowest functions across {_plural(self.written, 'test')}, by self "
                          "time:")
            for line in self.table():
                tr.write_line(line)
        for failure in self.failures:
            tr.write_line(failure)
        tr.write_line(f"framescope: {_plural(self.written, 'trace')} written to "
                      f"{self.directory}")


def _plural(count: int, noun: str) -> str:
    """``1 trace``, ``2 traces``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"

