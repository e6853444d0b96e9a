"""key_averages(): torch's attributes and table over a real session, checked against the events."""

from __future__ import annotations

import json
import pstats
import re
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

import framescope
from framescope import _core
from framescope.analysis._key_averages import FunctionEventAvg


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def leaf() -> int:
    return sum(range(100))


def caller_a() -> None:
    with framescope.record_function("shared_range"):
        leaf()


def caller_b() -> None:
    for _ in range(2):
        with framescope.record_function("shared_range"):
            leaf()


def workload() -> None:
    fib(12)
    caller_a()
    caller_b()


def by_key(avgs: list[FunctionEventAvg]) -> dict[str, FunctionEventAvg]:
    out = {e.key: e for e in avgs}
    assert len(out) == len(avgs), "keys are unique without grouping"
    return out


def expected_from_events(prof: framescope.profile) -> dict[str, tuple[int, int, int]]:
    """(count, total ns counting a name only where no enclosing event has it, self ns) per name,
    computed here from the events the trace reports (parents and durations)."""
    events = list(prof.events())
    children_ns: dict[int, int] = defaultdict(int)
    for e in events:
        if e.duration_ns >= 0 and e.parent is not None:
            children_ns[e.parent] += e.duration_ns
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for e in events:
        if e.duration_ns < 0:
            continue
        row = out[e.name]
        row[0] += 1
        row[2] += e.duration_ns - children_ns[e.index]
        p, nested = e.parent, False
        while p is not None:
            if events[p].name == e.name:
                nested = True
                break
            p = events[p].parent
        if not nested:
            row[1] += e.duration_ns
    return {k: (v[0], v[1], v[2]) for k, v in out.items()}


def test_attributes_match_the_events_exactly() -> None:
    with framescope.profile() as prof:
        workload()
    avgs = by_key(prof.key_averages(show_host=True))  # the events hold pytest's frames too
    expected = expected_from_events(prof)
    fib_key = next(k for k in avgs if k.endswith(": fib"))
    assert avgs[fib_key].count == 465  # calls of fib(12)
    assert avgs["shared_range"].count == 3
    assert avgs["shared_range"].category == "user_annotation"
    for key, (count, total_ns, self_ns) in expected.items():
        e = avgs[key]
        assert e.count == count, key
        assert e.cpu_time_total == pytest.approx(total_ns / 1e3, abs=1e-3), key
        assert e.self_cpu_time_total == pytest.approx(self_ns / 1e3, abs=1e-3), key
        assert e.cpu_time == pytest.approx(e.cpu_time_total / e.count)
        assert e.input_shapes == "" and e.stack == []
    # recursion counted once: fib's total is its outermost call's duration
    (outer,) = [e for e in prof.events() if e.name == fib_key and
                (e.parent is None or prof.events()[e.parent].name != fib_key)]
    assert avgs[fib_key].cpu_time_total == pytest.approx(outer.duration_ns / 1e3, abs=1e-3)


def test_c_calls_appear() -> None:
    with framescope.profile(c_calls=True) as prof:
        sorted([3, 1, 2])
        len("abc")
    keys = {e.key for e in prof.key_averages()}
    assert any("sorted" in k for k in keys) and any("len" in k for k in keys), keys


def test_group_by_stack_uses_the_python_frames_that_called_the_range() -> None:
    with framescope.profile() as prof:
        workload()
    rows = [e for e in prof.key_averages(group_by_stack_n=1) if e.key == "shared_range"]
    by_caller = {e.stack[0].rsplit(": ", 1)[1]: e.count for e in rows}
    assert by_caller == {"caller_a": 1, "caller_b": 2}
    deep = [e for e in prof.key_averages(group_by_stack_n=3) if e.key == "shared_range"]
    for e in deep:
        assert [s.rsplit(": ", 1)[1] for s in e.stack[1:]][:1] == ["workload"]
    table = prof.key_averages(group_by_stack_n=2).table(sort_by="count", row_limit=5)
    assert "Source Location" in table
    assert re.search(r"test_key_averages.py\(\d+\): caller_b", table)


