"""Compares framescope's call forest with the ground truth's, thread by thread."""

from __future__ import annotations

import bisect
from collections import Counter
from typing import Iterator

from tests.support.ground_truth import Forest, Node

# Slack for the timing check (ns): both sides read CLOCK_MONOTONIC, framescope through the TSC
# mapped to it at stop (a linear fit from two samples, each up to ~100 ns off).
TIMING_SLACK_NS = 2_000


def preorder(nodes: list[Node], depth: int = 0) -> Iterator[tuple[int, Node]]:
    # Iterative: recursive generators cost O(depth) per node on deep recursion's trees.
    todo = [(depth, n) for n in reversed(nodes)]
    while todo:
        d, n = todo.pop()
        yield d, n
        todo.extend((d + 1, c) for c in reversed(n.children))


def edges(nodes: list[Node], parent: str = "<root>") -> Iterator[tuple[str, str]]:
    todo = [(parent, n) for n in reversed(nodes)]
    while todo:
        p, n = todo.pop()
        yield p, n.key
        todo.extend((n.key, c) for c in reversed(n.children))


def short(key: str) -> str:
    """'name (/long/path/file.py:12)' -> 'name (file.py:12)'."""
    if " (" in key and key.endswith(")"):
        name, where = key.rsplit(" (", 1)
        return f"{name} ({where.rsplit('/', 1)[-1]}"
    return key


def render(nodes: list[Node], limit: int = 60) -> str:
    lines = [f"{'  ' * d}{short(n.key)}" for d, n in preorder(nodes)]
    if len(lines) > limit:
        lines = lines[:limit] + [f"... ({len(lines) - limit} more)"]
    return "\n".join(lines)


def counter_diff(truth: Counter[str] | Counter[tuple[str, str]], seen: Counter) -> list[str]:  # type: ignore[type-arg]
    out = []
    for k in sorted(set(truth) | set(seen), key=str):
        if truth[k] != seen[k]:
            label = " -> ".join(map(short, k)) if isinstance(k, tuple) else short(k)
            out.append(f"    {label}: ground truth {truth[k]}, framescope {seen[k]}")
    return out


def by_content(forest: Forest, main_tid: int) -> Forest:
    """The forest with thread ids that two runs share: 0 for the main thread, then 1, 2... for
    the others in the order of their trees' text (OS thread ids differ between processes)."""
    others = sorted(
        ([(d, n.key) for d, n in preorder(roots)], tid) for tid, roots in forest.items() if tid != main_tid
    )
    out: Forest = {0: forest[main_tid]} if main_tid in forest else {}
    for i, (_, tid) in enumerate(others, 1):
        out[i] = forest[tid]
    return out


def compare(truth: Forest, seen: Forest, timing: bool) -> list[str]:
    """Problems found (empty when framescope's forest is the ground truth's): per thread, the
    multiset of calls, the parent -> child edges, the ordered tree and, with ``timing``, that
    each framescope slice contains the ground truth's slice of the same call."""
    problems: list[str] = []
    for tid in sorted(set(truth) | set(seen)):
        t, s = truth.get(tid, []), seen.get(tid, [])
        where = f"thread {tid}"
        if not s:
            problems.append(f"{where}: missing in framescope's trace; ground truth:\n{render(t)}")
            continue
        if not t:
            problems.append(f"{where}: only in framescope's trace:\n{render(s)}")
            continue
        calls = counter_diff(Counter(n.key for _, n in preorder(t)), Counter(n.key for _, n in preorder(s)))
        if calls:
            problems.append(f"{where}: calls differ:\n" + "\n".join(calls))
        links = counter_diff(Counter(edges(t)), Counter(edges(s)))
        if links:
            problems.append(f"{where}: parent -> child edges differ:\n" + "\n".join(links))
        tp, sp = list(preorder(t)), list(preorder(s))
        if [(d, n.key) for d, n in tp] != [(d, n.key) for d, n in sp]:
            problems.append(
                f"{where}: the ordered trees differ\n--- ground truth\n{render(t)}\n--- framescope\n{render(s)}"
            )
            continue
        if timing:
            problems += timing_problems(where, [n for _, n in tp], [n for _, n in sp])
    return problems


def timing_problems(where: str, truth: list[Node], seen: list[Node]) -> list[str]:
    """Each end of a framescope slice lies between the ground truth's events just before and just
    after the same moment on the thread: the slice contains the ground truth's slice of the call,
    except where the other recorder's callback for the same event ran first (it cannot reach
    past a neighbouring event), and reaches no further than its neighbours (a frame closed late,
    at its thread's next call, or opened early fails)."""
    bounds = sorted({t for n in truth for t in (n.start, n.end)})
    out = []

    def around(t: int) -> tuple[int, int]:
        i = bisect.bisect_left(bounds, t)
        j = bisect.bisect_right(bounds, t)
        # No event before a thread's first one, nor after its last.
        return (bounds[i - 1] if i > 0 else -(1 << 62)), (bounds[j] if j < len(bounds) else 1 << 62)

    for g, f in zip(truth, seen):
        for what, fs_t, gt_t in (("starts", f.start, g.start), ("ends", f.end, g.end)):
            before, after = around(gt_t)
            if before - TIMING_SLACK_NS <= fs_t <= after + TIMING_SLACK_NS:
                continue
            side = "before" if fs_t < before else "after"
            out.append(
                f"{where}: {short(f.key)} {what} at {fs_t}, {fs_t - gt_t:+} ns from the ground truth "
                f"({gt_t}), {side} the thread's {'previous' if side == 'before' else 'next'} event "
                f"({before if side == 'before' else after})"
            )
    return out
