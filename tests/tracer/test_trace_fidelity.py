"""Regression tests of issue 14 ("the trace is what ran"), one per defect, each on every backend.

test_differential.py compares whole programs with CPython's own hooks; these tests pin each
defect found there down with a small program and a direct check of framescope's trace.
"""

from __future__ import annotations

import functools
import gc
import sys
import threading
import time
import weakref
from typing import Any

import pytest

import framescope
from framescope import Event

BACKENDS = ["frame_hook", "fallback"]


def named(prof: framescope.profile, suffix: str) -> list[Event]:
    return [e for e in prof.events() if e.name.endswith(suffix)]


def parent_name(prof: framescope.profile, e: Event) -> str | None:
    return None if e.parent is None else prof.events()[e.parent].name


def qual(name: str) -> str:
    """What a frame named ``Class.method`` shows: 3.10 code objects know only ``method``."""
    return name if sys.version_info >= (3, 11) else name.rsplit(".", 1)[-1]


def calls_of(prof: framescope.profile, code: Any) -> list[Event]:
    """The slices of `code`'s frames (by first line and name: 3.10 names lack the class)."""
    return [
        e for e in prof.events()
        if f"({code.co_firstlineno}): " in e.name and e.name.rsplit(".", 1)[-1].endswith(code.co_name)
        and e.name.rsplit(": ", 1)[-1].endswith(code.co_name)
    ]


# -- 1. 3.13: __init__ entered by a specialized `Cls(...)` site (CALL_ALLOC_AND_ENTER_INIT) ----


class Point:
    def __init__(self, x: int) -> None:
        self.x = x


def build_points(n: int) -> None:
    for i in range(n):
        Point(i)


def make_class() -> type:
    class Made:
        def __init__(self, x: int) -> None:
            self.x = x

    return Made


def instantiate(cls: type, n: int) -> None:
    for i in range(n):
        cls(i)


@pytest.mark.parametrize("backend", BACKENDS)
def test_init_of_specialized_class_calls_recorded(backend: str) -> None:
    build_points(200)  # the site specializes before the session
    instantiate(make_class(), 200)  # and this one, for another class than the next
    with framescope.profile(backend=backend) as prof:
        build_points(101)
        made_class = make_class()
        instantiate(made_class, 50)  # a class made in the session, at a warm site
    assert len(calls_of(prof, Point.__init__.__code__)) == 101
    made = calls_of(prof, made_class.__init__.__code__)  # type: ignore[misc]
    assert len(made) == 50
    assert all(parent_name(prof, e).endswith(": instantiate") for e in made)  # type: ignore[union-attr]


# -- 2. a session started in a helper, after an earlier session on the same thread -------------


def start_in_helper(backend: str) -> framescope.profile:
    prof = framescope.profile(backend=backend)
    prof.start()
    return prof


def callee() -> int:
    return 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_second_session_started_in_helper(backend: str) -> None:
    with framescope.profile(backend=backend):
        callee()
    prof = start_in_helper(backend)
    callee()
    prof.stop()
    (call,) = named(prof, ": callee")
    assert parent_name(prof, call).endswith("test_second_session_started_in_helper")  # type: ignore[union-attr]
    (helper,) = named(prof, ": start_in_helper")
    assert helper.end_ns <= call.start_ns


# -- 3. fallback backends: no phantom framescope frame ------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_framescope_frame_stays_open(backend: str) -> None:
    with framescope.profile(backend=backend) as prof:
        callee()
    (call,) = named(prof, ": callee")
    assert parent_name(prof, call).endswith(": test_no_framescope_frame_stays_open")  # type: ignore[union-attr]
    # framescope's own start frames (kept by the fallbacks, which see them return) end at once
    for e in prof.events():
        if "framescope/profiler/" in e.name and "stop" not in e.name and "__exit__" not in e.name:
            assert e.end_ns <= call.start_ns, e


# -- 4. a thread blocked during the whole session ----------------------------------------------


def blocked(release: threading.Event) -> None:
    release.wait()


@pytest.mark.parametrize("backend", BACKENDS)
def test_idle_thread_appears_with_its_open_frames(backend: str) -> None:
    release = threading.Event()
    t = threading.Thread(target=blocked, args=(release,), name="idle-worker")
    t.start()
    while t.native_id is None:
        time.sleep(0.001)
    time.sleep(0.01)  # in release.wait()
    try:
        with framescope.profile(backend=backend) as prof:
            callee()
    finally:
        release.set()
        t.join()
    index = [i for i, th in enumerate(prof.trace.threads) if th[1] == t.native_id]
    assert len(index) == 1, prof.trace.threads
    assert prof.trace.threads[index[0]][3] == "idle-worker"
    frames = [e for e in prof.events() if e.thread == index[0]]
    assert any(e.name.endswith(": blocked") for e in frames)
    assert any(e.name.endswith(qual("Event.wait")) for e in frames)
    for e in frames:  # open from start to stop
        assert (e.start_ns, e.end_ns) == (prof.trace.start_ns, prof.trace.stop_ns)


