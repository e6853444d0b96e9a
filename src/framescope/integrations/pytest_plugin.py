"""pytest plugin: ``pytest --framescope[=DIR]`` profiles each test (setup, call and teardown)
into ``DIR/<test id>.json`` and prints the functions with the most self time across the run.
pytest's and pluggy's own frames are host code (framescope.analysis._host_code): left out of the traces
and the table unless ``--framescope-show-host``.

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
    group.addoption(
        "--framescope-show-host", action="store_true",
        help="keep pytest's and pluggy's frames in the traces (category 'host') and list them "
             "in the table (by default both start at the tests' code)",
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
        directory, config.getoption("framescope_top"), config.getoption("framescope_c_calls"),
        config.getoption("framescope_show_host"),
    )
    config.pluginmanager.register(recorder, "framescope-recorder")


def trace_file_name(nodeid: str) -> str:
    """A file name for a test id: readable, unique, and short enough for any file system."""
    name = re.sub(r"[^A-Za-z0-9._\[\]=-]+", "_", nodeid.replace("::", ".")).strip("._")
    if len(name) > 150:
        digest = hashlib.sha1(nodeid.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        name = name[:137] + "-" + digest
    return name + ".json"


#: The ranges the plugin records around a test's phases (not rows of the end-of-run table).
PHASES = ("setup", "call", "teardown")


class Recorder:
    """Profiles each test and keeps the per-function totals of the run.

    One session per test, from the start of its setup to the end of its teardown, with a range
    per phase ("setup": the fixtures, "call": the test, "teardown"). What pytest and pluggy run
    around and between them (collecting fixtures, reporting, formatting a failure's traceback,
    which can take longer than the test) is host code (framescope.analysis._host_code): left out of the
    trace, which starts at the test's code, and of the table, unless ``--framescope-show-host``.
    """

    def __init__(self, directory: str, top: int, c_calls: bool, show_host: bool = False) -> None:
        self.directory = os.path.abspath(directory)
        self.top = top
        self.c_calls = c_calls
        self.show_host = show_host
        self.totals: dict[str, list[int]] = {}  # name -> [calls, total ns, self ns]
        self.host_ns = 0
        self.written = 0
        self.failures: list[str] = []
        self._prof: Any = None  # the running test's profile

    def _phase(self, name: str) -> Generator[None, None, None]:
        if self._prof is None:
            yield
            return
        from framescope import record_function

        with record_function(name):
            yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, None, None]:
        self._prof = None
        if item.get_closest_marker("no_framescope") is None:
            from framescope.profiler import _session
            from framescope.profiler._profile import profile

            prof = profile(c_calls=self.c_calls)
            try:
                prof.start()
            except RuntimeError as exc:  # another framescope session runs
                self.failures.append(f"{item.nodeid}: not profiled ({exc})")
            else:
                self._prof = prof
                _session.set_plugin_profile(prof)  # names the plugin in a test's own start's error
        yield from self._phase("setup")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        yield from self._phase("call")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, None, None]:
        yield from self._phase("teardown")
        prof, self._prof = self._prof, None
        if prof is None:
            return
        from framescope.profiler import _session

        _session.set_plugin_profile(None)
        try:
            prof.stop()
        except RuntimeError as exc:  # the test stopped the session itself
            self.failures.append(f"{item.nodeid}: {exc}")
            return
        os.makedirs(self.directory, exist_ok=True)
        _session.set_host_code(prof, export="show" if self.show_host else "drop")
        prof.export_chrome_trace(os.path.join(self.directory, trace_file_name(item.nodeid)))
        self.written += 1
        self._add(prof)

    def _add(self, prof: Any) -> None:
        from framescope.analysis import _host_code
        from framescope.analysis._key_average_rows import key_average_rows

        trace = prof.trace if self.show_host else _host_code.host_view(prof.trace, True)
        for r in key_average_rows(trace).rows:
            name, category = r.name, r.category
            calls, total, self_ns, is_async = r.calls, r.total_ns, r.self_ns, r.is_async
            if calls <= 0 or is_async or name.startswith("__st"):
                continue
            if category == "user_annotation" and name in PHASES:
                continue
            if name == _host_code.HOST_ROW and category == "python_function":
                self.host_ns += self_ns
                continue
            row = self.totals.setdefault(name, [0, 0, 0])
            row[0] += calls
            row[1] += total
            row[2] += self_ns

    def table(self) -> list[str]:
        rows = sorted(self.totals.items(), key=lambda r: r[1][2], reverse=True)[: self.top]
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
            if self.host_ns:
                tr.write_line(f"[host] {self.host_ns / 1e6:.3f} ms in pytest, pluggy and what "
                              "they called (fixture lookup, reports) during the tests: not in "
                              "the table (--framescope-show-host lists it)")
        for failure in self.failures:
            tr.write_line(failure)
        tr.write_line(f"framescope: {_plural(self.written, 'trace')} written to "
                      f"{self.directory}")


def _plural(count: int, noun: str) -> str:
    """``1 trace``, ``2 traces``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"

