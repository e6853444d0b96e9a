"""The Python API of the core: sessions, record_function, marks, memory, events, merging."""

from __future__ import annotations

import gc
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

import framescope


def ranges(prof: framescope.profile, name: str) -> list[framescope.Event]:
    return prof.events().named(name)


def test_record_function_nests_and_times() -> None:
    with framescope.profile(with_stack=False) as prof:
        with framescope.record_function("outer"):
            with framescope.record_function("inner"):
                pass
            with framescope.record_function("inner"):
                pass
    events = prof.events()
    (outer,) = ranges(prof, "outer")
    inner = ranges(prof, "inner")
    assert len(inner) == 2
    assert all(e.parent == outer.index for e in inner)
    assert all(outer.start_ns <= e.start_ns and e.end_ns <= outer.end_ns for e in inner)
    assert inner[0].end_ns <= inner[1].start_ns
    assert outer.category == "user_annotation"
    assert events.children(outer) == inner


def test_record_function_as_decorator_keeps_the_function() -> None:
    @framescope.record_function("decorated")
    def add(a: int, b: int = 1) -> int:
        """Adds."""
        return a + b

    assert add.__name__ == "add" and add.__doc__ == "Adds."
    with framescope.profile(with_stack=False) as prof:
        assert add(1, b=2) == 3
        assert add(5) == 6
    assert len(ranges(prof, "decorated")) == 2


def test_record_function_decorator_behaves_like_the_function() -> None:
    import inspect
    import pickle
    import weakref

    class Box:
        @framescope.record_function("method")
        def get(self, x: int) -> tuple[Box, int]:
            return self, x

        @staticmethod
        @framescope.record_function("static")
        def twice(x: int) -> int:
            return 2 * x

    @framescope.record_function("sig", "a string arg")
    def f(a: int, *, b: int = 2) -> int:
        return a * b

    box = Box()
    assert box.get(3) == (box, 3) and Box.get(box, 4) == (box, 4) and box.twice(5) == 10
    assert inspect.signature(f) == inspect.signature(f.__wrapped__)
    assert list(inspect.signature(f).parameters) == ["a", "b"]
    assert f.__qualname__.endswith("<locals>.f") and f.__wrapped__(3) == 6
    assert "record_function('sig') wrapper" in repr(f)
    with pytest.raises(TypeError):
        f(1, 2)  # the function's own argument errors come through
    with pytest.raises(TypeError, match="callables"):
        framescope.record_function("x")(42)  # type: ignore[operator]
    with framescope.profile(with_stack=False, record_shapes=True) as prof:
        assert f(3, b=3) == 9
        assert box.get(1)[1] == 1
    assert [e.name for e in prof.events() if e.category == "user_annotation"] == ["sig", "method"]
    # weak references and cycles through the wrapper are collected
    ref = weakref.ref(f)
    f.self = f  # type: ignore[attr-defined]
    del f
    gc.collect()
    assert ref() is None
    with pytest.raises((TypeError, pickle.PicklingError, AttributeError)):
        pickle.dumps(Box.get)  # like a local function: found by name only at module level


def test_record_function_decorator_raises_through_and_ends_the_range() -> None:
    @framescope.record_function("raising")
    def boom() -> None:
        raise ValueError("inside")

    with framescope.profile(with_stack=False) as prof:
        with pytest.raises(ValueError, match="inside"):
            boom()
        framescope.mark("after")
    (ev,) = ranges(prof, "raising")
    (after,) = prof.events().named("after")
    assert ev.end_ns <= after.start_ns, "the range ended when the exception left it"


def test_record_function_without_session_records_nothing_and_works() -> None:
    with framescope.record_function("nobody listens"):
        value = 42
    assert value == 42
    assert not framescope.is_enabled()


def test_record_function_exception_closes_range() -> None:
    with framescope.profile(with_stack=False) as prof:
        with pytest.raises(KeyError):
            with framescope.record_function("raises"):
                raise KeyError("x")
    (ev,) = ranges(prof, "raises")
    assert ev.duration_ns >= 0


def test_record_function_bad_input() -> None:
    with pytest.raises(TypeError):
        framescope.record_function(123)  # type: ignore[arg-type]
    rf = framescope.record_function("twice")
    with rf:
        with pytest.raises(RuntimeError):
            rf.__enter__()
    with pytest.raises(TypeError):
        framescope.record_function("x")(42)  # type: ignore[operator]