# -- 5. finalizers run while a returning frame's locals are freed -------------------------------


class Resource:
    def __del__(self) -> None:
        finalized()


def finalized() -> None:
    pass


def drop_local() -> None:
    r = Resource()
    del_later(r)


def del_later(x: Any) -> None:
    pass


REFS: list[Any] = []


def with_weakref_callback() -> None:
    t = Target()
    REFS.append(weakref.ref(t, lambda ref: finalized()))
    del_later(t)


class Target:
    pass


@pytest.mark.parametrize("backend", BACKENDS)
def test_finalizers_follow_the_returning_frame(backend: str) -> None:
    gc.collect()
    with framescope.profile(backend=backend) as prof:
        drop_local()
        with_weakref_callback()
    (drop,) = named(prof, ": drop_local")
    (weak,) = named(prof, ": with_weakref_callback")
    fin = named(prof, ": finalized")
    assert len(fin) == 2
    for returning, f in zip((drop, weak), fin):
        assert parent_name(prof, f) != returning.name  # not inside the frame that returned
        assert returning.end_ns <= f.start_ns


# -- 6. builtins named by what was called -------------------------------------------------------


class MyList(list):  # type: ignore[type-arg]
    pass


def builtin_calls() -> None:
    m = MyList()
    m.append(1)
    plain: list[int] = []
    plain.append(2)
    add = plain.append
    add(3)
    t = Target()
    r = weakref.ref(t)
    r()
    p = functools.partial(max, 1)
    p(2)
    object.__new__(Target)


@pytest.mark.parametrize("backend", BACKENDS)
def test_builtins_named_by_what_was_called(backend: str) -> None:
    builtin_calls()  # specialize; the first names seen would stick
    with framescope.profile(backend=backend, c_calls=True) as prof:
        builtin_calls()
    names = [e.name for e in prof.events() if e.category == "python_function" and e.name.startswith("<")]
    assert names.count("<built-in method list.append>") == 3, names
    assert not any("MyList.append" in n for n in names), names
    assert "<built-in method object.__new__>" in names
    if sys.version_info >= (3, 12):  # CALL events report calls of any object; 3.10/3.11 builtins only
        assert "<built-in method weakref.ReferenceType>" in names  # the type called
        assert "<built-in method weakref.ReferenceType.__call__>" in names  # r()
        assert "<built-in method functools.partial>" in names
        assert "<built-in method functools.partial.__call__>" in names


def new_of_several_types() -> None:
    tuple.__new__(tuple, (1,))
    object.__new__(Target)
    weakref.ref.__new__(weakref.ref, Target())


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_types_new_is_named_by_its_type(backend: str) -> None:
    # Every type's __new__ shares one PyMethodDef (CPython's tp_new wrapper): named by that alone,
    # all three showed as the first one seen.
    with framescope.profile(backend=backend, c_calls=True) as prof:
        new_of_several_types()
    names = [e.name for e in prof.events() if e.name.endswith(".__new__>")]
    assert names == [
        "<built-in method tuple.__new__>",
        "<built-in method object.__new__>",
        "<built-in method weakref.ReferenceType.__new__>",
    ]


# -- 7. threads started in the session, from their first frame ----------------------------------


def thread_work() -> int:
    return len([1, 2])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("c_calls", [False, True])
def test_threads_recorded_from_their_first_frame(backend: str, c_calls: bool) -> None:
    with framescope.profile(backend=backend, c_calls=c_calls) as prof:
        t = threading.Thread(target=thread_work)
        t.start()
        t.join()
    tid = [i for i, th in enumerate(prof.trace.threads) if th[1] == t.native_id][0]
    roots = [e for e in prof.events() if e.thread == tid and e.parent is None]
    assert [e.name.rsplit(": ", 1)[-1] for e in roots] == [qual("Thread._bootstrap")]
    inner = [e for e in prof.events() if e.thread == tid and e.name.endswith(qual("Thread._bootstrap_inner"))]
    assert len(inner) == 1 and parent_name(prof, inner[0]) == roots[0].name
    (work,) = [e for e in prof.events() if e.thread == tid and e.name.endswith(": thread_work")]
    assert parent_name(prof, work).endswith(qual("Thread.run"))  # type: ignore[union-attr]
    if c_calls:  # the builtins _bootstrap_inner calls before run() are there too
        before_run = [
            e for e in prof.events()
            if e.thread == tid and e.category == "python_function" and e.name.startswith("<")
            and e.start_ns < work.start_ns
        ]
        assert before_run, "no builtin call recorded before run()"


# -- 8. frames running at start end when they return --------------------------------------------


def outer_helper() -> framescope.profile:
    prof = inner_helper()
    time.sleep(0.02)  # C only: no Python call for a while after inner_helper returned
    framescope.mark("after the sleep")
    callee()
    return prof


def inner_helper() -> framescope.profile:
    prof = framescope.profile(backend=CURRENT_BACKEND[0], c_calls=CURRENT_BACKEND[1])
    prof.start()
    callee()
    return prof


