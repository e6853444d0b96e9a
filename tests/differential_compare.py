"""Compares framescope's call forest with the ground truth's, thread by thread."""

from __future__ import annotations

from collections import Counter
from typing import Iterator

from ground_truth import Forest, Node

# Slack for the timing check (ns). Both sides read CLOCK_MONOTONIC, framescope through the TSC
# mapped at stop (a linear fit from two samples, tens of ns off per sample); and when both are
# sys.monitoring tools (3.12+ fallback) CPython calls one's callback before the other's at
# both ends of a call, so one side of one slice moves by the other's callback (~100 ns).
TIMING_SLACK_NS = 5_000


def preorder(nodes: list[Node], depth: int = 0) -> Iterator[tuple[int, Node]]:
    for n in nodes:
        yield depth, n
        yield from preorder(n.children, depth + 1)


def edges(nodes: list[Node], parent: str = "<root>") -> Iterator[tuple[str, str]]:
    for n in nodes:
        yield parent, n.key
        yield from edges(n.children, n.key)


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
    others = sorted((render(roots, limit=10**9), tid) for tid, roots in forest.items() if tid != main_tid)
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
            for (_, g), (_, f) in zip(tp, sp):
                if f.start > g.start + TIMING_SLACK_NS or f.end < g.end - TIMING_SLACK_NS:
                    problems.append(
                        f"{where}: {short(f.key)} [{f.start}, {f.end}] does not contain the ground "
                        f"truth's [{g.start}, {g.end}] (start {f.start - g.start:+} ns, end "
                        f"{f.end - g.end:+} ns)"
                    )
    return problems