def test_record_function_enter_exit_called_directly() -> None:
    rf = framescope.record_function
    r = rf("direct")
    # The methods behave like methods, bound and unbound (they are descriptors of our own so
    # that a `with` allocates no bound-method objects).
    assert "bound method record_function.__enter__" in repr(r.__enter__)
    assert "method '__exit__'" in repr(rf.__exit__)
    with framescope.profile(with_stack=False) as prof:
        assert r.__enter__() is r
        assert r.__exit__(None, None, None) is False
        assert rf.__enter__(r) is r
        assert rf.__exit__(r, None, None, None) is False
        entered = r.__enter__
        entered()
        del entered
        r.__exit__()  # __exit__ takes up to three arguments; a second exit is a no-op
        r.__exit__()
    assert len(ranges(prof, "direct")) == 3
    with pytest.raises(TypeError, match="takes no arguments"):
        r.__enter__(1)
    with pytest.raises(TypeError, match="at most 3"):
        r.__exit__(1, 2, 3, 4)
    with pytest.raises(TypeError, match="keyword"):
        r.__exit__(exc=None)
    with pytest.raises(TypeError, match="needs a record_function"):
        rf.__enter__(object())
    with pytest.raises(TypeError, match="needs a record_function"):
        rf.__exit__()


def test_record_function_methods_do_not_leak() -> None:
    import sys

    r = framescope.record_function("refs")
    before = sys.getrefcount(r)
    methods = [r.__enter__ for _ in range(100)]  # more than the free list holds
    assert sys.getrefcount(r) == before + 100
    del methods
    assert sys.getrefcount(r) == before
    for _ in range(1000):
        with r:
            pass
    assert sys.getrefcount(r) == before
    with r:
        with pytest.raises(RuntimeError, match="already entered"):
            r.__enter__()


def test_hostile_names_survive(checked_trace) -> None:
    names = ['quote " back \\ slash', "nul\x00inside", "newline\n tab\t", "ünïcødé ☃ 🚀", "\x01\x1f"]
    with framescope.profile(with_stack=False) as prof:
        for n in names:
            with framescope.record_function(n):
                pass
    recorded = {e.name for e in prof.events() if e.category == "user_annotation"}
    assert recorded == set(names)
    data = checked_trace(prof)
    in_json = {e["name"] for e in data["traceEvents"] if e.get("cat") == "user_annotation"}
    assert in_json == set(names)


def test_threads_record_into_one_session() -> None:
    barrier = threading.Barrier(4)

    def work(i: int) -> None:
        barrier.wait()
        for _ in range(100):
            with framescope.record_function(f"worker-{i}"):
                pass

    with framescope.profile(with_stack=False) as prof:
        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    per_thread = {}
    for i in range(4):
        evs = ranges(prof, f"worker-{i}")
        assert len(evs) == 100
        assert len({e.thread for e in evs}) == 1
        per_thread[i] = evs[0].thread
    assert len(set(per_thread.values())) == 4


def test_thread_pool_ranges_land_on_worker_threads() -> None:
    with framescope.profile(with_stack=False) as prof:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda i: framescope.record_function(f"task").__enter__().__exit__(None, None, None), range(20)))
    assert len(ranges(prof, "task")) == 20


def test_thread_that_exits_keeps_its_events() -> None:
    with framescope.profile(with_stack=False) as prof:
        t = threading.Thread(target=lambda: framescope.record_function("short-lived").__enter__())
        t.start()
        t.join()
    (ev,) = ranges(prof, "short-lived")
    assert ev.duration_ns >= 0  # left open by the thread: closed at stop


def test_marks_and_memory_events() -> None:
    with framescope.profile(with_stack=False, profile_memory=True) as prof:
        framescope.mark("checkpoint")
        framescope.record_memory(0x1000, 256, 256, 0)
        framescope.record_memory(0x1000, -256, 0, 0)
    (mark,) = ranges(prof, "checkpoint")
    assert mark.duration_ns == -1
    memory = prof.memory_events()
    assert [(m.address, m.bytes, m.total_allocated) for m in memory] == [(0x1000, 256, 256), (0x1000, -256, 0)]
    assert memory[0].time_ns <= memory[1].time_ns


def test_second_session_is_a_clear_error() -> None:
    with framescope.profile(with_stack=False):
        with pytest.raises(RuntimeError, match="already"):
            framescope.profile(with_stack=False).start()
    # And the first one stopped cleanly: a new one starts.
    with framescope.profile(with_stack=False):
        assert framescope.is_enabled()
    assert not framescope.is_enabled()


