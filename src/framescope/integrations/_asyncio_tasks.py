"""asyncio Tasks in traces: each step of a Task (a run of its coroutine between two awaits) is a
range named after the Task, so traces show which Task did what, and every reader can group by it.

How: an event loop runs a Task's steps as callbacks of ``asyncio.events.Handle`` (the Task's
``__step`` or ``__wakeup``, bound to the Task: the callback's ``__self__``). While a session
records, ``Handle._run`` is wrapped: a callback bound to a Task runs inside that Task's range
(``asyncio.Task <name> #<n>``, a static-name range of the core, named once per Task; the
replacement is C: cpp/python/integrations/asyncio_steps.cpp).
``asyncio.to_thread`` is wrapped the same way: the function runs, on the executor's thread,
inside the range of the Task that awaited it.

Why this design:
- **nothing without an event loop**: the wrappers are installed at the session's start (or when
  asyncio is first imported during it) and run only when a loop runs a callback; a program that
  runs no loop executes none of this code (no frame hook change, no per-call check);
- **the Tasks are untouched**: no task factory, no wrapped coroutine (``task.get_coro()``,
  ``repr(task)``, a loop's own task factory and ``asyncio.Task`` subclasses keep working);
- **cheap with a loop**: per callback a C method call, a slot read and a type check, per Task
  step a hash lookup and a range's begin and end, all in C (bench/asyncio_tasks.py measures it).
uvloop's Handle is compiled: for its loops, ``uvloop.Loop.create_task`` is wrapped instead and
gives each Task a coroutine that runs its steps in the Task's range (Python code per step, and
``task.get_coro()`` returns that wrapper).

Readers: ``task_steps(trace)`` finds the ranges; the Chrome JSON and Perfetto writers give each
Task a track of its own (cpp/export/task_tracks.h, which knows ``PREFIX`` too);
framescope.integrations._asyncio_tracks prints the ``--by-task`` summary.
"""

from __future__ import annotations

import collections.abc
import functools
import sys
import types
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from framescope import _core

if TYPE_CHECKING:
    from framescope._core import Trace

#: Prefix of the name of a Task's range (kTaskRangePrefix in cpp/export/task_tracks.h).
PREFIX = "asyncio.Task "

_installed: dict[str, Any] = {}  # what was replaced: "Handle._run", "to_thread", "uvloop"

#: The name of a Task's range (made in C at its first step, once per Task; to_thread's ranges
#: and uvloop's steps use the same).
_task_name: Callable[[Any], str] = _core._asyncio_task_name