def test_table_has_torchs_columns_and_sane_percentages() -> None:
    with framescope.profile() as prof:
        workload()
    avgs = prof.key_averages()
    table = avgs.table(sort_by="self_cpu_time_total", row_limit=4)
    lines = table.splitlines()
    header = lines[1]
    for column in ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg",
                   "Self on-CPU", "On-CPU total", "# of Calls"]:
        assert column in header
    assert "CPU Mem" not in header and "Input Shapes" not in header
    rows = lines[3:-3]
    assert len(rows) == 4
    percents = [float(p) for p in re.findall(r"(\d+\.\d\d)%", "\n".join(rows))]
    assert percents and all(0 <= p <= 100 for p in percents)
    assert lines[-2].startswith("Self CPU time total: ")
    assert lines[-1].startswith("Self on-CPU time total: ")
    # sorted by self time, largest first
    selfs = [e.self_cpu_time_total for e in avgs.sorted_by("self_cpu_time_total")]
    assert selfs == sorted(selfs, reverse=True)
    assert "Total" == avgs.total_average().key
    assert avgs.total_average().count == sum(e.count for e in avgs)
    with pytest.raises(ValueError, match="unknown sort_by"):
        avgs.table(sort_by="bogus")
    with pytest.raises(ValueError, match="time_unit"):
        avgs.table(time_unit="h")
    assert "ms" in avgs.table(time_unit="ms").splitlines()[3]


def test_on_cpu_time_tells_waiting_from_working() -> None:
    measured: dict[str, float] = {}

    def spin(seconds: float) -> None:
        t0 = time.thread_time()
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
        measured["spin"] = time.thread_time() - t0

    def wait(event: threading.Event) -> None:
        event.wait(0.3)

    ev = threading.Event()
    with framescope.profile() as prof:
        w = threading.Thread(target=wait, args=(ev,))
        w.start()
        spin(0.3)
        w.join()
    avgs = by_key(prof.key_averages())
    spin_key = next(k for k in avgs if k.rsplit(".", 1)[-1].endswith("spin"))
    wait_key = next(k for k in avgs if k.endswith("Event.wait") or k.endswith(": wait")
                    and "threading" in k)
    s, w_ = avgs[spin_key], avgs[wait_key]
    assert s.on_cpu_time_total is not None and w_.on_cpu_time_total is not None
    # The waiting thread used almost no CPU, whatever the machine's load.
    assert w_.on_cpu_time_total < 0.1 * w_.cpu_time_total
    # The spinning function's on-CPU time is its thread's CPU clock over the call (as
    # time.thread_time() saw it), within the interpolation between readings ~4 ms apart.
    assert s.on_cpu_time_total == pytest.approx(measured["spin"] * 1e6, rel=0.15, abs=5000)
    assert s.on_cpu_time_total <= s.cpu_time_total + 1e-6
    text = prof.summary(sort_by="on_cpu", limit=3)
    assert text.splitlines()[0].startswith("Time on CPU per function")
    assert spin_key in text.splitlines()[3]  # the first row: the one that worked


def test_on_cpu_time_of_work_just_before_the_stop_is_kept() -> None:
    # The stop takes a reading of every thread at once. The final reading used to come from the
    # sampler's next period, up to 4 ms after the stop, so the CPU time of the session's last
    # few ms was spread past its end: 6 ms of work read ~5 ms, 1 ms read ~0.3 ms, every time.
    # Between two readings CPU time is shared out by wall time, so a preemption of the thread
    # next to the function (a loaded machine) moves some of it to its neighbours: each length
    # gets three tries, and one that keeps 90% passes.
    spun: dict[float, float] = {}

    def spin_to_the_end(seconds: float) -> None:
        t0 = time.thread_time()
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
        spun[seconds] = time.thread_time() - t0

    for seconds in (0.006, 0.012):
        kept = []
        for _ in range(3):
            with framescope.profile() as prof:
                spin_to_the_end(seconds)
            (entry,) = [e for e in prof.key_averages() if e.key.endswith("spin_to_the_end")]
            assert entry.on_cpu_time_total is not None
            kept.append(entry.on_cpu_time_total / (spun[seconds] * 1e6))
            if kept[-1] >= 0.9:
                break
        assert max(kept) >= 0.9, (seconds, kept)


