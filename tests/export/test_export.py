"""Exports against their real readers: Perfetto's protos, pstats/cProfile, speedscope's format,
collapsed stacks, gzip; export() by extension, atomic writes, save/load."""

from __future__ import annotations

import cProfile
import gzip
import json
import os
import pstats
import threading
from collections import defaultdict

import pytest

import framescope
from framescope import _core

perfetto_reader = pytest.importorskip("tests.support.perfetto_reader", reason="needs perfetto + protobuf")


# ---- workloads -------------------------------------------------------------------------------
def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def is_even(n: int) -> bool:
    return True if n == 0 else is_odd(n - 1)


def is_odd(n: int) -> bool:
    return False if n == 0 else is_even(n - 1)


def leaf() -> int:
    return 1


def work() -> None:
    fib(12)
    for i in range(5):
        is_even(i + 3)
    for _ in range(3):
        leaf()


def worker() -> None:
    with framescope.record_function("worker-range"):
        fib(8)
        framescope.mark("worker-mark")


def record_everything() -> framescope.profile:
    with framescope.profile() as prof:
        with framescope.record_function("outer"):
            work()
        t = threading.Thread(target=worker, name="exporter-worker")
        t.start()
        t.join()
    return prof


@pytest.fixture(scope="module")
def prof() -> framescope.profile:
    return record_everything()


def _slices_by_thread(prof: framescope.profile) -> dict[int, list[tuple[str, int, int, int]]]:
    out: dict[int, list[tuple[str, int, int, int]]] = defaultdict(list)
    for e in prof.events():
        if e.duration_ns >= 0:
            out[e.thread].append((e.name, e.start_ns, e.duration_ns, e.depth))
    return {k: sorted(v, key=lambda s: (s[1], s[3])) for k, v in out.items()}


# ---- Perfetto --------------------------------------------------------------------------------
def test_perfetto_holds_every_slice_with_its_name_time_and_nesting(prof, tmp_path) -> None:
    path = str(tmp_path / "t.pftrace")
    prof.export(path)
    pt = perfetto_reader.read(path)
    threads = prof.trace.threads
    by_track: dict[int, list[tuple[str, int, int, int]]] = defaultdict(list)
    for s in pt.slices:
        by_track[s.track].append((s.name, s.start, s.dur, s.depth))
    expected = _slices_by_thread(prof)
    matched = 0
    for uuid, track in pt.tracks.items():
        if track.tid is None:
            continue
        (index,) = [i for i, t in enumerate(threads) if t[1] == track.tid]
        assert track.pid == threads[index][0]
        got = sorted(by_track.get(uuid, []), key=lambda s: (s[1], s[3]))
        assert got == expected.get(index, []), f"thread {track.name}"
        matched += len(got)
    assert matched == sum(len(v) for v in expected.values()) > 100
    # names, categories, source locations
    cats = {s.name: s.category for s in pt.slices}
    assert cats["outer"] == "user_annotation"
    fib_slices = [s for s in pt.slices if s.name.endswith(": fib")]
    assert fib_slices and all(s.category == "python_function" for s in fib_slices)
    assert fib_slices[0].source is not None and fib_slices[0].source[1] == "fib"
    assert fib_slices[0].source[0].endswith("test_export.py")
    # thread names, marks as instants
    assert any(t.name == "MainThread" for t in pt.tracks.values())
    assert [i.name for i in pt.instants if i.name == "worker-mark"] == ["worker-mark"]


def test_perfetto_is_compact(tmp_path) -> None:
    with framescope.profile() as big:
        fib(18)
    path = str(tmp_path / "t.pftrace")
    big.export(path)
    size = os.path.getsize(path)
    slices = sum(1 for e in big.events() if e.duration_ns >= 0)
    assert slices > 8000
    # begin + end per slice: the target is <= 16 bytes per event
    assert size / (2 * slices) <= 16


