"""A C extension compiled against <framescope/c_api.h> records ranges into a Python session."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import framescope
from tests.support.native_build import build_extension

SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <framescope/c_api.h>

static PyObject* decode(PyObject* self, PyObject* arg) {
    framescope_range* outer = framescope_range_enter("c.decode");
    framescope_range* inner = framescope_range_enter("c.decode.inner");
    PyObject* result = PyObject_CallNoArgs(arg);   /* a Python callback inside the range */
    framescope_range_exit(inner);
    framescope_mark("c.mark");
    framescope_range_exit(outer);
    return result;
}

static framescope_range* pending = NULL;
static PyObject* begin(PyObject* self, PyObject* unused) {
    pending = framescope_range_enter("c.async");
    Py_RETURN_NONE;
}
static PyObject* end(PyObject* self, PyObject* unused) {
    framescope_range_exit(pending);   /* may run on another thread */
    pending = NULL;
    Py_RETURN_NONE;
}
static PyObject* enabled(PyObject* self, PyObject* unused) {
    return PyBool_FromLong(framescope_is_enabled());
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_O, NULL},
    {"begin", begin, METH_NOARGS, NULL},
    {"end", end, METH_NOARGS, NULL},
    {"enabled", enabled, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "fs_c_ext", NULL, -1, methods};

PyMODINIT_FUNC PyInit_fs_c_ext(void) {
    if (framescope_import_c_api() < 0) return NULL;
    return PyModule_Create(&def);
}
"""


@pytest.fixture(scope="module")
def ext(tmp_path_factory: pytest.TempPathFactory):
    return build_extension("fs_c_ext", SOURCE, tmp_path_factory.mktemp("cext"), [framescope.get_include()])


def callback() -> int:
    return 7


def test_c_ranges_land_in_the_python_session(ext, checked_trace) -> None:
    assert not ext.enabled()
    with framescope.profile() as prof:
        assert ext.enabled()
        assert ext.decode(callback) == 7
    events = prof.events()
    (outer,) = events.named("c.decode")
    (inner,) = events.named("c.decode.inner")
    (mark,) = events.named("c.mark")
    assert inner.parent == outer.index
    assert mark.parent == outer.index
    (py_cb,) = [e for e in events if e.name.endswith(": callback")]
    assert py_cb.parent == inner.index, "the Python callback nests under the C range"
    # The C range nests under the test's own frame (this function).
    test_frame = events[outer.parent]
    assert test_frame.name.endswith("test_c_ranges_land_in_the_python_session")
    checked_trace(prof)


def test_c_ranges_without_session_are_free(ext) -> None:
    assert ext.decode(callback) == 7
    assert not ext.enabled()


def test_c_range_ended_on_another_thread(ext, checked_trace) -> None:
    with framescope.profile(with_stack=False) as prof:
        ext.begin()
        t = threading.Thread(target=ext.end)
        t.start()
        t.join()
    (ev,) = prof.events().named("c.async")
    assert ev.duration_ns >= 0
    checked_trace(prof)


def test_import_without_framescope_fails_cleanly(tmp_path: Path) -> None:
    import subprocess
    import sys

    # A fresh interpreter whose framescope cannot be imported: the init reports ImportError.
    src = SOURCE
    mod_dir = tmp_path
    build_extension("fs_c_ext", src, mod_dir, [framescope.get_include()])
    probe = (
        "import sys\n"  # fs_c_ext is found in the working directory, mod_dir
        "sys.modules['framescope'] = None\n"
        "try:\n"
        "    import fs_c_ext\n"
        "except ImportError as e:\n"
        "    print('ImportError', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=mod_dir)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ImportError")