def test_no_cpu_time_when_disabled() -> None:
    with framescope.profile(cpu_time=False) as prof:
        leaf()
    assert all(e.on_cpu_time_total is None for e in prof.key_averages())
    assert "On-CPU total" not in prof.key_averages().table()
    with pytest.raises(ValueError, match="no CPU times"):
        prof.summary(sort_by="on_cpu")


def test_cpu_times_survive_save_load_and_merge(tmp_path: Path) -> None:
    def busy() -> None:
        end = time.perf_counter() + 0.05
        while time.perf_counter() < end:
            pass

    with framescope.profile() as prof:
        busy()
    before = {e.key: e.on_cpu_time_total for e in prof.key_averages()}
    prof.save(tmp_path / "t.fstrace")
    loaded = framescope.load(tmp_path / "t.fstrace")
    assert {e.key: e.on_cpu_time_total for e in loaded.key_averages()} == before
    loaded.merge(prof, offset_ns=10**9)  # a copy of itself, a second later
    merged = {e.key: e.on_cpu_time_total for e in loaded.key_averages()}
    for key, value in before.items():
        if value is not None:
            assert merged[key] == pytest.approx(2 * value, abs=1e-3), key


def test_summary_percentages_never_exceed_100_and_name_the_measure() -> None:
    def waiter(cond: threading.Condition) -> None:
        with cond:
            cond.wait(0.1)

    cond = threading.Condition()
    with framescope.profile() as prof:
        ts = [threading.Thread(target=waiter, args=(cond,)) for _ in range(3)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    text = prof.summary(limit=50)
    assert text.startswith("Wall time per function, by self time; % of the ")
    assert re.search(r"recorded on \d+ threads", text.splitlines()[0])
    percents = [float(p) for p in re.findall(r"(\d+\.\d)%", text)]
    assert percents and max(percents) <= 100.0
    self_percents = [float(line.split()[2].rstrip("%")) for line in text.splitlines()[3:-1]]
    assert sum(self_percents) <= 100.5
    per_thread = prof.summary(limit=5, by_thread=True)
    sections = [line for line in per_thread.splitlines() if line.startswith("== ")]
    assert len(sections) == 4  # the main thread and three waiters
    for p in re.findall(r"(\d+\.\d)%", per_thread):
        assert float(p) <= 100.0
    with pytest.raises(ValueError, match="sort_by"):
        prof.summary(sort_by="bogus")  # type: ignore[arg-type]


_SUMMARY_ROW = re.compile(r"^\s*\d+\s+\d+\.\d+\s+(\d+\.\d)%\s")


def _self_percent_sums(text: str) -> list[float]:
    """Sum of the self % column of each table of a summary (one per thread with by_thread)."""
    sums: list[float] = []
    for line in text.splitlines():
        if line.split()[:4] == ["calls", "self", "ms", "self"]:  # a table's header
            sums.append(0.0)
        elif (m := _SUMMARY_ROW.match(line)) is not None:
            sums[-1] += float(m.group(1))
    return sums


def test_range_ended_on_another_thread_is_an_async_span(tmp_path: Path) -> None:
    """Before: a range entered on one thread and exited on another counted its whole duration
    as self time of its starting thread, on top of what that thread ran meanwhile: the self %
    of the summary's rows summed to ~158% (the starting thread's own table to ~170%) and
    key_averages().table()'s "Self CPU time total" exceeded the time recorded on the threads.
    Now it is an async span: a row with its calls and total time, no self time, no share."""
    with framescope.profile() as prof:
        r = framescope.record_function("cross")
        r.__enter__()
        time.sleep(0.02)
        t = threading.Thread(target=lambda: (time.sleep(0.05), r.__exit__(None, None, None)))
        t.start()
        t.join()
    (cross,) = prof.events().named("cross")
    assert cross.duration_ns >= 60_000_000
    _rows, thread_totals, _cpu, _mem = _core._key_averages(prof.trace, False, 0, False)
    thread_ns = sum(w for w, _ in thread_totals)

    text = prof.summary(limit=50)
    sums = _self_percent_sums(text)
    assert len(sums) == 1 and sums[0] <= 100.5, text
    assert all(float(p) <= 100.0 for p in re.findall(r"(\d+\.\d)%", text)), text
    lines = text.splitlines()
    split = lines.index("Ranges ended on another thread (async: not part of the thread times above)")
    assert not any(line.endswith("  cross") for line in lines[:split])
    (row,) = [line for line in lines[split:] if line.endswith("  cross")]
    calls, total_ms = row.split()[:2]
    assert calls == "1" and float(total_ms) == pytest.approx(cross.duration_ns / 1e6, abs=0.002)
    # The repro's limit still shows it: async spans are listed apart from the self-time rows.
    assert any(line.endswith("  cross") for line in prof.summary(limit=4).splitlines())

    per_thread = prof.summary(limit=50, by_thread=True)
    sums = _self_percent_sums(per_thread)
    assert len(sums) == 2 and all(s <= 100.5 for s in sums), per_thread
    assert all(float(p) <= 100.0 for p in re.findall(r"(\d+\.\d)%", per_thread)), per_thread
    main_section = per_thread.split("== ")[1]
    assert main_section.startswith("MainThread") and "  cross\n" in main_section + "\n"

    avgs = prof.key_averages()
    (k,) = [e for e in avgs if e.key == "cross"]
    assert k.is_async and k.count == 1 and k.self_cpu_time_total == 0
    assert k.cpu_time_total == pytest.approx(cross.duration_ns / 1e3, abs=1)
    assert avgs.self_cpu_time_total() == pytest.approx(thread_ns / 1e3, abs=1)
    table = avgs.table(sort_by="cpu_time_total").splitlines()
    total_line = next(line for line in table if line.startswith("Self CPU time total: "))
    assert total_line.endswith("ms") and float(total_line.split()[-1][:-2]) <= thread_ns / 1e6 + 0.01
    for p in re.findall(r"(\d+\.\d\d)%", "\n".join(table)):
        assert float(p) <= 100.0
    assert any(line.lstrip().startswith("cross ") for line in table)

    by_name = {n: (c, tot, slf) for n, c, tot, slf in prof.stats()}
    assert by_name["cross"] == (1, cross.duration_ns, 0)
    assert sum(slf for *_, slf in prof.stats()) == pytest.approx(thread_ns, abs=1000)

    # Exports still show it: an async pair in Chrome JSON, a call with its cumtime in pstats.
    prof.export(tmp_path / "t.json")
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert sorted(e["ph"] for e in events if e.get("name") == "cross") == ["b", "e"]
    prof.export(tmp_path / "t.prof")
    st = pstats.Stats(str(tmp_path / "t.prof"))
    ((_cc, nc, tottime, cumtime, _callers),) = [
        v for key, v in st.stats.items() if key[2] == "cross"]  # type: ignore[attr-defined]
    assert nc == 1 and tottime == 0 and cumtime == pytest.approx(cross.duration_ns / 1e9, abs=1e-5)
    assert st.total_tt == pytest.approx(thread_ns / 1e9, abs=1e-3)  # type: ignore[attr-defined]


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="torch is installed on 3.11 only")
def test_table_is_torchs_table_for_the_same_numbers() -> None:
    """The same FunctionEventAvg numbers through torch's own _build_table give the same text."""
    torch_profiler_util = pytest.importorskip("torch.autograd.profiler_util")
    with framescope.profile(cpu_time=False) as prof:
        workload()
    ours = prof.key_averages()
    theirs = []
    for e in ours:
        t = torch_profiler_util.FunctionEventAvg()
        t.key = e.key
        t.count = e.count
        t.cpu_time_total = e.cpu_time_total
        t.self_cpu_time_total = e.self_cpu_time_total
        t.input_shapes = e.input_shapes
        t.stack = e.stack
        t.is_user_annotation = e.category == "user_annotation"
        t.node_id = -1
        t.overload_name = ""
        theirs.append(t)
    torch_list = torch_profiler_util.EventList(theirs, profile_memory=False, with_flops=False)
    # Names in full (no width limit): the same text. With a limit torch cuts a name from the
    # right (losing the function's name); framescope cuts it from the left.
    for sort_by in ("self_cpu_time_total", "cpu_time_total", "count"):
        assert ours.table(sort_by=sort_by, row_limit=7, max_name_column_width=None) == \
            torch_list.table(sort_by=sort_by, row_limit=7, max_name_column_width=None)
    cut = ours.table(sort_by="count", row_limit=7)
    names = [line.strip().split("  ")[0] for line in cut.splitlines()]
    assert any(n.startswith("…") and n.endswith("test_table_is_torchs_table_for_the_same_numbers")
               for n in names), cut