def test_perfetto_ranges_carry_args_and_memory_is_a_counter(tmp_path) -> None:
    with framescope.profile(profile_memory=True) as p:
        framescope.record_memory(0x1000, 64, 64, 128)
        framescope.record_memory(0x1000, -64, 0, 128)
    path = str(tmp_path / "m.pftrace")
    p.export(path)
    pt = perfetto_reader.read(path)
    counters = [(pt.tracks[u].name, v) for u, v in pt.counters.items()]
    assert ("Total Allocated", [v for v in counters if v[0] == "Total Allocated"][0][1]) in counters
    allocated = dict(counters)["Total Allocated"]
    assert [v for _, v in allocated] == [64, 0]


# ---- pstats vs cProfile ----------------------------------------------------------------------
def _norm(stats: pstats.Stats, names: set[str]) -> dict:
    out = {}
    for (file, line, func), (cc, nc, tt, ct, callers) in stats.stats.items():  # type: ignore[attr-defined]
        if func not in names or not file.endswith("test_export.py"):
            continue
        out[func] = (
            cc,
            nc,
            {c[2]: (v[0], v[1]) for c, v in callers.items() if c[2] in names},
            tt,
            ct,
        )
    return out


def test_pstats_counts_and_caller_edges_match_cprofile(tmp_path) -> None:
    names = {"fib", "is_even", "is_odd", "leaf", "work"}

    def program() -> None:
        work()

    cp = cProfile.Profile()
    cp.enable()
    program()
    cp.disable()
    expected = _norm(pstats.Stats(cp), names)

    with framescope.profile() as p:
        program()
    path = str(tmp_path / "t.prof")
    p.export(path)
    got = _norm(pstats.Stats(path), names)
    assert set(got) == set(expected) == names
    for func in names:
        cc, nc, callers, tt, ct = got[func]
        ecc, enc, ecallers, _, _ = expected[func]
        assert (cc, nc) == (ecc, enc), func
        assert callers == ecallers, func
        # times consistent: self <= cumulative, nothing negative
        assert 0 <= tt <= ct + 1e-9
    # recursion is visible: fib(12) makes 465 calls, 1 primitive
    assert got["fib"][:2] == (1, 465)
    # the fib -> fib edge: 464 calls, of which 2 (fib(12)'s own) primitive
    assert got["fib"][2]["fib"] == (464, 2)


def test_pstats_loads_in_pstats_and_sorts(prof, tmp_path) -> None:
    path = str(tmp_path / "t.pstats")
    prof.export(path)
    s = pstats.Stats(path)
    s.sort_stats("cumulative")
    assert s.total_calls > 400  # type: ignore[attr-defined]


# ---- speedscope ------------------------------------------------------------------------------
# Transcribed from speedscope's src/lib/file-format-spec.ts (the evented profile subset).
SPEEDSCOPE_SCHEMA = {
    "type": "object",
    "required": ["$schema", "shared", "profiles"],
    "properties": {
        "$schema": {"const": "https://www.speedscope.app/file-format-schema.json"},
        "shared": {
            "type": "object",
            "required": ["frames"],
            "properties": {
                "frames": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string"},
                            "file": {"type": "string"},
                            "line": {"type": "number"},
                            "col": {"type": "number"},
                        },
                    },
                }
            },
        },
        "profiles": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["type", "name", "unit", "startValue", "endValue", "events"],
                "properties": {
                    "type": {"const": "evented"},
                    "name": {"type": "string"},
                    "unit": {
                        "enum": ["none", "nanoseconds", "microseconds", "milliseconds", "seconds", "bytes"]
                    },
                    "startValue": {"type": "number"},
                    "endValue": {"type": "number"},
                    "events": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["type", "at", "frame"],
                            "properties": {
                                "type": {"enum": ["O", "C"]},
                                "at": {"type": "number"},
                                "frame": {"type": "number"},
                            },
                        },
                    },
                },
            },
        },
        "name": {"type": "string"},
        "activeProfileIndex": {"type": "number"},
        "exporter": {"type": "string"},
    },
}


