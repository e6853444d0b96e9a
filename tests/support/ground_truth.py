"""The differential tests' two sides as comparable call trees, one forest per thread.

The ground truth comes from ``ground_truth_recorder.c`` (CPython's own hooks, nothing of
framescope's); framescope's side is read from a stopped ``framescope.profile`` through its public
API. Both become trees of :class:`Node` over the framescope session's window, keyed the same way:

- a Python frame by ``co_name (co_filename:co_firstlineno)`` of its code object;
- a builtin call by ``<built-in method NAME>``, where NAME is what was called: ``module.function``
  for a module's function, ``Type.method`` with the type that defines the method (found in the
  receiver's MRO), ``Type`` for a call of a type, ``Type.__call__`` for a call of an instance.
  A type is named ``module.qualname`` (``functools.partial``, ``mymodule.MyList``), or
  ``qualname`` alone for builtins (``list``).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any, Iterable

from tests.support.native_build import build_extension

RECORDER_SOURCE = Path(__file__).with_name("ground_truth_recorder.c")

EV_PY_OPEN, EV_PY_CLOSE, EV_C_OPEN, EV_C_CLOSE = 0, 1, 2, 3
C_FUNCTION, C_METHOD, C_DESCR, C_TYPE, C_INSTANCE, C_OWN = 0, 1, 2, 3, 4, 5
#: c_key() of a call into framescope's own builtins: dropped, its children taking its place.
OWN_CALL = "<framescope's own builtin>"
PYTHON_FUNCTION, C_FUNCTION_CALL = 0, 1  # framescope's EventCategory values (trace.h)


def load_recorder(build_dir: Path) -> ModuleType:
    """Builds ground_truth_recorder in ``build_dir`` (once) and imports it."""
    import importlib.util
    import sysconfig

    so = build_dir / f"ground_truth_recorder{sysconfig.get_config_var('EXT_SUFFIX')}"
    if so.exists() and so.stat().st_mtime >= RECORDER_SOURCE.stat().st_mtime:
        spec = importlib.util.spec_from_file_location("ground_truth_recorder", os.fspath(so))
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    build_dir.mkdir(parents=True, exist_ok=True)
    return build_extension("ground_truth_recorder", RECORDER_SOURCE.read_text(), build_dir)


@dataclass
class Node:
    """One slice: a Python frame (``kind == "py"``) or a builtin call (``"c"``)."""

    key: str
    kind: str
    start: int
    end: int = -1
    children: list[Node] = field(default_factory=list)



def forest_to_json(roots: list[Node]) -> list[list[Any]]:
    """A thread's trees as a flat preorder list of [depth, key, kind, start, end] (deep
    recursion would overflow a nested JSON reader)."""
    out: list[list[Any]] = []
    todo: list[tuple[int, Node]] = [(0, n) for n in reversed(roots)]
    while todo:
        depth, n = todo.pop()
        out.append([depth, n.key, n.kind, n.start, n.end])
        todo.extend((depth + 1, c) for c in reversed(n.children))
    return out


def forest_from_json(rows: list[list[Any]]) -> list[Node]:
    roots: list[Node] = []
    path: list[Node] = []
    for depth, key, kind, start, end in rows:
        node = Node(key, kind, start, end)
        del path[depth:]
        (path[-1].children if path else roots).append(node)
        path.append(node)
    return roots


Forest = dict[int, list[Node]]  # OS thread id -> root slices in order


def code_key(code: CodeType) -> str:
    return f"{code.co_name} ({code.co_filename}:{code.co_firstlineno})"


def tp_name(t: type) -> str:
    """A type's name in a builtin's name: its qualified name, with its module unless builtins."""
    if t.__module__ == "builtins":
        return t.__qualname__
    return f"{t.__module__}.{t.__qualname__}"


def c_key(ckind: int, obj: Any, name: str | None, method: int, rec: ModuleType) -> str:
    """The name of a builtin call from what the recorder kept of the callable."""
    if ckind == C_OWN:
        return OWN_CALL
    if ckind == C_FUNCTION:
        text = f"{obj.__name__}.{name}" if isinstance(obj, ModuleType) else str(name)
    elif ckind == C_METHOD:
        # The class whose method it is: in the MRO of the receiver's class, the one whose dict
        # holds this very builtin (super().__init_subclass__ from a class that defines its own
        # is object.__init_subclass__), else the first with the name.
        holders = [t for t in obj.__mro__ if name in t.__dict__]
        same = [t for t in holders if rec.method_def(t.__dict__[name]) == method]
        owner = (same or holders or [obj])[0]
        text = f"{tp_name(owner)}.{name}"
    elif ckind == C_DESCR:
        text = f"{tp_name(obj)}.{name}"
    elif ckind == C_TYPE:
        text = tp_name(obj)
    else:
        text = f"{tp_name(obj)}.__call__"
    return f"<built-in method {text}>"


class GroundTruth:
    """Records with CPython's hooks between start() and stop()."""

    def __init__(self, recorder: ModuleType) -> None:
        self._rec = recorder
        self.initial: dict[int, list[CodeType]] = {}
        self.events: list[tuple[int, int, int, int, Any, str | None, int]] = []
        self.idents: dict[int, int] = {}

    def start(self, c_calls: bool) -> None:
        self.idents = {t.ident: t.native_id for t in threading.enumerate() if t.native_id}
        # threading keeps the parent's id for the main thread of a forked child
        self.idents[threading.get_ident()] = self._rec.tid()
        # framescope._core's nanobind functions (framescope.mark...) are framescope's own builtins,
        # by identity (their type, nanobind.nb_func, is shared with other nanobind extensions).
        import framescope._core as core

        self._rec.set_own([f for f in vars(core).values() if type(f) is type(core.mark)])
        _, stacks = self._rec.start(c_calls)
        self.initial = {self.idents[i]: codes for i, codes in stacks.items() if i in self.idents}

    def stop(self) -> None:
        _, self.events = self._rec.stop()

    def forest(self, window: tuple[int, int], c_calls: bool) -> Forest:
        """The trees CPython's hooks saw inside ``window`` (framescope's start and stop, ns):
        frames running at its start are slices from its start, frames running at its end end
        there. Without ``c_calls`` builtin slices are left out (their children move up)."""
        lo, hi = window
        per_thread: dict[int, list[tuple[int, int, int, Any, str | None, int]]] = {}
        for ts, tid, kind, ckind, obj, name, method in self.events:
            per_thread.setdefault(tid, []).append((ts, kind, ckind, obj, name, method))
        out: Forest = {}
        for tid in set(per_thread) | set(self.initial):
            roots: list[Node] = []
            # Each entry: (node, or None before the window; kind; code of a Python slice)
            stack: list[tuple[Node | None, str, CodeType | None]] = [
                (None, "py", code) for code in self.initial.get(tid, [])
            ]
            in_window = False

            def enter_window() -> None:
                # Python frames running at the start are slices from the start; builtin calls
                # in progress then are not (framescope reads only the Python frames of the
                # running stacks): what they call belongs to the frame that called them.
                parent: Node | None = None
                for i, (_, kind, code) in enumerate(stack):
                    if kind == "c":
                        continue
                    assert code is not None
                    node = Node(code_key(code), kind, lo)
                    (parent.children if parent else roots).append(node)
                    stack[i] = (node, kind, code)
                    parent = node

            def innermost() -> Node | None:
                for node, _, _ in reversed(stack):
                    if node is not None:
                        return node
                return None

            for ts, kind, ckind, obj, name, method in per_thread.get(tid, []):
                if ts > hi:
                    break
                if not in_window and ts >= lo:
                    enter_window()
                    in_window = True
                if kind in (EV_PY_OPEN, EV_C_OPEN):
                    is_py = kind == EV_PY_OPEN
                    node = None
                    if in_window:
                        key = code_key(obj) if is_py else c_key(ckind, obj, name, method, self._rec)
                        node = Node(key, "py" if is_py else "c", ts)
                        parent = innermost()
                        (parent.children if parent else roots).append(node)
                    stack.append((node, "py" if is_py else "c", obj if is_py else None))
                elif kind == EV_PY_CLOSE:
                    if not stack:
                        continue  # a frame that started before the recorder
                    if not any(k == "py" and c is obj for _, k, c in stack):
                        # A return whose start CPython did not report: 3.11 resumes a generator
                        # whose `yield from`/`await` delegate handled a throw() and returned
                        # without a call event (it jumps back to the SEND, never executing the
                        # RESUME that reports it), then reports its return. No slice to close.
                        continue
                    if stack[-1][1] != "py" or stack[-1][2] is not obj:
                        raise AssertionError(
                            f"ground truth: {code_key(obj)} returned while {stack[-1]} is open "
                            f"on thread {tid}"
                        )
                    node, _, _ = stack.pop()
                    if node:
                        node.end = ts
                elif stack and stack[-1][1] == "c":  # EV_C_CLOSE (of a builtin started before: none open)
                    node, _, _ = stack.pop()
                    if node:
                        node.end = ts
            if not in_window:
                enter_window()
            for node, _, _ in stack:
                if node and node.end < 0:
                    node.end = hi
            roots = drop_builtins(roots, only_key=OWN_CALL)
            if not c_calls:
                roots = drop_builtins(roots)
            if roots:
                out[tid] = roots
        return out


