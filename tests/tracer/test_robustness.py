"""Profiling never changes what a program does: deep recursion, other frame hooks, many sessions."""

from __future__ import annotations

import gc
import importlib.util
import re
import sys
import textwrap
from pathlib import Path

import pytest

import framescope
from framescope import _core
from tests.support.subprocesses import run_python
from tests.support.native_build import build_extension

# -- deep recursion -------------------------------------------------------------------------------

DEEP = """
import sys, framescope
sys.setrecursionlimit(60000)
N = int(sys.argv[1])
BACKEND = sys.argv[2]
if len(sys.argv) > 3:
    framescope._core._set_stack_segment_budget(int(sys.argv[3]))
def rec(n):
    return 0 if n == 0 else 1 + rec(n - 1)
try:
    if BACKEND == "plain":
        r = rec(N)
    else:
        with framescope.profile(backend=BACKEND) as prof:
            r = rec(N)
        calls = [e for e in prof.events() if e.name.endswith(": rec")]
        assert len(calls) == N + 1, (len(calls), N + 1)
        # One chain, each call the parent of the next, all closed.
        for a, b in zip(calls, calls[1:]):
            assert b.parent == a.index and b.depth == a.depth + 1
        print("backend", prof.backend)
    print("result", r)
except RecursionError as e:
    print("RecursionError", e)
"""

# The bar: rec(50000) under sys.setrecursionlimit(60000), traced. Plain 3.11+ runs it;
# plain 3.10 recurses in C for every Python call and overflows an 8 MiB stack (a segfault)
# somewhere past 20,000 levels. framescope runs it on every version, with either backend: the
# frame hook moves onto stack segments once the thread's stack is nearly used up (on 3.10 the
# fallback backend keeps the hook installed for that alone).
DEEP_N = 50_000


@pytest.mark.parametrize("backend", ["frame_hook", "fallback"])
def test_deep_recursion_runs_as_plain_python(backend: str) -> None:
    out = run_python(DEEP, str(DEEP_N), backend)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"result {DEEP_N}" in out.stdout, out.stdout + out.stderr[-3000:]
    if backend == "frame_hook" and _core._stack_segments_supported():
        # The hook kept recording (no switch to the fallback) and said nothing.
        assert "backend frame_hook\n" in out.stdout, out.stdout
        assert "switched from the frame hook" not in out.stderr


@pytest.mark.parametrize("backend", ["frame_hook", "fallback"])
def test_deep_recursion_beyond_the_segment_budget(backend: str) -> None:
    """Without stack segments: 3.11+ hands new frames to the fallback backend (calls are
    inlined again) and says so; 3.10 raises RecursionError before the C stack ends, never a
    crash (plain 3.10 segfaults at this depth)."""
    out = run_python(DEEP, str(DEEP_N), backend, "0")
    assert out.returncode == 0, out.stderr[-3000:]
    if sys.version_info >= (3, 11):
        assert f"result {DEEP_N}" in out.stdout, out.stdout + out.stderr[-3000:]
        if backend == "frame_hook":
            assert "backend frame_hook->" in out.stdout
            assert "switched from the frame hook" in out.stderr
            assert "stack segment budget" in out.stderr
    else:
        assert "RecursionError" in out.stdout, out.stdout + out.stderr[-3000:]


def test_exception_from_deep_recursion_unwinds_across_segments() -> None:
    """An exception raised 50,000 levels down (on a stack segment) reaches the top with its whole
    traceback, and the segments are given back: a second deep recursion runs the same."""
    code = """
    import sys, traceback, framescope
    sys.setrecursionlimit(60000)
    def rec(n):
        if n == 0:
            raise ValueError("bottom")
        return rec(n - 1)
    with framescope.profile() as prof:
        for attempt in range(2):
            try:
                rec(50000)
            except ValueError as e:
                print(attempt, e, len(traceback.extract_tb(e.__traceback__)))
    calls = [e for e in prof.events() if e.name.endswith(": rec")]
    print(len(calls), prof.backend)
    """
    out = run_python(code)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[:3] == [
        "0 bottom 50002",
        "1 bottom 50002",
        "100002 frame_hook",
    ], out.stdout


GREENLET_DEEP = """
import sys, greenlet, framescope
sys.setrecursionlimit(60000)
N = int(sys.argv[1])
main = greenlet.getcurrent()
def other():
    while True:
        main.switch("switched")
g = greenlet.greenlet(other)
g.switch()  # started near the top of the thread's stack
def rec(n):
    return g.switch() if n == 0 else rec(n - 1)
with framescope.profile() as prof:
    r = rec(N)
print(r, prof.backend)
"""