# ---- torch's EventList._remove_dup_nodes: a range nested alone in a range of the same name ----


def _sleep_in(name: str, depth: int, seconds: float) -> None:
    if depth == 0:
        time.sleep(seconds)
        return
    with framescope.record_function(name):
        _sleep_in(name, depth - 1, seconds)


def test_range_nested_alone_in_its_namesake_is_one_event() -> None:
    """torch counts `with rf("R"): with rf("R"): ...` as one R (the inner one is its parent's
    only child of the same name); a chain of three is one too, Python frames between them are
    transparent, and the summary still counts every range that ran."""
    with framescope.profile(cpu_time=False) as prof:
        for _ in range(3):
            with framescope.record_function("R"):
                with framescope.record_function("R"):
                    time.sleep(0.005)
        for _ in range(2):
            _sleep_in("chain", 3, 0.002)  # chain > frame > chain > frame > chain
    k = by_key(prof.key_averages())
    assert k["R"].count == 3
    assert k["chain"].count == 2
    outer = [e for e in prof.events().named("R") if e.parent is None or
             prof.events()[e.parent].name != "R"]
    assert len(outer) == 3
    assert k["R"].cpu_time_total == pytest.approx(sum(e.duration_ns for e in outer) / 1e3)
    assert k["R"].cpu_time == pytest.approx(k["R"].cpu_time_total / 3)
    # The merged ranges' own time stays theirs: R's self time is every R's self time.
    assert k["R"].self_cpu_time_total == pytest.approx(
        expected_from_events(prof)["R"][2] / 1e3, rel=1e-6, abs=0.01)
    summary = prof.summary(limit=-1, sort_by="calls")
    assert re.search(r"^\s+6\s.*\sR$", summary, re.M), summary
    assert re.search(r"^\s+6\s.*\schain$", summary, re.M), summary