def install() -> None:
    """Replaces asyncio's Handle._run and wraps to_thread (idempotent). Called at a session's
    start when asyncio is imported, else right after it is (framescope._import_hooks)."""
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return
    # No lock: a session starts one at a time, under the GIL, and a lock held when an interrupt
    # lands inside start() would never be released (tests/session/test_interrupts.py).
    if "Handle._run" in _installed:
        return
    task_types = tuple({asyncio.Task, getattr(asyncio.tasks, "_PyTask", asyncio.Task)})
    # Handle._run replaced by a C function (cpp/python/integrations/asyncio_steps.cpp): as
    # Python code the wrapper cost 10-30% of an asyncio-heavy program.
    _core._asyncio_steps_install(asyncio.events.Handle, task_types)
    _installed["Handle._run"] = True

    to_thread = getattr(asyncio, "to_thread", None)
    if to_thread is None or getattr(to_thread, "_framescope", False):
        return  # ours already (left by an interrupted start or stop)

    @functools.wraps(to_thread)
    async def _to_thread(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        task = asyncio.current_task()
        if task is None or not isinstance(task, task_types):
            return await to_thread(func, *args, **kwargs)
        name = _task_name(task)

        def in_task(*a: Any, **k: Any) -> Any:
            with _core.record_function(name):
                return func(*a, **k)

        return await to_thread(in_task, *args, **kwargs)

    _to_thread._framescope = True  # type: ignore[attr-defined]
    setattr(asyncio, "to_thread", _to_thread)


class _Steps(collections.abc.Coroutine):  # type: ignore[type-arg]
    """A Task's coroutine whose every step runs inside the Task's range: for loops whose Handle
    is not asyncio's (uvloop), given to the Task by the loop's create_task. Python code at each
    step (slower than the Handle._run replacement), and the Task's get_coro() returns it."""

    __slots__ = ("_coro", "_name", "_task")

    def __init__(self, coro: Any) -> None:
        self._coro = coro
        self._name = ""
        self._task: Any = None  # weak reference, set by create_task

    def _range(self) -> Any:
        if not self._name:  # at the first step: a TaskGroup names its Task after creating it
            task = self._task() if self._task is not None else None
            self._name = _task_name(task) if task is not None else PREFIX + "Task"
        return _core.record_function(self._name)

    def send(self, value: Any) -> Any:
        with self._range():
            return self._coro.send(value)

    def throw(self, *args: Any) -> Any:
        with self._range():
            return self._coro.throw(*args)

    def close(self) -> None:
        self._coro.close()

    def __next__(self) -> Any:
        return self.send(None)

    def __iter__(self) -> _Steps:
        return self

    def __await__(self) -> _Steps:
        return self

    def __getattr__(self, name: str) -> Any:  # cr_frame, cr_code, __qualname__...
        return getattr(self._coro, name)


def _install_uvloop(uvloop: Any) -> None:
    """uvloop's Loop runs callbacks through its own (compiled) Handle: its create_task gives the
    Task a coroutine that records its steps (_Steps) instead."""
    if "uvloop" in _installed:
        return
    loop_class = uvloop.Loop
    create_task = loop_class.create_task

    def _create_task(self: Any, coro: Any, **kwargs: Any) -> Any:
        if not isinstance(coro, types.CoroutineType):
            return create_task(self, coro, **kwargs)
        steps = _Steps(coro)
        task = create_task(self, steps, **kwargs)
        steps._task = weakref.ref(task)
        return task

    loop_class.create_task = _create_task
    _installed["uvloop"] = loop_class


#: Set to False to record asyncio programs without Task ranges (bench/asyncio_tasks.py compares).
ENABLED = True


def arm() -> None:
    """At a session's start: install() now if asyncio is imported, else once it is (while a
    session records)."""
    if not ENABLED:
        return
    from framescope import _import_hooks as import_hooks

    if "uvloop" in sys.modules:
        _install_uvloop(sys.modules["uvloop"])
    elif "uvloop" not in _hooked:  # imported during a session (the hook stays registered)
        _hooked.add("uvloop")
        import_hooks.after_import("uvloop", lambda module: _install_uvloop(module)
                                  if _core.is_enabled() else None)
    if "asyncio" in sys.modules:
        install()
    elif "asyncio" not in _hooked:
        _hooked.add("asyncio")
        import_hooks.after_import("asyncio", lambda _module: install() if _core.is_enabled()
                                  else None)


_hooked: set[str] = set()  # modules whose import arm() waits for (once per process)


def uninstall() -> None:
    """Puts back what install() replaced (at the session's stop)."""
    asyncio = sys.modules.get("asyncio")
    uvloop_class = _installed.pop("uvloop", None)
    if uvloop_class is not None and "create_task" in vars(uvloop_class):
        delattr(uvloop_class, "create_task")  # the compiled base's again
    if asyncio is None:
        _installed.clear()
        return
    # From what is installed, not from _installed: an interrupt may have cut an earlier start
    # or stop short between the two (both steps are idempotent).
    _core._asyncio_steps_uninstall(asyncio.events.Handle)
    current = getattr(asyncio, "to_thread", None)
    if getattr(current, "_framescope", False):
        setattr(asyncio, "to_thread", current.__wrapped__)  # type: ignore[union-attr]
    _installed.clear()


# ---- readers -----------------------------------------------------------------------------------


@dataclass
class TaskSteps:
    """The steps of one Task: (thread index, start ns, duration ns) in time order."""

    name: str
    steps: list[tuple[int, int, int]] = field(default_factory=list)
    # Self time per function inside the Task's steps: name -> [calls, self ns]
    functions: dict[str, list[int]] = field(default_factory=dict)

    @property
    def start_ns(self) -> int:
        return min(s[1] for s in self.steps)

    @property
    def end_ns(self) -> int:
        return max(s[1] + s[2] for s in self.steps)

    @property
    def running_ns(self) -> int:
        return sum(s[2] for s in self.steps)


def has_tasks(trace: Trace) -> bool:
    """True when some range of ``trace`` is a Task's (one look at its symbols)."""
    return any(trace.symbol(i)[0].startswith(PREFIX) for i in range(trace.symbol_count))


def task_steps(trace: Trace, functions: bool = False) -> list[TaskSteps]:
    """Every Task of ``trace`` with its steps (and, with ``functions``, the self time of the
    functions its steps ran), in the order the Tasks first ran. One replay."""
    tasks: dict[str, TaskSteps] = {}
    # Per thread, the open events: [index, end ns, task or None, name, children ns]
    open_: list[list[Any]] = []
    thread = -1

    def close(entry: list[Any]) -> None:
        task, name = entry[2], entry[3]
        if functions and task is not None and not name.startswith(PREFIX):
            row = task.functions.setdefault(name, [0, 0])
            row[0] += 1
            row[1] += max(entry[1] - entry[5] - entry[4], 0)

    for e in trace.iter_events():
        if e.duration_ns < 0:
            continue  # marks
        if e.thread != thread:
            while open_:
                close(open_.pop())
            thread = e.thread
        while open_ and open_[-1][0] != e.parent:
            close(open_.pop())
        parent_task = open_[-1][2] if open_ else None
        if open_:
            open_[-1][4] += e.duration_ns
        name = e.name
        task = parent_task
        if name.startswith(PREFIX) and e.category == "user_annotation":
            task = tasks.get(name)
            if task is None:
                task = tasks[name] = TaskSteps(name[len(PREFIX):])
            task.steps.append((e.thread, e.start_ns, e.duration_ns))
        open_.append([e.index, e.end_ns, task, name, 0, e.start_ns])
    while open_:
        close(open_.pop())
    return list(tasks.values())