def test_deep_recursion_with_greenlet_switches() -> None:
    """greenlet copies stack regions between addresses of one contiguous stack: a switch from
    a stack segment aborts the process. Once greenlet is imported the hook uses no segments and
    keeps its earlier limits (3.11+: the fallback backend at half the stack)."""
    # Looked up, not imported: greenlet in this process's sys.modules would turn the hook's stack
    # segments off for every later test (tests/eval_frame's deep recursion among them).
    if importlib.util.find_spec("greenlet") is None:
        pytest.skip("greenlet is not installed")
    n = 40_000 if sys.version_info >= (3, 11) else 10_000
    out = run_python(GREENLET_DEEP, str(n))
    assert out.returncode == 0, out.stderr[-3000:]
    first = out.stdout.split("\n")[0]
    if sys.version_info >= (3, 11):
        assert first == "switched frame_hook->" + ("sys.monitoring" if sys.version_info >= (3, 12) else "setprofile"), out.stdout
    else:
        assert first == "switched frame_hook", out.stdout


def test_deep_recursion_on_a_thread() -> None:
    """Threads get their own segments (a thread's stack is smaller than the main thread's)."""
    code = """
    import sys, threading, framescope
    sys.setrecursionlimit(60000)
    def rec(n):
        return 0 if n == 0 else 1 + rec(n - 1)
    out = []
    with framescope.profile() as prof:
        t = threading.Thread(target=lambda: out.append(rec(30000)))
        t.start(); t.join()
        out.append(rec(30000))
    calls = [e for e in prof.events() if e.name.endswith(": rec")]
    print(out, len(calls), prof.backend)
    """
    out = run_python(code)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[0] == "[30000, 30000] 60002 frame_hook", out.stdout


def test_recursion_limit_still_applies() -> None:
    code = """
    import sys, framescope
    def rec(n): return rec(n + 1)
    with framescope.profile():
        try:
            rec(0)
        except RecursionError as e:
            print("caught", e)
    """
    out = run_python(code)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "caught maximum recursion depth exceeded" in out.stdout


# -- another PEP 523 hook ---------------------------------------------------------------------------

COUNTING_HOOK = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#if PY_VERSION_HEX >= 0x030B0000
typedef struct _PyInterpreterFrame Frame;
#else
typedef PyFrameObject Frame;
#endif
typedef PyObject* (*EvalFn)(PyThreadState*, Frame*, int);
PyAPI_FUNC(PyObject*) _PyEval_EvalFrameDefault(PyThreadState*, Frame*, int);
PyAPI_FUNC(void) _PyInterpreterState_SetEvalFrameFunc(PyInterpreterState*, EvalFn);
PyAPI_FUNC(EvalFn) _PyInterpreterState_GetEvalFrameFunc(PyInterpreterState*);