def test_profile_misuse() -> None:
    p = framescope.profile(with_stack=False)
    with pytest.raises(RuntimeError):
        p.stop()
    with pytest.raises(RuntimeError):
        p.events()
    with pytest.raises(ValueError):
        framescope.profile(backend="nope")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        framescope.profile(memory_limit=0)
    with pytest.raises(ValueError):
        framescope.profile(on_limit="later")  # type: ignore[arg-type]


def test_memory_limit_warns_and_keeps_oldest() -> None:
    with framescope.profile(with_stack=False, memory_limit="1MiB") as prof:
        for _ in range(200_000):
            with framescope.record_function("x"):
                pass
    assert prof.trace.dropped_events > 0
    assert any("limit" in w for w in prof.warnings)
    evs = ranges(prof, "x")
    assert 0 < len(evs) < 200_000


def test_events_view_is_lazy_and_indexable() -> None:
    with framescope.profile(with_stack=False) as prof:
        for _ in range(50_000):
            with framescope.record_function("many"):
                pass
    events = prof.events()
    assert len(events) >= 50_000
    last = events[-1]
    assert events[len(events) - 1] == last
    with pytest.raises(IndexError):
        events[len(events)]
    assert isinstance(events[0:3], list) and len(events[0:3]) == 3


def test_serialize_merge_roundtrip() -> None:
    with framescope.profile(with_stack=False) as a:
        with framescope.record_function("in-a"):
            pass
    with framescope.profile(with_stack=False) as b:
        with framescope.record_function("in-b"):
            pass
    blob = b.serialize()
    assert isinstance(blob, bytes)
    a.merge(blob)
    names = {e.name for e in a.events()}
    assert {"in-a", "in-b"} <= names
    with pytest.raises((ValueError, RuntimeError)):
        a.merge(b"\x00not a trace")


def test_stats_and_summary() -> None:
    with framescope.profile(with_stack=False) as prof:
        for _ in range(3):
            with framescope.record_function("counted"):
                pass
    by_name = {n: (c, t, s) for n, c, t, s in prof.stats()}
    assert by_name["counted"][0] == 3
    assert "counted" in prof.summary()


def test_get_include_has_the_c_api() -> None:
    import os

    inc = framescope.get_include()
    assert os.path.isfile(os.path.join(inc, "framescope", "c_api.h"))
    assert os.path.isfile(os.path.join(inc, "framescope", "record_function.h"))


def test_merge_a_trace_from_another_process(tmp_path) -> None:
    from tests.support.subprocesses import run_python

    out_file = tmp_path / "child.fstrace"
    child = run_python(
        f"""
        import framescope
        with framescope.profile(with_stack=False) as prof:
            with framescope.record_function("in-child"):
                pass
        open({str(out_file)!r}, "wb").write(prof.serialize())
        """
    )
    assert child.returncode == 0, child.stderr
    with framescope.profile(with_stack=False) as prof:
        with framescope.record_function("in-parent"):
            pass
    prof.merge(out_file.read_bytes())
    (c,) = prof.events().named("in-child")
    (p,) = prof.events().named("in-parent")
    assert c.thread != p.thread, "the child's thread is its own track"


def test_memory_limit_warning_is_printed_once() -> None:
    import subprocess
    import sys

    code = ("import framescope\n"
            "with framescope.profile(with_stack=False, memory_limit='1MiB'):\n"
            "    for _ in range(200_000):\n"
            "        framescope.mark('x')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("reached its memory limit") == 1, out.stderr  # at the stop
    assert out.stderr.count("recording stops here") == 1, out.stderr  # as it happened
    assert 'on_limit="keep_newest"' in out.stderr, out.stderr


def test_record_memory_wrong_call_names_its_arguments() -> None:
    with pytest.raises(TypeError, match=r"record_memory\(\) missing 2 required positional "
                                        r"arguments: 'bytes' and 'total_allocated'"):
        framescope.record_memory(5)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"record_memory\(\): bytes must be an int"):
        framescope.record_memory(5, "8", 8)  # type: ignore[arg-type]


def test_calls_into_framescope_are_not_recorded_as_builtins() -> None:
    with framescope.profile(c_calls=True) as prof:
        framescope.mark("x")
        framescope.is_enabled()
        framescope.record_memory(1, 8, 8)
        len([])
    names = [e.name for e in prof.events() if e.name.startswith("<built-in")]
    assert not [n for n in names if "nb_func" in n or "framescope" in n], names
    assert any(e.name == "x" for e in prof.events())