CURRENT_BACKEND: list[Any] = ["frame_hook", False]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("c_calls", [False, True])
def test_frames_from_the_start_end_when_they_return(backend: str, c_calls: bool) -> None:
    CURRENT_BACKEND[:] = [backend, c_calls]
    prof = outer_helper()
    prof.stop()
    (inner,) = named(prof, ": inner_helper")
    (mark,) = [e for e in prof.events() if e.name == "after the sleep"]
    (outer,) = named(prof, ": outer_helper")
    assert inner.end_ns <= mark.start_ns  # not at the thread's next Python call, 20 ms later
    if c_calls:
        (sleep,) = [e for e in prof.events() if e.name == "<built-in method time.sleep>"]
        assert parent_name(prof, sleep) == outer.name
        assert inner.end_ns <= sleep.start_ns


# -- issue 15 item 8: another tool's sys.setprofile function (3.10/3.11) ------------------------

setprofile_only = pytest.mark.skipif(
    sys.version_info >= (3, 12), reason="3.12+ records with sys.monitoring, beside sys.setprofile"
)


@setprofile_only
@pytest.mark.parametrize("c_calls", [False, True])
def test_other_tools_profile_function_goes_on_and_comes_back(c_calls: bool) -> None:
    seen: list[str] = []

    def other_tool(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            seen.append(frame.f_code.co_name)

    sys.setprofile(other_tool)
    try:
        backend = "frame_hook" if c_calls else "fallback"
        with framescope.profile(backend=backend, c_calls=c_calls) as prof:
            callee()
        assert sys.getprofile() is other_tool
        assert "callee" in seen  # the other tool kept receiving events during the session
        assert named(prof, ": callee")
    finally:
        sys.setprofile(None)


@setprofile_only
def test_replacing_framescopes_profile_function_is_reported() -> None:
    with framescope.profile(backend="fallback") as prof:
        sys.setprofile(None)  # ends recording on this thread
        callee()
    assert any("sys.setprofile() replaced framescope's profile function" in w for w in prof.warnings)
    assert sys.getprofile() is None


# -- issue 15 item 10: label_calls when a closure captures self -----------------------------------


class Labelled:
    value = 1

    def __call__(self, x: int) -> int:
        def inner() -> int:
            return self.value + x  # self lives in a cell

        return inner()


@pytest.mark.parametrize("backend", BACKENDS)
def test_label_calls_when_a_closure_captures_self(backend: str) -> None:
    framescope.label_calls(Labelled, "labelled")
    with framescope.profile(backend=backend) as prof:
        Labelled()(2)
    assert [e.name for e in prof.events() if e.name.startswith("labelled")] == ["labelled: Labelled"]


# -- a frame that fails the recursion check never runs ---------------------------------------------

RAN = 0  # frames of down() that ran their first line (a counter: list.append would itself
# be refused by the recursion check in the deepest frame)


def down(n: int) -> int:
    global RAN
    RAN += 1
    return down(n + 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_frame_refused_by_the_recursion_limit_is_not_a_call(backend: str) -> None:
    global RAN
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(300)
    RAN = 0
    try:
        with framescope.profile(backend=backend) as prof:
            try:
                down(0)
            except RecursionError:
                pass
    finally:
        sys.setrecursionlimit(old)
    assert len(calls_of(prof, down.__code__)) == RAN > 0


# -- 3.13: an inlined __init__ still running on another thread when a session stops -------------


class Waiter:
    def __init__(self, entered: threading.Event, release: threading.Event) -> None:
        entered.set()
        release.wait()


def make_waiters(n: int, entered: threading.Event, release: threading.Event) -> None:
    for _ in range(n):
        Waiter(entered, release)  # specializes (3.13: the __init__ is pushed inline)


@pytest.mark.parametrize("backend", BACKENDS)
def test_inline_init_open_across_two_sessions(backend: str) -> None:
    done = threading.Event()
    done.set()
    make_waiters(200, done, done)  # warm: the site specializes before the sessions
    entered, release = threading.Event(), threading.Event()
    first = framescope.profile(backend=backend)
    first.start()
    t = threading.Thread(target=make_waiters, args=(1, entered, release), name="waiter")
    t.start()
    assert entered.wait(10)
    first.stop()  # the waiter's __init__ (recorded by this session) is still running
    with framescope.profile(backend=backend) as second:
        release.set()
        t.join()
    # The second session sees that frame open from its start, ended once at its real return;
    # nothing of the first session's bookkeeping ends another frame of the thread.
    (init,) = calls_of(second, Waiter.__init__.__code__)
    (maker,) = [e for e in second.events() if e.name.endswith(": make_waiters")]
    assert init.parent is not None and second.events()[init.parent].name == maker.name
    assert maker.start_ns <= init.start_ns <= init.end_ns <= maker.end_ns
    assert not init.open_at_stop and not maker.open_at_stop
    assert len(calls_of(first, Waiter.__init__.__code__)) == 1
