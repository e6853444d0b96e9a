"""Slices that start together are read as framescope nested them, under the viewers' own rules
for ties. A Chrome JSON file is not in time order; its readers sort it and nest each thread's
"X" slices by containment, breaking ties of equal start by file order: chrome://tracing
(catapult's SliceGroup.createSubSlicesImpl_) for any equal "ts", Perfetto (its TraceSorter's key
for JSON "X" events: the longer slice first) for equal "ts" and "dur". Frames open at both the
start and the stop of a session start and end together, so only the order in the file says which
is the parent. The Perfetto protobuf export orders begin events itself (parent first)."""

from __future__ import annotations

import json
from typing import Any, Callable

import pytest

import framescope

perfetto_reader = pytest.importorskip("tests.support.perfetto_reader", reason="needs perfetto + protobuf")


def leaf(i: int) -> int:
    return i


def loop(prof_box: list[framescope.profile]) -> None:
    # The session starts and stops inside this frame: it and its callers are open at both ends.
    prof = framescope.profile()
    prof.start()
    for i in range(3):
        leaf(i)
    prof.stop()
    prof_box.append(prof)


def main(prof_box: list[framescope.profile]) -> None:
    loop(prof_box)


def session_inside_frames() -> framescope.profile:
    box: list[framescope.profile] = []
    main(box)
    return box[0]


def catapult_key(e: dict[str, Any], i: int) -> tuple[Any, ...]:
    return (float(e["ts"]), i)


def perfetto_key(e: dict[str, Any], i: int) -> tuple[Any, ...]:
    return (float(e["ts"]), -float(e["dur"]), i)


def viewer_parents(xs: list[dict[str, Any]], key: Callable[[dict[str, Any], int], tuple[Any, ...]]
                   ) -> dict[int, int | None]:
    """The parent (its "Python id") a viewer gives each slice of one thread: slices taken in the
    viewer's order, each nested in the innermost open slice that contains it."""
    order = sorted(range(len(xs)), key=lambda i: key(xs[i], i))
    stack: list[tuple[float, float, int]] = []  # (start, end, id)
    parents: dict[int, int | None] = {}
    for i in order:
        e = xs[i]
        start, end = float(e["ts"]), float(e["ts"]) + float(e["dur"])
        while stack and not (stack[-1][0] <= start and end <= stack[-1][1]):
            stack.pop()
        ident = e["args"]["Python id"]
        parents[ident] = stack[-1][2] if stack else None
        stack.append((start, end, ident))
    return parents


@pytest.mark.parametrize("viewer, key", [("chrome://tracing", catapult_key),
                                         ("Perfetto", perfetto_key)])
def test_chrome_json_slices_that_start_together_nest_as_recorded(viewer, key, tmp_path) -> None:
    prof = session_inside_frames()
    path = tmp_path / "t.json"
    prof.export(path)
    xs = [e for e in json.loads(path.read_text())["traceEvents"]
          if e["ph"] == "X" and e["cat"] in ("python_function", "host")]  # host: pytest's frames
    names = {e["args"]["Python id"]: e["name"].rsplit(": ", 1)[-1] for e in xs}
    # the frames open at both ends share their start and their duration
    open_both = [e for e in xs if e["args"].get("Open at stop")]
    assert {names[e["args"]["Python id"]] for e in open_both} >= {"main", "loop"}
    assert len({(e["ts"], e["dur"]) for e in open_both}) == 1
    for tid in {e["tid"] for e in xs}:
        thread = [e for e in xs if e["tid"] == tid]
        got = viewer_parents(thread, key)
        want = {e["args"]["Python id"]: e["args"]["Python parent id"] for e in thread}
        wrong = [(names[i], names.get(want[i]), names.get(got[i])) for i in want if got[i] != want[i]]
        assert not wrong, f"{viewer} nests (slice, recorded parent, viewer's parent): {wrong}"
    # and the loop's calls are its children
    loop_id = next(i for i, n in names.items() if n == "loop")
    assert [names[e["args"]["Python id"]] for e in xs
            if e["args"]["Python parent id"] == loop_id].count("leaf") == 3


def test_perfetto_protobuf_nests_slices_that_start_together(tmp_path) -> None:
    prof = session_inside_frames()
    path = tmp_path / "t.pftrace"
    prof.export(path)
    pt = perfetto_reader.read(str(path))
    depth = {s.name.rsplit(": ", 1)[-1]: s.depth for s in pt.slices if s.category == "python_function"}
    assert depth["loop"] == depth["main"] + 1
    assert depth["leaf"] == depth["loop"] + 1
