"""The HTML report: one self-contained file with a flame graph (icicle) per thread and a summary
table (``framescope report TRACE -o report.html``, ``profile.export("x.html")``,
``profile.export_html``).

The page needs no network: its script, style and data are inlined. Call stacks are aggregated
by path (a flame graph, not a timeline), so the file's size depends on the number of distinct
paths, and past ``max_nodes`` of them the lightest paths are folded into their parent's self
time: a trace of millions of events still gives a page of a few megabytes at most.
"""

from __future__ import annotations

import html
import json
import os
import stat
import time
from array import array
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from framescope.export import _chrome_input

if TYPE_CHECKING:
    from framescope._core import Trace

#: Default bound on the flame graph nodes (distinct call paths) kept in a report.
DEFAULT_MAX_NODES = 40_000
#: Default number of rows of the summary table.
DEFAULT_TABLE_ROWS = 500


@dataclass
class Span:
    """One complete slice of a thread: what report inputs are turned into."""

    name: str
    category: str
    start_ns: int
    duration_ns: int
    depth: int = 0  # known depth (Python frames with ids): orders spans that start and end alike


@dataclass
class ThreadTree:
    """Aggregated call paths of one thread, in preorder (a parent before its children).

    Node 0 is the thread's root; ``parent[0] == -1``."""

    label: str
    name: list[int] = field(default_factory=lambda: [0])
    parent: list[int] = field(default_factory=lambda: [-1])
    total: list[int] = field(default_factory=lambda: [0])
    calls: list[int] = field(default_factory=lambda: [0])
    index: dict[tuple[int, int], int] = field(default_factory=dict)

    def child(self, parent: int, name: int) -> int:
        key = (parent, name)
        node = self.index.get(key)
        if node is None:
            node = len(self.name)
            self.index[key] = node
            self.name.append(name)
            self.parent.append(parent)
            self.total.append(0)
            self.calls.append(0)
        return node


class _Names:
    """String table of the report: names and their categories."""

    def __init__(self) -> None:
        self.names: list[str] = ["(root)"]
        self.categories: list[str] = [""]
        self._index: dict[tuple[str, str], int] = {}

    def get(self, name: str, category: str) -> int:
        key = (name, category)
        i = self._index.get(key)
        if i is None:
            i = len(self.names)
            self._index[key] = i
            self.names.append(name)
            self.categories.append(category)
        return i


@dataclass
class ReportData:
    """Everything the page shows (before it is serialised into the HTML)."""

    title: str
    names: _Names
    threads: list[ThreadTree]
    table: list[tuple[str, str, int, int, int]]  # name, category, calls, total ns, self ns
    wall_ns: int
    events: int
    notes: list[str]


# ---- inputs --------------------------------------------------------------------------------


def _thread_label(name: str, os_tid: int, pid: int, pids: int, process: str = "") -> str:
    label = name or f"thread {os_tid}"
    where = f"{process}, pid {pid}" if process else f"pid {pid}"
    label += f" (tid {os_tid}" + (f", {where})" if pids > 1 else ")")
    return label


def from_trace(trace: Trace, title: str = "framescope report") -> ReportData:
    """Aggregates a replayed framescope trace (profile.trace) by call path, per thread."""
    names = _Names()
    infos = trace.threads
    pids = len({t[0] for t in infos})
    process_names = {p[0]: p[1] for p in trace._processes()}  # followed children, ranks
    trees: dict[int, ThreadTree] = {}
    n = len(trace)
    node_of = array("l", [0]) * n
    end_of = array("q", [0]) * n
    parent_of = array("q", [-1]) * n
    symbol_name: dict[tuple[int, str], int] = {}
    for i in range(n):
        name, cat, thread, start, dur, parent, _depth, symbol, _cid = trace.event(i)
        if dur < 0:  # instants
            continue
        end = end_of[i] = start + dur
        # A range left open across the return of the frame it began in (torch's
        # record_function opens inside __enter__) goes under the nearest caller that contains
        # it, so that no slice of the flame graph is wider than its parent.
        while parent >= 0 and end_of[parent] < end:
            parent = parent_of[parent]
        parent_of[i] = parent
        tree = trees.get(thread)
        if tree is None:
            pid, os_tid, _pthread, tname = infos[thread]
            tree = trees[thread] = ThreadTree(
                _thread_label(tname, os_tid, pid, pids, process_names.get(pid, "")))
        key = (symbol, cat)
        nid = symbol_name.get(key)
        if nid is None:
            nid = symbol_name[key] = names.get(name, cat)
        node = tree.child(node_of[parent] if parent >= 0 else 0, nid)
        tree.total[node] += dur
        tree.calls[node] += 1
        node_of[i] = node
    cats: dict[str, str] = {}
    for (nm, cat), _i in names._index.items():
        cats.setdefault(nm, cat)
    rows = [
        (name, cats.get(name, ""), calls, total, self_ns)
        for name, calls, total, self_ns, *_ in trace.stats()
        if calls > 0 and not name.startswith("__st")
    ]
    notes = list(trace.warnings)
    if trace.dropped_events:
        notes.append(f"{trace.dropped_events} events were dropped at the memory limit")
    return _finish(
        title, names, [trees[k] for k in sorted(trees)], rows, trace.stop_ns - trace.start_ns,
        trace.recorded_events, notes,
    )