def test_speedscope_follows_the_file_format(prof, tmp_path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    path = str(tmp_path / "t.speedscope.json")
    prof.export(path)
    doc = json.load(open(path))
    jsonschema.validate(doc, SPEEDSCOPE_SCHEMA)
    frames = doc["shared"]["frames"]
    fib_frame = [i for i, f in enumerate(frames) if f["name"].endswith(": fib")][0]
    assert frames[fib_frame]["file"].endswith("test_export.py") and frames[fib_frame]["line"] > 0
    opened = 0
    for profile in doc["profiles"]:
        stack: list[int] = []
        last = profile["startValue"]
        for ev in profile["events"]:
            assert ev["at"] >= last
            last = ev["at"]
            if ev["type"] == "O":
                stack.append(ev["frame"])
                opened += 1
            else:
                assert stack.pop() == ev["frame"]  # closes last-in-first-out
        assert not stack and last <= profile["endValue"]
    assert opened == sum(1 for e in prof.events() if e.duration_ns >= 0 and e.category != "cpu_instant_event")


# ---- collapsed -------------------------------------------------------------------------------
def test_collapsed_stacks_sum_back_to_thread_totals(prof, tmp_path) -> None:
    path = str(tmp_path / "t.collapsed")
    prof.export(path)
    sums: dict[str, int] = defaultdict(int)
    for line in open(path, encoding="utf-8"):
        stack, _, value = line.rstrip("\n").rpartition(" ")
        assert int(value) > 0 and stack
        sums[stack.split(";")[0]] += int(value)
    threads = prof.trace.threads
    for index, (pid, tid, _, name) in enumerate(threads):
        roots = [e for e in prof.events() if e.thread == index and e.parent is None and e.duration_ns >= 0]
        total_us = sum(e.duration_ns for e in roots) // 1000
        assert abs(sums[f"{name or 'thread'} ({tid})"] - total_us) <= 1
    assert any(";outer;" in line and ": fib" in line for line in open(path))


# ---- gzip, export(), atomic writes -----------------------------------------------------------
@pytest.mark.parametrize("ext", [".json.gz", ".speedscope.json.gz", ".collapsed.gz", ".pftrace.gz"])
def test_gzip_by_extension_round_trips(prof, tmp_path, ext) -> None:
    plain = str(tmp_path / ("p" + ext[:-3]))
    packed = str(tmp_path / ("p" + ext))
    prof.export(plain)
    prof.export(packed)
    raw = gzip.open(packed).read()
    assert raw == open(plain, "rb").read()
    assert os.path.getsize(packed) < len(raw)


@pytest.mark.parametrize("ext, why", [(".prof.gz", "uncompressed"), (".pstats.gz", "uncompressed"),
                                      (".fstrace.gz", "not compressed"),
                                      (".html.gz", "not compressed")])
def test_gzip_of_a_format_never_compressed_is_refused(prof, tmp_path, ext, why) -> None:
    # A name ending in .gz that is not gzip would mislead every reader: refused, nothing written.
    with pytest.raises(ValueError, match=why):
        prof.export(tmp_path / ("p" + ext))
    if ext.startswith(".p"):  # the native Trace object refuses it the same way
        with pytest.raises(ValueError, match=why):
            prof.trace.export(str(tmp_path / ("q" + ext)))
    assert list(tmp_path.iterdir()) == []


def test_chrome_json_parses_and_nests(prof, tmp_path) -> None:
    path = str(tmp_path / "t.json")
    prof.export_chrome_trace(path)
    doc = json.load(open(path))
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == sum(1 for e in prof.events() if e.duration_ns >= 0)
    assert {e["cat"] for e in xs} >= {"python_function", "user_annotation"}


def test_native_writers_take_every_name_and_ending_of_the_format_table(prof, tmp_path) -> None:
    """framescope.export._formats.FORMATS is the one table of formats, its native part read
    from the core's own (cpp/export/formats.cpp, _core.export_formats()): each name, alias and
    ending it gives a native format reaches the same writer when the core chooses by itself."""
    from framescope import _core
    from framescope.export._formats import FORMATS

    assert [f.name for f in FORMATS[:5]] == [f[0] for f in _core.export_formats()]

    native = [f for f in FORMATS if f.name in ("chrome", "perfetto", "pstats", "speedscope",
                                               "collapsed")]
    assert len(native) == 5
    for f in native:
        by_name = tmp_path / f"{f.name}.byname"
        prof.trace.export(str(by_name), f.name)
        for alias in f.aliases:
            by_alias = tmp_path / f"{f.name}.{alias}.byalias"
            prof.trace.export(str(by_alias), alias)
            assert by_alias.read_bytes() == by_name.read_bytes(), (f.name, alias)
        for suffix in f.suffixes:
            by_ending = tmp_path / f"{f.name}.byending{suffix}"
            prof.trace.export(str(by_ending))  # the core picks the writer from the ending
            # The writers are deterministic: the same writer writes the same bytes.
            assert by_ending.read_bytes() == by_name.read_bytes(), (f.name, suffix)


def test_export_picks_the_format_and_rejects_unknown(prof, tmp_path) -> None:
    prof.export(tmp_path / "x.out", format="perfetto")
    assert perfetto_reader.read(str(tmp_path / "x.out")).slices
    with pytest.raises(ValueError, match="cannot tell the format"):
        prof.export(tmp_path / "x.unknown")
    with pytest.raises(ValueError, match="unknown format"):
        prof.export(tmp_path / "x.json", format="xml")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="NUL"):
        prof.export(str(tmp_path / "a\0b.json"))
    assert not any("a" == p.name[:1] for p in tmp_path.iterdir())