def drop_builtins(nodes: Iterable[Node], only_key: str | None = None) -> list[Node]:
    """The trees without builtin slices (those keyed ``only_key`` when given): a builtin's
    children take its place."""
    out: list[Node] = []
    for n in nodes:
        kids = drop_builtins(n.children, only_key)
        if n.kind == "c" and (only_key is None or n.key == only_key):
            out.extend(kids)
        else:
            out.append(Node(n.key, n.kind, n.start, n.end, kids))
    return out


def framescope_forest(prof: Any) -> Forest:
    """framescope's trees: Python frames and builtin calls, by OS thread id."""
    trace = prof.trace
    threads = trace.threads  # (pid, os_tid, pthread_id, name) per thread index
    nodes: dict[int, Node] = {}
    out: Forest = {}
    symbols: dict[int, str] = {}
    # Ranges are not calls: what runs inside one (an asyncio Task's step, framescope's range
    # around it, framescope.integrations._asyncio_tasks) belongs to the nearest call around the range.
    range_parent: dict[int, int] = {}
    for i in range(len(trace)):
        name, _cat, thread, start, dur, parent, _depth, sym, category = trace.event(i)
        if category == PYTHON_FUNCTION:
            if sym not in symbols:
                _, file, line, function = trace.symbol(sym)
                symbols[sym] = f"{function} ({file}:{line})"
            node = Node(symbols[sym], "py", start, start + dur)
        elif category == C_FUNCTION_CALL:
            node = Node(name, "c", start, start + dur)
        else:
            if dur >= 0 and name.startswith("asyncio.Task "):
                range_parent[i] = parent
            continue
        nodes[i] = node
        while parent in range_parent:
            parent = range_parent[parent]
        if parent >= 0:
            if parent not in nodes:
                raise AssertionError(f"framescope: event {i} ({name}) nests in a non-call event")
            nodes[parent].children.append(node)
        else:
            out.setdefault(threads[thread][1], []).append(node)
    return out


# framescope's wrappers of the program's calls (framescope.integrations._asyncio_tasks: asyncio.to_thread
# and the function it runs on the executor's thread): unrecorded like all framescope frames,
# their callees are recorded as the caller's; the ground truth keeps them the same way.
_TRANSPARENT = ("_to_thread (", "in_task (")


def prune(forest: Forest, drop_file_prefixes: tuple[str, ...]) -> Forest:
    """Removes the subtrees of Python frames whose file starts with one of the prefixes
    (framescope's own code: its start and stop frames differ by design from a program's)."""

    def keep(nodes: list[Node]) -> list[Node]:
        out = []
        for n in nodes:
            if n.kind == "py" and n.key.rsplit(" (", 1)[-1].startswith(drop_file_prefixes):
                if n.key.startswith(_TRANSPARENT):  # a wrapper: what it calls is the program's
                    # (its own builtin calls are not recorded, as any unrecorded frame's)
                    out.extend(keep([c for c in n.children if c.kind != "c"]))
                continue
            out.append(Node(n.key, n.kind, n.start, n.end, keep(n.children)))
        return out

    pruned = {tid: keep(roots) for tid, roots in forest.items()}
    return {tid: roots for tid, roots in pruned.items() if roots}
