"""Profiling schedules: which steps of a loop are recorded (``torch.profiler.schedule``'s
semantics), and ``trace_handler``, which writes one trace per recorded cycle as
``torch.profiler.tensorboard_trace_handler`` names them."""

from __future__ import annotations

import enum
import os
import socket
import time
import warnings
from typing import Callable, Protocol

from framescope import _arguments


class ChromeTraceWriter(Protocol):
    """What trace_handler's handler is given: a profile (torch's too), whose cycle's trace it
    writes."""

    def export_chrome_trace(self, path: str) -> None: ...

__all__ = ["ProfilerAction", "ScheduleError", "schedule", "trace_handler"]


class ProfilerAction(enum.Enum):
    """What the profiler does during a step (the values of torch's enum of the same name)."""

    NONE = 0  #: nothing runs: a waiting step costs nothing
    WARMUP = 1  #: a session runs (costing what recording costs), its events are discarded
    RECORD = 2  #: the session records
    RECORD_AND_SAVE = 3  #: records, and the cycle's trace is handed to on_trace_ready after it


Schedule = Callable[[int], ProfilerAction]


class ScheduleError(ValueError, AssertionError):
    """Invalid schedule arguments or step. A ValueError, and also an AssertionError, which is
    what ``torch.profiler.schedule`` raises (its checks are asserts), so that code written
    against torch catches it the same way."""


def schedule(
    *,
    wait: int,
    warmup: int,
    active: int,
    repeat: int = 0,
    skip_first: int = 0,
    skip_first_wait: int = 0,
) -> Schedule:
    """The action for each step number, as ``torch.profiler.schedule`` with the same arguments:
    skip ``skip_first`` steps, then cycles of ``wait`` idle steps, ``warmup`` warmup steps and
    ``active`` recorded steps (the last one RECORD_AND_SAVE), ``repeat`` times (0: forever).
    With ``skip_first_wait`` the first cycle starts without its wait.

    Raises:
        ScheduleError (a ValueError and an AssertionError, as torch's): a negative count, or
            ``active`` < 1; from the schedule, a negative step.
    """
    for name, value in (("wait", wait), ("warmup", warmup), ("active", active),
                        ("repeat", repeat), ("skip_first", skip_first),
                        ("skip_first_wait", skip_first_wait)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"schedule(): {name} must be an int, not {type(value).__name__}")
    if wait < 0 or warmup < 0 or active <= 0 or repeat < 0 or skip_first < 0:
        raise ScheduleError(
            f"invalid profiler schedule arguments: wait={wait} (need >= 0), warmup={warmup} "
            f"(need >= 0), active={active} (need > 0), repeat={repeat} (need >= 0), "
            f"skip_first={skip_first} (need >= 0)"
        )
    if warmup == 0:
        warnings.warn("Profiler won't be using warmup, this can skew profiler results",
                      stacklevel=2)
    num_steps = wait + warmup + active

    def schedule_fn(step: int) -> ProfilerAction:
        if step < 0:
            raise ScheduleError(f"step must be non-negative, not {step}")
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        if skip_first_wait != 0:
            step += wait
        if repeat > 0 and step / num_steps >= repeat:
            return ProfilerAction.NONE
        mod_step = step % num_steps
        if mod_step < wait:
            return ProfilerAction.NONE
        if mod_step < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if mod_step < num_steps - 1 else ProfilerAction.RECORD_AND_SAVE

    return schedule_fn


def record_always(step: int) -> ProfilerAction:
    """The schedule of a profile without one: every step records."""
    return ProfilerAction.RECORD


def trace_handler(
    dir_name: str | os.PathLike[str], worker_name: str | None = None, use_gzip: bool = False
) -> Callable[[ChromeTraceWriter], None]:
    """An ``on_trace_ready`` handler writing each cycle's trace as Chrome JSON to
    ``dir_name/{worker_name}.{time_ns}.pt.trace.json[.gz]``, as torch's
    ``tensorboard_trace_handler`` names them (``worker_name`` defaults to ``hostname_pid``), so
    TensorBoard's and HTA's loaders find them.

    Raises (from the handler):
        RuntimeError: the directory cannot be created.
    """
    directory = _arguments.path(dir_name, "trace_handler(): dir_name")
    if worker_name is not None:
        _arguments.text("trace_handler(): worker_name", worker_name)
    use_gzip = _arguments.flag("trace_handler(): use_gzip", use_gzip)

    def handler_fn(prof: ChromeTraceWriter) -> None:
        nonlocal worker_name
        if not os.path.isdir(directory):
            try:
                os.makedirs(directory, exist_ok=True)
            except OSError as exc:
                raise RuntimeError(f"can't create directory: {directory}") from exc
        if not worker_name:
            worker_name = f"{socket.gethostname()}_{os.getpid()}"
        file_name = f"{worker_name}.{time.time_ns()}.pt.trace.json"
        if use_gzip:
            file_name += ".gz"
        prof.export_chrome_trace(os.path.join(directory, file_name))

    return handler_fn