def _spans_to_trees(
    threads: Iterable[tuple[str, Sequence[Span]]], names: _Names
) -> tuple[list[ThreadTree], dict[str, list[int]]]:
    """Nests each thread's spans by time (a span inside another's interval is its child) and
    aggregates them by call path. Also returns per name: calls, total and self ns."""
    trees = []
    stats: dict[str, list[int]] = {}
    for label, spans in threads:
        tree = ThreadTree(label)
        # (end, node, child time) of the open spans
        stack: list[list[int]] = []
        order = sorted(range(len(spans)),
                       key=lambda i: (spans[i].start_ns, -spans[i].duration_ns, spans[i].depth, i))
        for s in (spans[i] for i in order):
            end = s.start_ns + s.duration_ns
            while stack and s.start_ns >= stack[-1][0]:  # spans that ended before this one
                _close(stack.pop(), tree, names, stats)
            # the parent: the innermost open span that contains this one (a range left open
            # across its frame's return goes under the caller, as in from_trace)
            k = len(stack) - 1
            while k >= 0 and stack[k][0] < end:
                k -= 1
            node = tree.child(stack[k][1] if k >= 0 else 0, names.get(s.name, s.category))
            tree.total[node] += s.duration_ns
            tree.calls[node] += 1
            if k >= 0:
                stack[k][2] += s.duration_ns
            stack.append([end, node, 0, s.duration_ns])
        while stack:
            _close(stack.pop(), tree, names, stats)
        trees.append(tree)
    return trees, stats


def _close(entry: list[int], tree: ThreadTree, names: _Names, stats: dict[str, list[int]]) -> None:
    _end, node, child_ns, dur = entry
    name = names.names[tree.name[node]]
    row = stats.setdefault(name, [0, 0, 0])
    row[0] += 1
    row[1] += dur
    row[2] += max(dur - child_ns, 0)


def from_chrome_json(doc: Any, title: str = "framescope report") -> ReportData:
    """Aggregates a Chrome trace (framescope's, torch.profiler's or any with B/E/X events)."""
    events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise ValueError("not a Chrome trace: no traceEvents list")
    names = _Names()
    thread_names: dict[tuple[Any, Any], str] = {}
    process_names: dict[Any, str] = {}
    spans: dict[tuple[Any, Any], list[Span]] = {}
    open_b: dict[tuple[Any, Any], list[tuple[int, dict[str, Any]]]] = {}
    lo, hi, count = None, None, 0
    depth_of = _python_depths(events)
    for index, e in enumerate(events):
        if not isinstance(e, dict):
            continue
        ph = e.get("ph")
        if ph not in ("X", "B", "E", "M"):
            continue
        key = _chrome_input.thread_key(e, index)
        if ph == "M":
            if e.get("name") == "thread_name":
                thread_names[key] = str(_chrome_input.args_of(e, index).get("name", ""))
            elif e.get("name") == "process_name":
                process_names[key[0]] = str(_chrome_input.args_of(e, index).get("name", ""))
            continue
        if "ts" not in e or _bookkeeping(e):
            continue
        ts = _chrome_input.time_ns(e, "ts", index)
        if ph == "B":
            open_b.setdefault(key, []).append((ts, e))
            continue
        if ph == "E":
            stack = open_b.get(key)
            if not stack:
                continue
            start, b = stack.pop()
            span = Span(str(b.get("name", "")), str(b.get("cat", "")), start, ts - start)
        else:
            span = Span(str(e.get("name", "")), str(e.get("cat", "")), ts,
                        _chrome_input.time_ns(e, "dur", index, default=0), depth_of(e))
        if span.duration_ns < 0:
            continue
        spans.setdefault(key, []).append(span)
        count += 1
        lo = span.start_ns if lo is None else min(lo, span.start_ns)
        end = span.start_ns + span.duration_ns
        hi = end if hi is None else max(hi, end)
    if not spans:
        raise ValueError("the Chrome trace has no complete (X or B/E) events")
    pids = len({k[0] for k in spans})
    threads = [
        (_thread_label(thread_names.get(k, ""), _as_int(k[1]), _as_int(k[0]), pids,
                       process_names.get(k[0], "")), v)
        for k, v in sorted(spans.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1])))
    ]
    trees, stats = _spans_to_trees(threads, names)
    cats: dict[str, str] = {}
    for (nm, cat), _i in names._index.items():
        cats.setdefault(nm, cat)
    rows = sorted(
        ((n, cats.get(n, ""), c, t, s) for n, (c, t, s) in stats.items()),
        key=lambda r: r[4], reverse=True,
    )
    notes = _chrome_input.warnings_of(doc)
    return _finish(title, names, trees, rows, (hi or 0) - (lo or 0), count, notes)


