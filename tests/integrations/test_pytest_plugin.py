"""The pytest plugin (pytest --framescope[=DIR]), run on real test suites with pytester."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest_plugins = ["pytester"]

SUITE = '''
import threading
import pytest

def slow_helper(n):
    total = 0
    for i in range(n):
        total += i * i
    return total

@pytest.fixture
def data():
    return slow_helper(20000)

def test_uses_fixture(data):
    assert data > 0

@pytest.mark.parametrize("n", [1, 2])
def test_param(n):
    assert slow_helper(30000 * n) > 0

def test_thread():
    t = threading.Thread(target=slow_helper, args=(10000,), name="helper-thread")
    t.start()
    t.join()

class TestClass:
    def test_method(self):
        assert slow_helper(100) >= 0

def test_fails():
    slow_helper(10)
    assert False
'''


def events_of(path: Any) -> list[dict[str, Any]]:
    doc = json.loads(path.read_text())
    return [e for e in doc["traceEvents"] if e.get("ph") in ("X", "B")]


def test_one_trace_per_test_and_a_table(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_subprocess("--framescope=traces", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=5, failed=1)
    traces = sorted(p.name for p in (pytester.path / "traces").iterdir())
    assert traces == [
        "test_suite.py.TestClass.test_method.json",
        "test_suite.py.test_fails.json",
        "test_suite.py.test_param[1].json",
        "test_suite.py.test_param[2].json",
        "test_suite.py.test_thread.json",
        "test_suite.py.test_uses_fixture.json",
    ]
    # each trace holds its test and starts there: a range per phase, the fixture's frames under
    # "setup", the test function under "call", no frame of pytest or pluggy; one thread_name
    # per thread
    doc = json.loads((pytester.path / "traces" / "test_suite.py.test_uses_fixture.json")
                     .read_text())
    ev = events_of(pytester.path / "traces" / "test_suite.py.test_uses_fixture.json")
    names = [e["name"] for e in ev]
    assert any(n.endswith(": data") for n in names)
    assert any(n.endswith(": test_uses_fixture") for n in names)
    assert not any(n.endswith(": test_param") for n in names)
    assert not [n for n in names if n.startswith(("_pytest/", "pluggy/", "<frozen runpy>"))]
    roots = [e for e in ev if e["args"].get("Python parent id", None) is None
             and "Ev Idx" in e["args"]]
    assert [e["name"] for e in sorted(roots, key=lambda e: e["ts"])] == \
        ["setup", "call", "teardown"]
    by_name = {e["name"]: e for e in ev}
    fixture = next(e for e in ev if e["name"].endswith(": data"))
    test_fn = next(e for e in ev if e["name"].endswith(": test_uses_fixture"))
    for phase, e in (("setup", fixture), ("call", test_fn)):
        r = by_name[phase]
        assert r["ts"] <= e["ts"] and e["ts"] + e["dur"] <= r["ts"] + r["dur"] + 1
    meta = [(e["pid"], e["tid"]) for e in doc["traceEvents"]
            if e.get("ph") == "M" and e["name"] == "thread_name"]
    assert len(meta) == len(set(meta))
    # the helper thread's calls are in the thread test's trace, on another tid
    ev = events_of(pytester.path / "traces" / "test_suite.py.test_thread.json")
    helper = [e for e in ev if e["name"].endswith(": slow_helper")]
    test = [e for e in ev if e["name"].endswith(": test_thread")]
    assert helper and test and {e["tid"] for e in helper}.isdisjoint({e["tid"] for e in test})
    # the end-of-run table: slow_helper, called 6 times in 6 tests, counted across them (which
    # row comes first is the machine's business: on a loaded one a thread join can wait longest)
    out = result.stdout.str()
    assert "slowest functions across 6 tests, by self time:" in out
    table = out.split("by self time:")[1].splitlines()[2:]
    rows = [line.split() for line in table if line.strip().endswith("slow_helper")]
    assert len(rows) == 1 and int(rows[0][0]) == 6, table
    table_text = out.split("by self time:")[1].split("[host]")[0]
    assert "_pytest/" not in table_text and "pluggy/" not in table_text
    # what pytest ran (fixture lookup through inspect.signature, contextlib helpers, reporting
    # the failure through inspect and ast) is host time: in the [host] line, not the table
    for noise in ("getmodule", "ast.py(33): parse", "_signature_from_callable", "contextlib",
                  "inspect.py"):
        assert noise not in table_text, noise
    assert "[host]" in out
    result.stdout.fnmatch_lines(["framescope: 6 traces written to *traces"])


def test_show_host_keeps_pytest_frames(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x():\n    sum(range(100))\n")
    result = pytester.runpytest_subprocess("--framescope=t", "--framescope-show-host",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    ev = events_of(pytester.path / "t" / "test_x.py.test_x.json")
    pluggy = [e for e in ev if e["name"].startswith("pluggy/")]
    assert pluggy and {e["cat"] for e in pluggy} == {"host"}
    assert next(e for e in ev if e["name"].endswith(": test_x"))["cat"] == "python_function"
    assert "pluggy/" in result.stdout.str().split("by self time:")[1]


def test_default_dir_and_marker(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_m="""
import pytest
import framescope

def test_plain():
    pass

@pytest.mark.no_framescope
def test_own_session():
    with framescope.profile() as prof:
        sum(range(10))
    assert len(prof.events()) > 0
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--framescope")
    result.assert_outcomes(passed=2)
    assert sorted(p.name for p in (pytester.path / "framescope-traces").iterdir()) == [
        "test_m.py.test_plain.json"
    ]


def test_a_test_path_after_the_option_is_an_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("--framescope", "test_x.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--framescope took 'test_x.py'*--framescope=DIR*"])


def test_disabled_by_p_no_framescope(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    # the plugin is loaded from the entry point without any conftest...
    result = pytester.runpytest_subprocess("--help")
    result.stdout.fnmatch_lines(["*--framescope=*DIR*"])
    # ... and -p no:framescope removes it with its options
    result = pytester.runpytest_subprocess("-p", "no:framescope", "--framescope=t")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unrecognized arguments: --framescope=t*"])
    result = pytester.runpytest_subprocess("-p", "no:framescope")
    result.assert_outcomes(passed=1)


def test_trace_file_names() -> None:
    from framescope.integrations.pytest_plugin import trace_file_name

    assert trace_file_name("a/b.py::C::test[x-1]") == "a_b.py.C.test[x-1].json"
    long = trace_file_name("t.py::test[" + "x" * 500 + "]")
    assert len(long) <= 160 and long.endswith(".json")
    assert long != trace_file_name("t.py::test[" + "x" * 499 + "y]")


def test_own_session_under_the_plugin_names_the_marker_and_one_trace_reads_singular(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_own="""
import pytest
import framescope

def test_own_session():
    with pytest.raises(RuntimeError) as info:
        framescope.profile().start()
    message = str(info.value)
    assert "pytest plugin" in message and "@pytest.mark.no_framescope" in message, message
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--framescope=traces")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["slowest functions across 1 test, by self time:",
                                 "framescope: 1 trace written to *traces"])