static long long count = 0;
static PyObject* counting(PyThreadState* ts, Frame* f, int throwflag) {
    ++count;
    return _PyEval_EvalFrameDefault(ts, f, throwflag);
}
static PyObject* install(PyObject* s, PyObject* u) {
    _PyInterpreterState_SetEvalFrameFunc(PyInterpreterState_Get(), counting);
    Py_RETURN_NONE;
}
static PyObject* uninstall(PyObject* s, PyObject* u) {
    _PyInterpreterState_SetEvalFrameFunc(PyInterpreterState_Get(), _PyEval_EvalFrameDefault);
    Py_RETURN_NONE;
}
static PyObject* is_current(PyObject* s, PyObject* u) {
    return PyBool_FromLong(_PyInterpreterState_GetEvalFrameFunc(PyInterpreterState_Get()) == counting);
}
static PyObject* is_default(PyObject* s, PyObject* u) {
    return PyBool_FromLong(
        _PyInterpreterState_GetEvalFrameFunc(PyInterpreterState_Get()) == _PyEval_EvalFrameDefault);
}
static PyObject* get_count(PyObject* s, PyObject* u) { return PyLong_FromLongLong(count); }
static PyMethodDef methods[] = {
    {"install", install, METH_NOARGS, NULL}, {"uninstall", uninstall, METH_NOARGS, NULL},
    {"is_current", is_current, METH_NOARGS, NULL}, {"is_default", is_default, METH_NOARGS, NULL},
    {"count", get_count, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "counting_hook", NULL, -1, methods};
PyMODINIT_FUNC PyInit_counting_hook(void) { return PyModule_Create(&def); }
"""


@pytest.fixture(scope="module")
def counting_hook(tmp_path_factory: pytest.TempPathFactory):
    return build_extension("counting_hook", COUNTING_HOOK, tmp_path_factory.mktemp("hook"))


def leaf() -> int:
    return 1


def test_hook_restored_exactly_at_stop(counting_hook) -> None:
    assert counting_hook.is_default()
    with framescope.profile():
        assert not counting_hook.is_default()
    assert counting_hook.is_default()


def test_hook_installed_first_is_chained_and_restored(counting_hook) -> None:
    counting_hook.install()
    try:
        before = counting_hook.count()
        with framescope.profile(backend="frame_hook") as prof:
            for _ in range(100):
                leaf()
        assert counting_hook.count() - before >= 100, "framescope chained to the earlier hook"
        assert counting_hook.is_current(), "and gave it back at stop"
        assert len([e for e in prof.events() if e.name.endswith(": leaf")]) == 100
        assert prof.backend == "frame_hook"
    finally:
        counting_hook.uninstall()


def test_auto_backend_leaves_another_tools_hook_alone(counting_hook) -> None:
    assert framescope._core._foreign_frame_hook() == ""
    counting_hook.install()
    try:
        assert "counting" in framescope._core._foreign_frame_hook()
        before = counting_hook.count()
        with framescope.profile() as prof:
            assert counting_hook.is_current(), "the other tool keeps its hook, unchained"
            for _ in range(100):
                leaf()
        assert counting_hook.count() - before >= 100
        assert counting_hook.is_current()
        assert len([e for e in prof.events() if e.name.endswith(": leaf")]) == 100
        fallback = "sys.monitoring" if sys.version_info >= (3, 12) else "setprofile"
        assert prof.backend == fallback
        said = [w for w in prof.warnings if "another tool's PEP 523 frame hook" in w]
        assert said and fallback in said[0]
    finally:
        counting_hook.uninstall()
    with framescope.profile() as prof:  # with the hook gone, auto is the frame hook again
        leaf()
    assert prof.backend == "frame_hook" and not prof.warnings


def test_hook_replaced_during_session_is_left_alone(counting_hook) -> None:
    with framescope.profile() as prof:
        counting_hook.install()  # another tool takes the hook mid-session
        leaf()
    try:
        assert counting_hook.is_current(), "framescope did not remove the other tool's hook"
        assert any("replaced the PEP 523 frame hook" in w for w in prof.warnings)
    finally:
        counting_hook.uninstall()
    with framescope.profile() as prof:  # a later session works normally
        leaf()
    assert [e for e in prof.events() if e.name.endswith(": leaf")]
    assert counting_hook.is_default()


# -- sessions -----------------------------------------------------------------------------------------


def test_thousand_sessions_leak_nothing() -> None:
    def one() -> None:
        with framescope.profile() as prof:
            with framescope.record_function("r"):
                leaf()
        assert len(prof.events()) > 0

    for _ in range(50):  # warm up: caches, interned names, chunk pool
        one()
    gc.collect()
    objects = len(gc.get_objects())
    refs = sys.gettotalrefcount() if hasattr(sys, "gettotalrefcount") else None
    rss = _rss_kib()
    for _ in range(1000):
        one()
    gc.collect()
    assert len(gc.get_objects()) - objects < 100
    if refs is not None:
        assert sys.gettotalrefcount() - refs < 1000
    assert _rss_kib() - rss < 16 * 1024, "RSS grew by more than 16 MiB over 1000 sessions"


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_code_objects_released_after_session() -> None:
    import weakref

    ns: dict[str, object] = {}
    exec(textwrap.dedent("""
    def temp():
        return 2
    """), ns)
    fn = ns["temp"]
    with framescope.profile() as prof:
        fn()  # type: ignore[operator]
    assert any(e.name.endswith(": temp") for e in prof.events())
    code_ref = weakref.ref(fn.__code__)  # type: ignore[attr-defined]
    del prof, fn, ns
    gc.collect()
    assert code_ref() is None, "the session released its references to code objects"


# -- misuse gets clear errors ---------------------------------------------------------------------

NANOBIND_DUMP = "incompatible function arguments"


@pytest.mark.parametrize(
    "limit, expected",
    [(1 << 20, 1 << 20), ("1.5GB", 1_500_000_000), ("512 MiB", 512 << 20), ("2gib", 2 << 30),
     ("100000000", 100_000_000), ("1e9B", 10**9), ("64_000_000", 64_000_000)],
)
def test_memory_limit_forms(limit: object, expected: int) -> None:
    assert framescope.profile(memory_limit=limit)._memory_limit == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "limit, error, message",
    [("banana", ValueError, "'banana' is not a size"), ("1.5XB", ValueError, "units: B, KB"),
     ("", ValueError, "is not a size"), ("-5MB", ValueError, "at least 256KiB"),
     ("1KB", ValueError, "at least 256KiB"), (0, ValueError, "at least"),
     (10**30, ValueError, "too large"), ("infGB", ValueError, "is not a size"),
     ([1], TypeError, "not list"), (True, TypeError, "not bool"), (1.5e9, TypeError, "not float")],
)
def test_memory_limit_errors(limit: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message) as info:
        framescope.profile(memory_limit=limit)  # type: ignore[arg-type]
    if error is ValueError and message != "too large":
        assert "512MiB" in str(info.value) or "at least" in str(info.value)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: framescope.mark(5), "mark(): name must be a str, not int"),
        (lambda: framescope.record_memory("x", 1, 2), "address must be an int, not str"),
        (lambda: framescope.record_memory(1, 2.5, 2), "bytes must be an int, not float"),
        (lambda: _core.Trace.deserialize("text"), "data must be bytes, not str"),
        (lambda: framescope.record_function(3), "argument 'name' must be str"),
    ],
)
def test_wrong_argument_types_are_clear_type_errors(call, message: str) -> None:
    with pytest.raises(TypeError, match=re.escape(message)) as info:
        call()
    assert NANOBIND_DUMP not in str(info.value)


def test_wrong_types_on_a_profile() -> None:
    with framescope.profile() as prof:
        leaf()
    for call in (lambda: prof.merge(42), lambda: prof.summary(limit="x")):  # type: ignore[arg-type]
        with pytest.raises(TypeError) as info:
            call()
        assert NANOBIND_DUMP not in str(info.value)
    with pytest.raises(ValueError):
        prof.merge(b"garbage")
    with pytest.raises(ValueError):
        _core.Trace.deserialize(b"\x00" * 64)


# -- exit without nanobind leak reports -------------------------------------------------------------

EXIT_CASES = {
    "session left running at module level": """
        import framescope
        prof = framescope.profile(); prof.start()
        def f(): return 1
        f()
    """,
    "trace kept in a module global": """
        import framescope
        with framescope.profile() as prof:
            pass
        t = prof.trace
        def g(): raise ValueError
        try: g()
        except ValueError as e: err = e
    """,
    "daemon threads still recording at exit": """
        import framescope, threading, time
        def spin():
            while True:
                with framescope.record_function("x"):
                    time.sleep(0.001)
        threading.Thread(target=spin, daemon=True).start()
        with framescope.profile() as prof:
            time.sleep(0.01)
        t = prof.trace
        framescope.profile().start()  # and a session running at exit
    """,
}


@pytest.mark.parametrize("case", sorted(EXIT_CASES))
def test_exit_without_leak_reports(case: str) -> None:
    out = run_python(EXIT_CASES[case])
    assert out.returncode == 0, out.stderr
    assert "leaked" not in out.stderr, out.stderr


@pytest.mark.parametrize("case", ["session left running at module level",
                                  "trace kept in a module global"])
def test_framescope_itself_leaks_nothing_at_exit(case: str) -> None:
    """With nanobind's leak reports on, a normal exit reports nothing: a session left running is
    stopped at exit and what it held is released."""
    code = "import os; os.environ['FRAMESCOPE_NB_LEAK_WARNINGS'] = '1'\n" + textwrap.dedent(
        EXIT_CASES[case])
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    assert "leaked" not in out.stderr, out.stderr


def test_exit_with_torch_imported_has_no_leak_report() -> None:
    pytest.importorskip("torch")
    out = run_python("""
        import torch, framescope
        m = torch.nn.Linear(4, 4)
        with framescope.profile() as prof:
            m(torch.ones(2, 4))
        t = prof.trace
    """)
    assert out.returncode == 0, out.stderr
    assert "leaked" not in out.stderr, out.stderr


# -- flight recorder --------------------------------------------------------------------------------


def middle(n: int) -> int:
    total = 0
    with framescope.record_function("enclosing_range"):
        for _ in range(n):
            total += leaf()
        framescope.mark("window_end")
    return total


def outer(n: int) -> int:
    return middle(n)


@pytest.mark.parametrize("backend", ["frame_hook", "fallback"])
def test_keep_newest_keeps_what_encloses_the_window(backend: str) -> None:
    """Before: the flight recorder dropped the begins of the frames and ranges that enclose its
    window with the recycled chunks, so the newest events floated at the root."""
    with framescope.profile(memory_limit="256KiB", on_limit="keep_newest",
                            backend=backend) as prof:  # type: ignore[arg-type]
        outer(100_000)
    events = prof.events()
    assert prof.trace.dropped_events > 0
    (end,) = events.named("window_end")
    chain = []
    p = end.parent
    while p is not None and p >= 0:
        chain.append(events[p].name)
        p = events[p].parent
    assert chain[0] == "enclosing_range", chain
    assert chain[1].endswith(": middle") and chain[2].endswith(": outer"), chain
    (mid,) = [e for e in events if e.name.endswith(": middle")]
    leaves = [e for e in events if e.name.endswith(": leaf")]
    assert leaves and mid.start_ns < leaves[0].start_ns, "the enclosing frame keeps its real start"
    assert len(leaves) < 100_000