def test_a_failed_write_keeps_the_old_file_and_raises_oserror(prof, tmp_path) -> None:
    target = tmp_path / "keep.json"
    target.write_text("old")
    missing = tmp_path / "no" / "such" / "dir" / "t.json"
    with pytest.raises(OSError) as info:
        prof.export(missing)
    assert info.value.errno == 2 and info.value.filename == str(missing)
    # a directory in the way: the rename fails, nothing is left behind
    (tmp_path / "adir.json").mkdir()
    with pytest.raises(OSError) as info2:
        prof.export(tmp_path / "adir.json")
    assert info2.value.errno is not None
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir.json", "keep.json"]


# ---- save / load -----------------------------------------------------------------------------
def test_save_load_round_trip_and_convert(prof, tmp_path) -> None:
    path = tmp_path / "t.fstrace"
    prof.save(path)
    assert path.read_bytes() == prof.serialize()
    loaded = framescope.load(path)
    a = [(e.name, e.thread, e.start_ns, e.duration_ns, e.parent) for e in prof.events()]
    b = [(e.name, e.thread, e.start_ns, e.duration_ns, e.parent) for e in loaded.events()]
    assert a == b
    assert loaded.summary() .splitlines()[2:] == prof.summary().splitlines()[2:]
    loaded.export(tmp_path / "c.pftrace")
    assert len(perfetto_reader.read(str(tmp_path / "c.pftrace")).slices) == sum(1 for e in a if e[3] >= 0)
    with pytest.raises(ValueError):
        framescope.load(tmp_path / "c.pftrace")  # not a framescope trace
    with pytest.raises(OSError):
        framescope.load(tmp_path / "missing.fstrace")


def test_truncated_fstrace_is_a_clear_error(prof, tmp_path) -> None:
    blob = prof.serialize()
    # (a file cut right after its 16-byte header is an empty trace: valid)
    for cut in (8, 15, 20, 40, len(blob) // 2, len(blob) - 1):
        with pytest.raises(ValueError):
            _core.Trace.deserialize(blob[:cut])