def test_same_name_ranges_with_siblings_stay_separate_events() -> None:
    """Only a lone child merges: two same-name children, or a same-name child beside another
    range, are events of their own (as torch's)."""
    with framescope.profile(cpu_time=False) as prof:
        with framescope.record_function("P"):
            with framescope.record_function("P"):
                leaf()
            with framescope.record_function("P"):
                leaf()
        with framescope.record_function("Q"):
            with framescope.record_function("Q"):
                leaf()
            with framescope.record_function("other"):
                leaf()
        with framescope.record_function("S"):  # a same-name grandchild under another range
            with framescope.record_function("mid"):
                with framescope.record_function("S"):
                    leaf()
    k = by_key(prof.key_averages())
    assert (k["P"].count, k["Q"].count, k["S"].count, k["mid"].count) == (3, 2, 2, 1)


def test_merged_range_of_another_group_hands_its_self_time_to_its_parent() -> None:
    """Grouped by stack, the inner range has a key of its own; merged away, that key is gone
    and its self time is the outer range's, as torch's parent absorbs it."""

    def inner() -> None:
        with framescope.record_function("G"):
            time.sleep(0.01)

    with framescope.profile(cpu_time=False) as prof:
        with framescope.record_function("G"):
            inner()
    plain = by_key(prof.key_averages())
    assert plain["G"].count == 1
    grouped = [e for e in prof.key_averages(group_by_stack_n=1) if e.key == "G"]
    assert len(grouped) == 1, [(e.stack, e.count) for e in grouped]
    g = grouped[0]
    assert g.count == 1 and g.self_cpu_time_total >= 9_000  # the sleep: 10 ms, in µs
    assert g.cpu_time_total == pytest.approx(plain["G"].cpu_time_total)