def _bookkeeping(e: dict[str, Any]) -> bool:
    """A span a profiler writes about itself, not about the program: torch.profiler's
    whole-trace span ("PyTorch Profiler (0)", category "Trace", on the pseudo-process "Spans")
    and its "Iteration Start" marks. Left out: as a thread of its own it would top every
    summary at 100%."""
    return e.get("pid") == "Spans" or e.get("cat") == "Trace" or \
        str(e.get("name", "")).startswith("PyTorch Profiler (")


def _python_depths(events: list[Any]) -> Any:
    """Depth of Python frames from their "Python id"/"Python parent id" args (framescope and
    torch write them), for spans whose times cannot tell parent from child: frames running when
    the session started all begin at its start, and may all end at its stop."""
    parent: dict[tuple[Any, Any], Any] = {}
    for index, e in enumerate(events):
        args = e.get("args") if isinstance(e, dict) else None
        if isinstance(args, dict) and "Python id" in args:
            pid = _chrome_input.thread_key(e, index)[0]
            own = _chrome_input.python_id(args["Python id"], "Python id", index, e)
            parent[(pid, own)] = _chrome_input.python_id(
                args.get("Python parent id"), "Python parent id", index, e)
    memo: dict[tuple[Any, Any], int] = {}

    def depth(e: dict[str, Any]) -> int:
        args = e.get("args")
        if not isinstance(args, dict) or "Python id" not in args:
            return 0
        pid = e.get("pid")
        key = (pid, args["Python id"])
        chain: list[tuple[Any, Any]] = []
        while key in parent and key not in memo and len(chain) <= len(parent):
            chain.append(key)
            key = (pid, parent[key])
        d = memo.get(key, -1)
        for k in reversed(chain):
            d += 1
            memo[k] = d
        return memo.get((pid, args["Python id"]), 0)

    return depth


def _as_int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


def load(path: str | os.PathLike[str]) -> ReportData:
    """Reads a trace file for a report: Chrome JSON (``.json``, ``.json.gz``: framescope's,
    torch.profiler's, ...) or a framescope trace saved with ``profile.save()`` (``.fstrace``).
    ValueError for anything else."""
    path = os.fspath(path)
    title = os.path.basename(path)
    with open(path, "rb") as f:
        # A pipe or FIFO (`<(cat x.json)`) can be read once only: all of it, now.
        whole = None if stat.S_ISREG(os.fstat(f.fileno()).st_mode) else f.read()
        head = f.read(64) if whole is None else whole[:64]
    if head[:2] == b"\x1f\x8b" or head.lstrip()[:1] in (b"{", b"["):
        doc = _chrome_input.read_document(path, whole)
        try:
            return from_chrome_json(doc, title)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
    from framescope._core import Trace

    try:
        trace = Trace.load(path) if whole is None else Trace.deserialize(whole)
    except (ValueError, RuntimeError) as exc:
        raise ValueError(
            f"{path}: neither a Chrome JSON trace nor a saved framescope trace ({exc})"
        ) from None
    return from_trace(trace, title)


# ---- bounding and output -------------------------------------------------------------------


