"""Readers under stress: several threads exporting, merging, serializing and iterating one trace;
odd names (lone surrogates, NUL, invalid UTF-8 in a merged blob); mutated blobs."""

from __future__ import annotations

import json
import pstats
import random
import threading

import pytest

import framescope
from framescope import _core


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def test_export_merge_serialize_and_events_from_several_threads(tmp_path) -> None:
    with framescope.profile() as prof:
        fib(16)
    with framescope.profile() as other:
        fib(10)
    blob = other.serialize()
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def exporter(i: int) -> None:
        start.wait()
        for k in range(6):
            prof.export(tmp_path / f"e{i}-{k}.json")
            prof.export(tmp_path / f"e{i}-{k}.pftrace")

    def merger() -> None:
        start.wait()
        for _ in range(20):
            prof.merge(blob)

    def reader() -> None:
        start.wait()
        for _ in range(10):
            _core.Trace.deserialize(prof.serialize())
            n = sum(1 for _ in prof.events())
            assert n >= 3000

    def guard(fn, *args) -> None:  # type: ignore[no-untyped-def]
        try:
            fn(*args)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [
        threading.Thread(target=guard, args=(exporter, 0)),
        threading.Thread(target=guard, args=(exporter, 1)),
        threading.Thread(target=guard, args=(merger,)),
        threading.Thread(target=guard, args=(reader,)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    # every file written is whole
    for path in tmp_path.glob("*.json"):
        json.load(open(path))
    per_fib10 = sum(1 for e in other.events() if e.name.endswith(": fib"))
    assert per_fib10 == 177
    assert sum(1 for e in prof.events() if e.name.endswith(": fib")) == 3193 + 20 * per_fib10


def test_odd_names_never_break_a_reader(tmp_path) -> None:
    def body() -> None:
        framescope.mark("w\udcff")
        framescope.mark("nul\0inside")
        fib(3)

    t = threading.Thread(target=body, name="w\udcff")
    with framescope.profile() as prof:
        t.start()
        t.join()
        with framescope.record_function("plain"):
            framescope.mark("é ok")
    names = {e.name for e in prof.events()}
    assert "w\ufffd" in names or "w\ufffd\ufffd\ufffd" in names
    assert "nul\0inside" in names and "é ok" in names
    assert prof.summary()
    assert prof.stats()
    for ext in (".json", ".json.gz", ".pftrace", ".prof", ".speedscope.json", ".collapsed"):
        prof.export(tmp_path / ("t" + ext))
    doc = json.load(open(tmp_path / "t.json"))
    assert any(e.get("name") == "nul\0inside" for e in doc["traceEvents"])
    pstats.Stats(str(tmp_path / "t.prof"))
    perfetto_reader = pytest.importorskip("tests.support.perfetto_reader")
    pt = perfetto_reader.read(str(tmp_path / "t.pftrace"))
    assert any(i.name.startswith("w\ufffd") for i in pt.instants)


def test_invalid_utf8_from_a_merged_blob_is_replaced(tmp_path) -> None:
    with framescope.profile() as a:
        framescope.mark("MARKER-NAME")
    blob = a.serialize()
    # the name's bytes turned into invalid UTF-8 inside a structurally valid blob
    bad = blob.replace(b"MARKER-NAME", b"MARKER\xff\xfeAME")
    with framescope.profile() as b:
        pass
    b.merge(bad)
    (ev,) = [e for e in b.events() if e.name.startswith("MARKER")]
    assert ev.name == "MARKER\ufffd\ufffdAME"
    for ext in (".json", ".pftrace", ".prof", ".speedscope.json", ".collapsed"):
        b.export(tmp_path / ("t" + ext))
    json.load(open(tmp_path / "t.json"))


def test_mutated_blobs_give_clean_errors_or_valid_traces(tmp_path) -> None:
    with framescope.profile(record_shapes=True) as prof:
        with framescope.record_function("r"):
            fib(6)
        framescope.mark("m")
    blob = bytearray(prof.serialize())
    rng = random.Random(1234)
    accepted = 0
    for i in range(600):
        m = bytearray(blob)
        for _ in range(rng.randint(1, 8)):
            pos = rng.randrange(len(m))
            m[pos] = rng.randrange(256) if rng.random() < 0.7 else m[pos] ^ (1 << rng.randrange(8))
        if rng.random() < 0.2:
            m = m[: rng.randrange(len(m))]
        try:
            t = _core.Trace.deserialize(bytes(m))
        except ValueError:
            continue
        accepted += 1
        # whatever was accepted must be readable by every reader
        with framescope.profile() as host:
            pass
        host.merge(t)
        len(host.events())
        for _ in host.events():
            pass
        host.summary()
        for ext in (".json", ".pftrace", ".prof", ".speedscope.json", ".collapsed"):
            host.export(tmp_path / f"f{i % 3}{ext}")
    assert accepted > 0  # mutations of slot bytes are valid traces of other events


def test_merge_rejects_what_is_not_a_trace() -> None:
    with framescope.profile() as prof:
        pass
    with pytest.raises(ValueError):
        prof.merge(b"FSTRACE2" + b"\x00" * 4)
    with pytest.raises(ValueError):
        prof.merge(b"\x00not a trace")
    with pytest.raises(TypeError):
        prof.merge(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        prof.merge(prof.serialize(), offset_ns=1 << 62)