def test_torch_device_keys_and_attributes_are_accepted() -> None:
    """Tutorial code sorts by torch's device keys; framescope records no device, so they are
    0, and the other attributes torch's FunctionEventAvg has are there with CPU-only values."""
    with framescope.profile() as prof:
        workload()
    avgs = prof.key_averages()
    for key in ("cuda_time_total", "self_cuda_time_total", "device_time_total",
                "self_device_time_total", "xpu_time_total", "cuda_memory_usage"):
        assert "Name" in avgs.table(sort_by=key, row_limit=3)
    e = by_key(avgs)["shared_range"]
    assert (e.device_time_total, e.self_device_time_total, e.cuda_time, e.device_time) == (0, 0, 0, 0)
    assert (e.is_remote, e.is_legacy, e.overload_name, e.cpu_parent) == (False, False, "", None)
    assert e.is_user_annotation and e.device_type == "CPU" and e.use_device is None
    assert avgs.sorted_by("cuda_time_total")
    with pytest.raises(ValueError, match="unknown sort_by"):
        avgs.table(sort_by="gpu_time")
    with pytest.raises(TypeError, match="sort_by must be a str"):
        avgs.table(sort_by=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_name_column_width"):
        avgs.table(max_name_column_width=-3)


def test_key_averages_arguments_are_checked_and_coerced_as_torchs() -> None:
    with framescope.profile() as prof:
        caller_a()
    assert prof.key_averages(group_by_input_shape="yes")  # type: ignore[arg-type]
    assert prof.key_averages(group_by_input_shape=None)  # type: ignore[arg-type]
    deep = [e for e in prof.key_averages(group_by_stack_n=10**30) if e.key == "shared_range"]
    assert deep and len(deep[0].stack) >= 2  # every enclosing frame
    for bad, error in ((1.5, TypeError), ("2", TypeError), (True, TypeError), (-1, ValueError)):
        with pytest.raises(error, match="group_by_stack_n"):
            prof.key_averages(group_by_stack_n=bad)  # type: ignore[arg-type]


def test_summary_limit_minus_one_shows_every_row() -> None:
    with framescope.profile() as prof:
        workload()
    def rows(limit: int) -> list[str]:
        return [ln for ln in prof.summary(limit=limit, show_host=True).splitlines()
                if re.match(r"^\s+\d+\s", ln)]

    # Every key: nothing nests alone in its namesake here, so the summary's rows are
    # key_averages()'s entries.
    assert len(rows(-1)) == len(prof.key_averages(show_host=True)) > 2
    assert len(rows(2)) == 2 and rows(0) == []
    assert prof.summary(by_thread="yes")  # type: ignore[arg-type]  # truthy, as torch's flags


def test_on_cpu_summary_columns_say_what_they_measure() -> None:
    with framescope.profile() as prof:
        workload()
    head = prof.summary(sort_by="on_cpu").splitlines()[1]
    assert head.split() == ["calls", "self", "CPU", "ms", "self", "CPU", "%", "total", "CPU",
                            "ms", "self", "wall", "ms", "name"]
    assert "self CPU ms" in prof.summary().splitlines()[1]


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="torch is installed on 3.11 only")
def test_range_counts_are_torchs_for_nested_namesakes() -> None:
    """The same program under torch.profiler and framescope: the same count per range name."""
    torch_profiler = pytest.importorskip("torch.profiler")
    torch_autograd = pytest.importorskip("torch.autograd")

    def program(rf: Any) -> None:
        for _ in range(3):
            with rf("R"):
                with rf("R"):
                    leaf()
        with rf("P"):
            with rf("P"):
                leaf()
            with rf("P"):
                leaf()
        with rf("S"):
            with rf("mid"):
                with rf("S"):
                    leaf()

    with torch_profiler.profile(activities=[torch_profiler.ProfilerActivity.CPU]) as tprof:
        program(torch_autograd.profiler.record_function)
    theirs = {e.key: e.count for e in tprof.key_averages()}
    with framescope.profile() as prof:
        program(framescope.record_function)
    ours = {e.key: e.count for e in prof.key_averages()}
    for name in ("R", "P", "S", "mid"):
        assert ours[name] == theirs[name], (name, ours[name], theirs[name])