def _finish(
    title: str, names: _Names, trees: list[ThreadTree], table: list[tuple[str, str, int, int, int]],
    wall_ns: int, events: int, notes: list[str],
) -> ReportData:
    for tree in trees:
        # the root spans what its top-level slices cover
        tree.total[0] = sum(t for t, p in zip(tree.total, tree.parent) if p == 0)
        tree.calls[0] = 1
    return ReportData(title, names, trees, table, max(wall_ns, 0), events, notes)


def _prune(trees: list[ThreadTree], max_nodes: int) -> tuple[list[list[int]], int]:
    """The nodes kept per tree: the heaviest (by share of their thread's time) up to max_nodes
    in all, with their ancestors. Returns the kept node lists and how many were folded away."""
    ranked: list[tuple[float, int, int]] = []
    for t, tree in enumerate(trees):
        root = max(tree.total[0], 1)
        ranked += [(tree.total[n] / root, t, n) for n in range(1, len(tree.name))]
    if len(ranked) <= max_nodes:
        return [list(range(len(tree.name))) for tree in trees], 0
    ranked.sort(reverse=True)
    keep = [{0} for _ in trees]
    for _share, t, n in ranked[:max_nodes]:
        tree = trees[t]
        while n not in keep[t]:
            keep[t].add(n)
            n = tree.parent[n]
    kept = [sorted(k) for k in keep]
    return kept, len(ranked) - sum(len(k) - 1 for k in kept)


def _payload(data: ReportData, max_nodes: int, table_rows: int) -> dict[str, Any]:
    kept, folded = _prune(data.threads, max_nodes)
    used: dict[int, int] = {}

    def name_id(i: int) -> int:
        j = used.get(i)
        if j is None:
            j = used[i] = len(used)
        return j

    threads = []
    for tree, nodes in zip(data.threads, kept):
        new_index = {old: new for new, old in enumerate(nodes)}
        child_total = [0] * len(nodes)
        for old in nodes[1:]:
            child_total[new_index[tree.parent[old]]] += tree.total[old]
        threads.append({
            "label": tree.label,
            "name": [name_id(tree.name[o]) for o in nodes],
            "parent": [new_index.get(tree.parent[o], -1) for o in nodes],
            "total": [tree.total[o] for o in nodes],
            "self": [max(tree.total[o] - child_total[i], 0) for i, o in enumerate(nodes)],
            "calls": [tree.calls[o] for o in nodes],
        })
    by_id = sorted(used.items(), key=lambda kv: kv[1])
    notes = list(data.notes)
    if folded:
        notes.append(
            f"{folded} lighter call paths are folded into their callers' self time "
            f"(the report keeps {max_nodes} paths)"
        )
    return {
        "title": data.title,
        "generated": time.strftime("%Y-%m-%d %H:%M:%S"),
        "wall_ns": data.wall_ns,
        "events": data.events,
        "names": [data.names.names[i] for i, _ in by_id],
        "cats": [data.names.categories[i] for i, _ in by_id],
        "threads": threads,
        "table": [list(r) for r in data.table[:table_rows]],
        "table_total": len(data.table),
        "notes": notes,
    }


def _asset(name: str) -> str:
    return resources.files("framescope.export").joinpath("report_assets", name).read_text("utf-8")


def render(data: ReportData, max_nodes: int = DEFAULT_MAX_NODES,
           table_rows: int = DEFAULT_TABLE_ROWS) -> str:
    """The report page as one HTML string (script, style and data inlined)."""
    if max_nodes < 1:
        raise ValueError("max_nodes must be at least 1")
    payload = json.dumps(_payload(data, max_nodes, table_rows), separators=(",", ":"))
    # Inside <script>, "</script" or "<!--" in a name would end the element: escape every "<".
    payload = payload.replace("<", "\\u003c")
    page = _asset("report.html")
    return (
        page.replace("{{TITLE}}", html.escape(data.title))
        .replace("{{STYLE}}", _asset("report.css"))
        .replace("{{SCRIPT}}", _asset("report.js"))
        .replace("{{DATA}}", payload)
    )


def write(data: ReportData, output: str | os.PathLike[str], max_nodes: int = DEFAULT_MAX_NODES,
          table_rows: int = DEFAULT_TABLE_ROWS) -> None:
    """Writes the report page to ``output``."""
    text = render(data, max_nodes, table_rows)
    with open(os.fspath(output), "w", encoding="utf-8") as f:
        f.write(text)
