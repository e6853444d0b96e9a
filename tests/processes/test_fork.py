"""fork() during a session: the child's session goes on recording into the child's own trace
(it starts at the fork, with the forking thread's open frames and ranges as open slices); other
threads' buffers are dropped; stop() in the child never deadlocks; the parent is unaffected.
multiprocessing keeps working with fork, spawn and forkserver."""

from __future__ import annotations

import json
import multiprocessing
import sys
from pathlib import Path

import pytest

import framescope
from tests.support.subprocesses import run_python
from tests.support.native_build import build_extension

# Threads that record through the C ABI without the GIL, as a C/C++ library's worker pool does.
HAMMER = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <framescope/c_api.h>

#define N 3
static pthread_t threads[N];
static atomic_int stop_flag;

static void* work(void* arg) {
    char name[32];
    long i = 0;
    while (!atomic_load(&stop_flag)) {
        snprintf(name, sizeof name, "hammer_%ld", ++i % 7);  /* dynamic names: side records */
        framescope_range* r = framescope_range_enter(name);
        framescope_mark("hammer_mark");
        framescope_range_exit(r);
    }
    return NULL;
}
static PyObject* start(PyObject* self, PyObject* unused) {
    atomic_store(&stop_flag, 0);
    for (int i = 0; i < N; ++i) pthread_create(&threads[i], NULL, work, NULL);
    Py_RETURN_NONE;
}
static PyObject* stop(PyObject* self, PyObject* unused) {
    atomic_store(&stop_flag, 1);
    Py_BEGIN_ALLOW_THREADS
    for (int i = 0; i < N; ++i) pthread_join(threads[i], NULL);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}
static PyMethodDef methods[] = {{"start", start, METH_NOARGS, NULL}, {"stop", stop, METH_NOARGS, NULL},
                                {NULL, NULL, 0, NULL}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "fs_hammer", NULL, -1, methods};
PyMODINIT_FUNC PyInit_fs_hammer(void) {
    if (framescope_import_c_api() < 0) return NULL;
    return PyModule_Create(&def);
}
"""


@pytest.fixture(scope="module")
def hammer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("hammer")
    build_extension("fs_hammer", HAMMER, d, [framescope.get_include()])
    return d


FORK_WHILE_RECORDING = """
import json, os, sys, time
import framescope, fs_hammer  # fs_hammer: built in the working directory

def child_work():
    return sum(range(100))

def around_fork(results):
    with framescope.record_function("around_fork"):
        pid = os.fork()
        if pid == 0:
            child_work()
            framescope.mark("child_mark")
        return pid

results = []
with framescope.profile(backend=sys.argv[1], memory_limit="16MiB", on_limit="keep_newest") as prof:
    fs_hammer.start()
    time.sleep(0.01)
    for round in range(int(sys.argv[2])):
        pid = around_fork(results)
        if pid == 0:
            # The child: stop() (leaving the with block) must not deadlock on a lock held by a
            # hammer thread, which does not exist here.
            break
        # The parent: the child must finish (a deadlocked child is killed and reported).
        for _ in range(3000):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.01)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            print("DEADLOCK in round", round, flush=True)
            break
        if status != 0:
            print("CHILD FAILED in round", round, status, flush=True)
            break
    if pid != 0:
        fs_hammer.stop()

if pid == 0:
    events = prof.events()
    names = [e.name for e in events]
    threads = prof.trace.threads
    out = {
        "pid": os.getpid(),
        "threads": [(p, tid) for p, tid, _, _ in threads],
        "hammer": sum(n.startswith("hammer") for n in names),
        "child_work": sum(n.endswith(": child_work") for n in names),
        "child_mark": names.count("child_mark"),
        "around_fork_open_from_start": [
            e.start_ns == prof.trace.start_ns for e in events.named("around_fork")],
        "around_fork_frame": [e.start_ns == prof.trace.start_ns
                              for e in events if e.name.endswith(": around_fork")],
        # child_work runs inside the range, inside the frame that forked, as in the parent
        "parent_of_child_work": [e.parent >= 0 and events[e.parent].name == "around_fork" and
                                 events[events[e.parent].parent].name.endswith(": around_fork")
                                 for e in events if e.name.endswith(": child_work")][:1],
    }
    ok = (out["threads"] == [(os.getpid(), os.getpid())] and out["hammer"] == 0
          and out["child_work"] == 1 and out["child_mark"] == 1
          and out["around_fork_open_from_start"] == [True] and out["around_fork_frame"] == [True]
          and out["parent_of_child_work"] == [True])
    if not ok:
        print("CHILD TRACE", json.dumps(out), flush=True)
    os._exit(0 if ok else 1)
