"""An independent checker of Chrome trace JSON files: well formed, balanced, nested per thread.

It shares no code with framescope's writer: it reads the file as any trace viewer would.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from typing import Any


class TraceError(AssertionError):
    """The trace breaks a rule the Chrome trace format (or a viewer of it) relies on."""


def load_trace(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceError("a trace is an object with a 'traceEvents' list")
    return data


def check_trace(data: dict[str, Any]) -> dict[tuple[Any, Any], list[dict[str, Any]]]:
    """Checks every rule below and returns the complete ('X') slices per (pid, tid), by start.

    - every event has a phase, a name (str), and, unless metadata, a finite ts;
    - X slices have dur >= 0, and on one thread they nest: a slice that starts inside another
      ends inside it too (viewers draw overlapping slices wrongly);
    - B/E pairs balance per thread, b/e async pairs balance per (cat, id, name);
    - thread/process name metadata name every thread that has events.
    """
    slices: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    be_stacks: dict[tuple[Any, Any], list[str]] = defaultdict(list)
    async_open: dict[tuple[Any, Any, Any], int] = defaultdict(int)
    named_threads: set[tuple[Any, Any]] = set()
    threads_with_events: set[tuple[Any, Any]] = set()
    for ev in data["traceEvents"]:
        ph = ev.get("ph")
        if not isinstance(ph, str) or not ph:
            raise TraceError(f"event without a phase: {ev}")
        if not isinstance(ev.get("name"), str):
            raise TraceError(f"event without a string name: {ev}")
        key = (ev.get("pid"), ev.get("tid"))
        if ph == "M":
            if ev["name"] == "thread_name":
                named_threads.add(key)
            continue
        ts = ev.get("ts")
        if not isinstance(ts, (int, float)) or not math.isfinite(ts):
            raise TraceError(f"event without a finite ts: {ev}")
        if ph == "X":
            dur = ev.get("dur")
            if not isinstance(dur, (int, float)) or dur < 0:
                raise TraceError(f"X slice with a bad dur: {ev}")
            slices[key].append(ev)
            threads_with_events.add(key)
        elif ph == "B":
            be_stacks[key].append(ev["name"])
        elif ph == "E":
            if not be_stacks[key]:
                raise TraceError(f"E without B on {key}: {ev}")
            be_stacks[key].pop()
        elif ph == "b":
            async_open[(ev.get("cat"), ev.get("id"), ev["name"])] += 1
        elif ph == "e":
            k = (ev.get("cat"), ev.get("id"), ev["name"])
            if async_open[k] <= 0:
                raise TraceError(f"async end without begin: {ev}")
            async_open[k] -= 1
    for key, stack in be_stacks.items():
        if stack:
            raise TraceError(f"unclosed B events on {key}: {stack}")
    for k, n in async_open.items():
        if n:
            raise TraceError(f"unclosed async range {k}")
    for key in threads_with_events:
        if key not in named_threads:
            raise TraceError(f"thread {key} has events but no thread_name metadata")
    for key, evs in slices.items():
        # Equal starts: the longer slice is the parent.
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        _check_nesting(key, evs)
    return slices


def _check_nesting(key: tuple[Any, Any], evs: list[dict[str, Any]]) -> None:
    # Timestamps are µs with 3 decimals: allow a rounding error of 1 ns at each end.
    eps = 0.0011
    open_ends: list[tuple[float, str]] = []
    for ev in evs:
        start, end = ev["ts"], ev["ts"] + ev["dur"]
        while open_ends and open_ends[-1][0] <= start + eps:
            open_ends.pop()
        if open_ends and end > open_ends[-1][0] + eps:
            raise TraceError(
                f"on {key}, {ev['name']!r} [{start}, {end}] overlaps the end of its enclosing "
                f"slice {open_ends[-1][1]!r} ending at {open_ends[-1][0]}"
            )
        open_ends.append((end, ev["name"]))


def children_of(evs: list[dict[str, Any]], parent: dict[str, Any]) -> list[dict[str, Any]]:
    """The direct children of ``parent`` among nested slices ``evs`` (one thread, sorted)."""
    pend = parent["ts"] + parent["dur"]
    inside = [
        e
        for e in evs
        if e is not parent and e["ts"] >= parent["ts"] and e["ts"] + e["dur"] <= pend + 0.0011
    ]
    out = []
    for e in inside:
        eend = e["ts"] + e["dur"]
        if not any(
            o is not e and o["ts"] <= e["ts"] and eend <= o["ts"] + o["dur"] + 0.0011
            and (o["ts"], -o["dur"]) < (e["ts"], -e["dur"])
            for o in inside
        ):
            out.append(e)
    return out
