"""The step loop of a profile: which sessions run at each ``step()`` (torch.profiler's
transitions between schedule actions), the ``ProfilerStep#N`` ranges, ``on_trace_ready``."""

from __future__ import annotations

import warnings
from enum import Enum
from typing import Any, Callable, Protocol

from framescope import _core
from framescope.profiler._schedule import ProfilerAction, Schedule, record_always
from framescope._unrecorded import unrecorded



class SteppedSession(Protocol):
    """What the step loop drives (a profile): one session started or stopped per call, and
    the handler of each recorded cycle's trace."""

    on_trace_ready: Callable[[Any], object] | None

    def _start_session(self) -> None: ...

    def _stop_session(self, keep: bool) -> None: ...

_N, _W, _R, _S = (ProfilerAction.NONE, ProfilerAction.WARMUP, ProfilerAction.RECORD,
                  ProfilerAction.RECORD_AND_SAVE)


def _as_action(value: Any) -> ProfilerAction:
    """A schedule's answer as a ProfilerAction; torch's own enum is accepted by name, so that
    ``torch.profiler.schedule(...)`` can drive a framescope profile."""
    if isinstance(value, ProfilerAction):
        return value
    if isinstance(value, Enum) and value.name in ProfilerAction.__members__:
        return ProfilerAction[value.name]
    raise TypeError(f"a schedule must return a ProfilerAction, not {value!r}")


@unrecorded
def _scheduled_action(schedule: Schedule, step: int) -> ProfilerAction:
    """The schedule's action for ``step``: framescope's work, not the program's (a torch schedule
    or an Enum conversion would otherwise be recorded in the running session)."""
    return _as_action(schedule(step))


class StepDriver:
    """Runs a profile's sessions by its schedule. A waiting step runs no session at all; a
    warmup step runs one whose events are discarded when recording starts (so the cycle's
    trace holds its active steps alone: the restart happens inside ``step()``, between
    steps); a recorded cycle ends with its session stopped and ``on_trace_ready(prof)`` called
    while ``prof.trace`` is that cycle's trace.

    Once a session records, the code here makes no Python call until control is back in the
    caller's code (only C calls and inline statements), so that no framescope frame is recorded
    as a call of the profiled program."""

    # torch's transitions (torch/profiler/profiler.py, profile.action_map); None: stop().
    # "prepare": a session starts (warmup); "start": recording starts (restarting a warmup's
    # session); "stop": the session stops; "ready": on_trace_ready; "warn:...": a warning.
    # Keyed by the actions' values: hashing an Enum member runs Enum.__hash__, a Python function
    # (which a recording session would record).
    _ACTIONS: dict[tuple[int, int | None], tuple[str, ...]] = {
        (_N.value, _W.value): ("prepare",),
        (_N.value, _R.value): ("prepare", "start"),
        (_N.value, _S.value): ("prepare", "start"),
        (_W.value, _N.value): ("warn:WARMUP followed by NONE", "start", "stop"),
        (_W.value, _R.value): ("start",),
        (_W.value, _S.value): ("start",),
        (_R.value, _N.value): ("warn:RECORD followed by NONE", "stop"),
        (_R.value, _W.value): ("warn:RECORD followed by WARMUP", "stop"),
        (_S.value, _N.value): ("stop", "ready"),
        (_S.value, _W.value): ("stop", "ready", "prepare"),
        (_S.value, _R.value): ("stop", "ready", "prepare", "start"),
        (_S.value, _S.value): ("stop", "ready", "prepare", "start"),
        (_W.value, None): ("start", "stop"),
        (_R.value, None): ("stop", "ready"),
        (_S.value, None): ("stop", "ready"),
    }

    def __init__(self, prof: SteppedSession, schedule: Schedule | None) -> None:
        # A _ScheduledProfile when start/stop/step go through here (_profile.py).
        self._prof = prof
        self.schedule: Callable[[int], Any] = schedule or record_always
        self.record_steps = schedule is not None
        self.stopped = False  # stop() ran: a scheduled profile without a trace recorded no step
        self.step_num = 0
        self.current_action = _scheduled_action(self.schedule, 0)
        self._step_range: _core.record_function | None = None
        self._session = "off"  # "off", "warmup" or "recording"

    def start(self) -> None:
        """What profile.start() does."""
        self._transit(_N, self.current_action)
        if self.record_steps:  # inline: a session may record now
            self._step_range = _core.record_function(f"ProfilerStep#{self.step_num}")
            self._step_range.__enter__()

    def stop(self) -> None:
        """What profile.stop() does."""
        self._exit_step()
        try:
            self._transit(self.current_action, None)
        finally:
            self.stopped = True

    def step(self) -> None:
        """What profile.step() does."""
        self._exit_step()
        previous = self.current_action
        self.step_num += 1
        self.current_action = _scheduled_action(self.schedule, self.step_num)
        try:
            self._transit(previous, self.current_action)
        finally:  # (on_trace_ready raised: the step still begins, in the new cycle's session)
            if self.record_steps:  # inline: a session may record now
                self._step_range = _core.record_function(f"ProfilerStep#{self.step_num}")
                self._step_range.__enter__()

    @property
    def session_running(self) -> bool:
        return self._session != "off"

    def _exit_step(self) -> None:
        if self._step_range is not None:
            step_range, self._step_range = self._step_range, None
            step_range.__exit__(None, None, None)

    def _transit(self, previous: ProfilerAction, current: ProfilerAction | None) -> None:
        prof = self._prof
        key = (previous._value_, None if current is None else current._value_)
        # An on_trace_ready that raises must not leave the transition half done: the next
        # cycle's session would not start, and the next "ready" would hand the same trace over
        # again. The transition completes, then its exception goes to the caller of step().
        failure: BaseException | None = None
        for action in self._ACTIONS.get(key, ()):
            if action == "prepare":
                if self._session == "off":
                    # prepare + start in one transition: one session, recording
                    prof._start_session()
                    self._session = "warmup"
            elif action == "start":
                if current in (_N, None):
                    # Warmup then stop (torch starts and stops the trace and keeps nothing): the
                    # session stays a warmup one, so the stop that follows discards it.
                    continue
                if self._session == "warmup" and previous == _W:
                    prof._stop_session(keep=False)  # the warmup's events are not the cycle's
                    prof._start_session()
                elif self._session == "off":
                    prof._start_session()
                self._session = "recording"
            elif action == "stop":
                if self._session != "off":
                    keep = self._session == "recording"
                    self._session = "off"
                    prof._stop_session(keep=keep)
            elif action == "ready":
                if prof.on_trace_ready is not None:
                    try:
                        prof.on_trace_ready(prof)
                    except BaseException as exc:  # noqa: BLE001 - raised below, once done
                        failure = exc
            else:
                warnings.warn(f"Incorrect schedule: {action[5:]}", stacklevel=4)
        if failure is not None:
            _explain(failure, self.step_num)
            raise failure


def _explain(exc: BaseException, step_num: int) -> None:
    """Adds a note to an exception of on_trace_ready (3.11+: shown under its traceback)."""
    add_note = getattr(exc, "add_note", None)
    if add_note is not None:
        add_note(f"(raised by on_trace_ready at profile step {step_num}; the schedule went on: "
                 "the next cycle records into a fresh trace)")