names = [e.name for e in prof.events()]
print("parent", len(prof.trace.threads), sum(n.startswith("hammer") for n in names),
      names.count("around_fork"), sum(n.endswith(": child_work") for n in names))
"""


@pytest.mark.parametrize("backend", ["frame_hook", "fallback"])
def test_fork_while_threads_record_without_the_gil(hammer_dir: Path, backend: str) -> None:
    """Before the fork handlers: the child's stop() deadlocked on a buffer or session mutex held
    by a thread that does not exist in the child."""
    rounds = 15
    out = run_python(FORK_WHILE_RECORDING, backend, str(rounds), cwd=str(hammer_dir), timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "DEADLOCK" not in out.stdout and "CHILD" not in out.stdout, out.stdout
    parent = out.stdout.strip().splitlines()[-1].split()
    assert parent[0] == "parent", out.stdout
    threads, hammers, around, child_work = map(int, parent[1:])
    assert threads == 4, "the parent keeps its own threads"
    assert hammers > 0
    assert around == rounds, "the parent's ranges are all there"
    assert child_work == 0, "what the children ran is not in the parent's trace"


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_multiprocessing_pool_under_a_session(method: str, tmp_path: Path) -> None:
    code = """
import multiprocessing, sys, framescope

def square(x):
    return x * x

if __name__ == "__main__":
    ctx = multiprocessing.get_context(sys.argv[1])
    with framescope.profile() as prof:
        with ctx.Pool(2) as pool:
            print(sum(pool.map(square, range(100))))
    print("events", len(prof.events()) > 0, framescope.is_enabled())
"""
    script = tmp_path / "pool.py"
    script.write_text(code)
    out = run_python(f"import runpy, sys; sys.argv = [{str(script)!r}, {method!r}]; "
                     f"runpy.run_path({str(script)!r}, run_name='__main__')", timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["328350", "events", "True", "False"], out.stdout


def test_fork_child_without_a_session_and_a_new_session_in_the_child() -> None:
    code = """
import os, framescope
def f(): return 1
pid = os.fork()
if pid == 0:
    with framescope.profile() as prof:
        f()
    ok = any(e.name.endswith(": f") for e in prof.events())
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
print("status", status)
"""
    out = run_python(code, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "status 0" in out.stdout


def test_no_framescope_thread_outlives_a_session() -> None:
    """The chunk pool's refill thread (and the CPU sampler's) run only while a session does, so
    an os.fork() after it sees one thread: no 3.12+ DeprecationWarning about forking a process
    with threads. A fork child's session records with no refill thread (its chunks are mapped on
    demand) and keeps every event."""
    code = """
import os, sys, warnings, framescope
warnings.simplefilter("error")
def threads():
    return sorted(open(f"/proc/self/task/{t}/comm").read().strip()
                  for t in os.listdir("/proc/self/task"))
def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)
before = threads()
with framescope.profile() as prof:
    during = threads()
    fib(22)  # 57,313 calls
print("during", [t for t in during if t.startswith("framescope")])
print("after", threads() == before)
pid = os.fork()  # raises under simplefilter("error") if the process still had threads
if pid == 0:
    with framescope.profile(cpu_time=False) as child:
        child_threads = threads()
        fib(27)  # 635,621 calls, 10 MB of events: more than the free chunks the child inherits
    calls = sum(1 for e in child.events() if e.name.endswith(": fib"))
    os._exit(0 if calls == 635621 and child_threads == before else 3)
_, status = os.waitpid(pid, 0)
print("child", status)
print("calls", sum(1 for e in prof.events() if e.name.endswith(": fib")))
"""
    out = run_python(code, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines == ["during ['framescope-cpu', 'framescope-pool']", "after True", "child 0",
                     "calls 57313"], out.stdout
