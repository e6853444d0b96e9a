"""The contract between a ``profile`` and the framescope code that drives one from outside it
(framescope run's finisher, a followed child, the attach agent, the flight recorder, the pytest
plugin, the Jupyter magic): whether its session runs, the trace it stored, the one end of a
session, and the few settings they make. Only this module and the profile itself touch the
profile's private state; callers go through these functions.

The state is the core's: ``_core._profile_start``/``_stop`` set ``_running`` and ``_trace`` in
the same C call that starts or stops the session (see profile's "session" comment)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Protocol

from framescope import _core
from framescope.processes import _process_table as processes

if TYPE_CHECKING:
    from framescope.processes._process_table import SessionClock


class Session(Protocol):
    """What of a profile this contract reads and sets (``profile`` is one)."""

    _running: bool
    _trace: _core.Trace | None
    _clock: SessionClock | None
    _launcher_files: list[str]
    _host_files: tuple[str, ...]
    _host_export: Literal["mark", "drop", "show"]


# The profile the pytest plugin records the running test with, if any: a test starting a
# session of its own is told why it cannot, and how to opt out (profile._start_arguments).
_plugin_profile: Session | None = None


def is_running(prof: Session) -> bool:
    """Whether ``prof``'s session records now."""
    return prof._running


def recorded_trace(prof: Session) -> _core.Trace | None:
    """The trace ``prof`` stored at its last stop (unfiltered), or None."""
    return prof._trace


def end_of_session(prof: Session) -> _core.Trace | None:
    """The end of every session, however it stopped (``stop()``, or ``stop_quietly``): this
    process named in the stored trace (its pid, rank, clock data: processes.session_stopped).
    Returns the trace, None when the session stored none."""
    if prof._trace is not None:
        processes.session_stopped(prof._trace, prof._clock)
    return prof._trace


def stop_quietly(prof: Session, keep: bool = True) -> _core.Trace | None:
    """Stops ``prof``'s session without what ``stop()`` adds for a program's own profile (its
    warnings printed on the program's stderr, ``on_trace_ready``): for callers that say the
    warnings their own way. Ends the session as stop() does (end_of_session) when it stopped
    one and ``keep``; a profile not running is left as it is. Returns the stored trace."""
    if _core._stop(prof, keep) and keep:
        end_of_session(prof)
    return prof._trace if keep else None


def plugin_profile() -> Session | None:
    """The pytest plugin's profile of the running test, if any."""
    return _plugin_profile


def set_plugin_profile(prof: Session | None) -> None:
    global _plugin_profile
    _plugin_profile = prof


def set_launcher_files(prof: Session, files: list[str]) -> None:
    """Files of the program launching the profiled code (framescope run's console script,
    runpy): never recorded, like framescope's own. Set before start."""
    prof._launcher_files = list(files)


def set_host_code(prof: Session, files: tuple[str, ...] | None = None,
                  export: Literal["mark", "drop", "show"] | None = None) -> None:
    """More files of host code than framescope.analysis._host_code knows (the %%framescope
    cell's caller), and how exports treat host frames (see export_trace)."""
    if files is not None:
        prof._host_files = files
    if export is not None:
        prof._host_export = export


def host_files(prof: Session) -> tuple[str, ...]:
    return prof._host_files
