"""Odd names never break a session: lone surrogates, NUL and ill-formed UTF-8 are stored safely
(U+FFFD where text cannot be kept as is), and threads keep their names after they exit."""

from __future__ import annotations

import json
import pstats
import threading
import time
from pathlib import Path

import pytest

import framescope
from tests.support.native_build import build_extension
from tests.support.trace_checker import check_trace, load_trace

FFFD = "\ufffd"


def leaf() -> int:
    return 1


def readers_work(prof: framescope.profile, tmp_path: Path) -> None:
    """Every reader and writer of the trace accepts what the session stored."""
    names = [e.name for e in prof.events()]
    assert names
    prof.summary()
    prof.stats()
    _ = prof.trace.threads
    prof.export_chrome_trace(tmp_path / "t.json")
    check_trace(load_trace(str(tmp_path / "t.json")))
    prof.export_pstats(tmp_path / "t.prof")
    pstats.Stats(str(tmp_path / "t.prof"))
    framescope._core.Trace.deserialize(prof.serialize())


def thread_names(prof: framescope.profile) -> set[str]:
    return {name for _pid, _tid, _pthread, name in prof.trace.threads}


def test_live_thread_with_a_lone_surrogate_in_its_name(tmp_path: Path) -> None:
    """Before: stop() raised TypeError and the session could never be stopped or restarted."""
    release = threading.Event()
    started = threading.Event()

    def run() -> None:
        started.set()
        while not release.wait(0.001):  # records during the session
            leaf()

    t = threading.Thread(target=run, name="w\udcff")
    t.start()
    started.wait()
    try:
        with framescope.profile() as prof:
            for _ in range(20):
                leaf()
                time.sleep(0.001)
    finally:
        release.set()
        t.join()
    assert not framescope.is_enabled()
    assert "w" + FFFD in thread_names(prof)
    readers_work(prof, tmp_path)
    with framescope.profile() as again:  # a new session starts normally
        leaf()
    assert any(e.name.endswith(": leaf") for e in again.events())


@pytest.mark.parametrize("backend", ["frame_hook", "fallback"])
def test_threads_that_exit_during_the_session_keep_their_names(backend: str) -> None:
    """Before: a thread that ran and exited during the session lost its name in the trace."""
    before_start = threading.Event()
    old = threading.Thread(target=before_start.wait, name="existed-at-start")
    old.start()
    workers: list[threading.Thread] = []
    with framescope.profile(backend=backend) as prof:  # type: ignore[arg-type]
        before_start.set()
        old.join()
        # Enough threads to go through the list's compaction several times.
        for i in range(150):
            w = threading.Thread(target=leaf, name=f"worker-{i}")
            w.start()
            w.join()
            workers.append(w)
        renamed = threading.Thread(target=leaf, name="first-name")
        renamed.start()
        renamed.join()
        renamed.name = "renamed-after-exit"
    names = thread_names(prof)
    assert {f"worker-{i}" for i in range(150)} <= names
    assert "existed-at-start" in names
    assert "renamed-after-exit" in names  # the name at stop, as threading knows it
    assert threading.current_thread().name in names
    # Each recorded worker thread is named (no thread left without a name but C-only ones).
    assert all(name for name in names)


def test_names_with_nul_and_surrogates(tmp_path: Path) -> None:
    """Before: a record_function label's args were cut at a NUL; marks and labels with lone
    surrogates raised."""
    with framescope.profile(record_shapes=True) as prof:
        with framescope.record_function("a\x00b", "x\x00y"):
            leaf()
        with framescope.record_function("s\udcffs", "args\udcff"):
            pass
        framescope.mark("m\x00n")
        framescope.mark("m\udcff")

        @framescope.record_function("dec\x00orated")
        def decorated() -> None:
            pass

        decorated()
    names = [e.name for e in prof.events()]
    assert "a\x00b" in names
    assert "s" + FFFD + "s" in names
    assert "m\x00n" in names and "m" + FFFD in names
    assert "dec\x00orated" in names
    (nul,) = prof.events().named("a\x00b")
    assert prof.trace.detail(nul.index)[3] == ["x\x00y"]
    (sur,) = prof.events().named("s" + FFFD + "s")
    assert prof.trace.detail(sur.index)[3] == ["args" + FFFD]
    readers_work(prof, tmp_path)
    data = json.loads((tmp_path / "t.json").read_text(encoding="utf-8"))
    assert "a\x00b" in {e.get("name") for e in data["traceEvents"]}


def test_code_with_an_undecodable_file_name(tmp_path: Path) -> None:
    """A file name decoded with surrogateescape (bytes that are not UTF-8) was shown as '<?>'."""
    ns: dict[str, object] = {}
    exec(compile("def odd():\n    return 2\n", "dir\udcff/odd.py", "exec"), ns)
    with framescope.profile() as prof:
        ns["odd"]()  # type: ignore[operator]
    (odd,) = [e for e in prof.events() if e.name.endswith(": odd")]
    assert odd.name == "dir" + FFFD + "/odd.py(1): odd"
    readers_work(prof, tmp_path)


C_NAMES = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <framescope/c_api.h>

static PyObject* odd_ranges(PyObject* self, PyObject* unused) {
    framescope_range_exit(framescope_range_enter("bad\xff\xfe utf8"));
    framescope_range_exit(framescope_range_enter("cut\xe2\x82"));
    framescope_range_exit(framescope_range_enter("surrogate \xed\xa0\x80"));
    framescope_range_exit(framescope_range_enter("good \xe2\x82\xac"));
    framescope_mark("mark\xc0\xaf");
    Py_RETURN_NONE;
}
static PyMethodDef methods[] = {{"odd_ranges", odd_ranges, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "fs_odd_names", NULL, -1, methods};
PyMODINIT_FUNC PyInit_fs_odd_names(void) {
    if (framescope_import_c_api() < 0) return NULL;
    return PyModule_Create(&def);
}
"""


def test_ill_formed_utf8_from_the_c_abi(tmp_path: Path) -> None:
    ext = build_extension("fs_odd_names", C_NAMES, tmp_path, [framescope.get_include()])
    with framescope.profile() as prof:
        ext.odd_ranges()
    names = {e.name for e in prof.events()}
    assert {
        "bad" + FFFD + FFFD + " utf8",
        "cut" + FFFD,
        "surrogate " + FFFD * 3,
        "good \u20ac",
        "mark" + FFFD * 2,
    } <= names
    readers_work(prof, tmp_path)