def _opener() -> Any:
    r = framescope.record_function("outliving")
    r.__enter__()
    time.sleep(0.004)
    return r


def _closer(r: Any) -> None:
    time.sleep(0.004)
    r.__exit__(None, None, None)


def test_range_closed_after_its_frame_returned_counts_each_instant_once(tmp_path: Path) -> None:
    """A range opened in one function and closed in another, on one thread: each instant is
    the innermost open slice's, so the self times add up to the thread's time (summary,
    key_averages and pstats), never more. Before, the range's time after its opener returned
    was also its caller's self time (thread time 12.9 ms in a 7.7 ms session)."""
    with framescope.profile(cpu_time=False) as prof:
        r = _opener()
        t0 = time.perf_counter_ns()
        time.sleep(0.006)
        slept_us = (time.perf_counter_ns() - t0) / 1e3
        _closer(r)
    events = list(prof.events())
    roots = [e for e in events if e.parent is None and e.duration_ns >= 0]
    wall_ns = sum(e.duration_ns for e in roots)
    avgs = prof.key_averages()
    self_total_us = sum(e.self_cpu_time_total for e in avgs)
    assert self_total_us == pytest.approx(wall_ns / 1e3, rel=1e-6, abs=1.0)
    k = by_key(avgs)
    caller = next(e for e in avgs if e.key.endswith("test_range_closed_after_its_frame_returned"
                                                      "_counts_each_instant_once"))
    # Not also the range's time after its opener returned (the range is the innermost open
    # slice then): wall-clock bounds such as "its own sleep + 3 ms" fail when the machine is
    # loaded and the thread is preempted elsewhere in the test, this does not.
    (outliving,) = [e for e in events if e.name == "outliving"]
    (opener,) = [e for e in events if e.name.endswith(": _opener")]
    after_opener_us = (outliving.end_ns - opener.end_ns) / 1e3
    assert after_opener_us >= slept_us
    assert caller.self_cpu_time_total + after_opener_us <= caller.cpu_time_total + 1.0
    closer = next(e for e in avgs if e.key.endswith("_closer"))
    # The range holds the time between its opener's return and its end, less its callee
    # (_closer, which it ends inside of: _closer's last instants are its caller's).
    assert k["outliving"].self_cpu_time_total == pytest.approx(
        k["outliving"].cpu_time_total - closer.cpu_time_total, abs=100.0)
    first = prof.summary().splitlines()[0]
    recorded_ms = float(re.search(r"of the ([\d.]+) ms recorded", first).group(1))  # type: ignore[union-attr]
    assert recorded_ms == pytest.approx(wall_ns / 1e6, abs=0.15)
    prof.export(str(tmp_path / "t.prof"))
    st = pstats.Stats(str(tmp_path / "t.prof"))
    tottimes = [v[2] for v in st.stats.values()]  # type: ignore[attr-defined]
    assert min(tottimes) >= 0
    assert st.total_tt == pytest.approx(wall_ns / 1e9, abs=2e-4)  # type: ignore[attr-defined]


def test_summary_of_some_threads_only() -> None:
    """summary_table(threads=...) keeps the table, its shares and its header to those threads
    (the Jupyter magic leaves the kernel's own threads out this way)."""
    from framescope.analysis._summary import summary_table

    release = threading.Event()

    def waiter() -> None:
        release.wait(0.2)

    with framescope.profile() as prof:
        t = threading.Thread(target=waiter, name="idle")
        t.start()
        fib(16)
        release.set()
        t.join()
    threads = prof.trace.threads
    main = [i for i, th in enumerate(threads) if th[3] != "idle"]
    idle = [i for i, th in enumerate(threads) if th[3] == "idle"]
    assert main and idle
    mine = summary_table(prof.trace, limit=-1, threads=main)
    assert "on 1 thread" in mine.splitlines()[0] and ": fib" in mine and "waiter" not in mine
    theirs = summary_table(prof.trace, limit=-1, threads=idle)
    assert "waiter" in theirs and ": fib" not in theirs
    fib_calls = next(e.count for e in prof.key_averages() if e.key.endswith(": fib"))
    assert re.search(rf"^\s+{fib_calls}\s.*: fib$", mine, re.M), mine
