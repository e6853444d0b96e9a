"""framescope.profile: a profiling session of Python calls and native ranges (its control
half; reading the trace is ProfileResults, options are worked out in _options)."""

from __future__ import annotations

import inspect
import os
import sys
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal, Sequence

from framescope import _arguments, _core
from framescope.integrations import _asyncio_tasks
from framescope.processes import _process_table as processes
from framescope.processes import _ranks as ranks
from framescope.profiler import _session, _tracemalloc_guard
from framescope.profiler._activities import check_torch_only, resolve_activities
from framescope.profiler._labels import label_calls as label_calls
from framescope.profiler._labels import label_torch_modules
from framescope.profiler._options import (CPU_SAMPLE_PERIOD_NS, MAX_DEPTH_LIMIT,
                                          MIN_DURATION_LIMIT_NS, PACKAGE_DIR, Backend,
                                          check_backend, file_globs, fspath,
                                          has_python_frames, native_thread_ids,
                                          parse_memory_limit, prune_prefixes, resolve_backend)
from framescope.export._formats import ExportFormat
from framescope.profiler._results import ProfileResults
from framescope.profiler._schedule import Schedule
from framescope.profiler._stepping import StepDriver
from framescope._unrecorded import unrecorded


__all__ = ["ExportFormat", "label_calls", "load", "profile"]


class profile(ProfileResults):
    """Records Python calls (``with_stack``), ``record_function`` ranges and native C/C++ ranges.

    Keyword names follow ``torch.profiler.profile`` where the meaning matches. Use as a context
    manager or with ``start()``/``stop()``. Only one session runs at a time in a process.

    Args:
        activities: torch.profiler's activities (``framescope.ProfilerActivity``, or torch's):
            with ``CPU`` and torch imported, torch ops are recorded (``torch_ops`` follows
            it unless given); device activities (CUDA, XPU...) are accepted with a one-line
            warning and noted as unavailable (``unavailable_activities``, and in the Chrome
            JSON): framescope records the CPU only. None: ``torch_ops`` alone decides.
        record_shapes: keep the inputs of ranges that provide them.
        profile_memory: count the bytes Python allocates (the PyMem and PyObject allocators,
            wrapped for the session and restored at stop), charged to the running function or
            range: self and total allocated bytes in ``key_averages()`` and ``summary()``, a
            "Python allocated bytes" counter per thread in the trace; and keep
            ``record_memory`` events. With torch ops on, also torch's tensor allocations, as
            torch's profiler records them (framescope.integrations._torch_memory, docs/torch.md).
        with_flops: estimate flops of known ops from their input shapes.
        with_stack: record every Python call (from the PEP 523 frame hook). On by default,
            unlike torch.profiler's: framescope's Python calls are its cheapest events.
        c_calls: also record builtins called from Python (sys.monitoring / setprofile).
        backend: where Python calls come from: ``"auto"`` (the frame hook, or the fallback
            when another tool's PEP 523 hook is installed at start, with a warning),
            ``"frame_hook"`` (chains to such a hook), ``"fallback"``, ``"sys.monitoring"``
            (3.12+) or ``"setprofile"`` (3.10/3.11).
        memory_limit: bytes of event buffers (int, or a string such as ``"512MiB"``); default
            1 GiB, or 64 MiB with ``stream_to``.
        on_limit: ``"stop"`` keeps the oldest events, ``"keep_newest"`` is a flight recorder.
        stream_to: streaming capture: full event buffers are written to this ``.fstrace`` file
            by a background thread while the session runs, so memory stays flat however long
            it runs (``memory_limit`` then bounds the buffers waiting to be written; a thread
            that reaches it waits for the writer instead of dropping events). The file is
            created at ``start()`` (a temporary next to it, renamed at ``stop()``), and after
            ``stop()`` the trace reads from it. Range details, mark names and memory samples
            stay in memory until the stop. Not with ``on_limit="keep_newest"``.
        torch_ops: also record torch's operators (``aten::...``), autograd nodes and
            ``torch.profiler.record_function`` ranges through torch's RecordFunction
            observers, with input shapes when ``record_shapes``; RuntimeError when torch is
            missing or unsupported (see ``framescope.integrations._torch_ops``). Default (None): as
            ``activities`` says, else off.
        cpu_time: also measure time on CPU: a thread of the session reads every recording
            thread's CPU clock every 4 ms, up to 16 ms while their rates of CPU use hold (the
            recording threads pay nothing; the sampler uses about 0.3% of a core with one busy
            recording thread and about 1% with 64, docs/performance.md); readers interpolate between readings (``key_averages()``'s
            ``on_cpu_time_total``, ``summary(sort_by="on_cpu")``).
        schedule: which steps are recorded (``framescope.schedule(...)``, or any function of the
            step number returning a ProfilerAction, torch's included), with ``step()`` called
            once per step: each recorded step is a ``ProfilerStep#N`` range, waiting steps run
            no session, and each recorded cycle is a trace of its own. Without a schedule
            everything between start and stop is recorded.
        on_trace_ready: called as ``on_trace_ready(prof)`` when a cycle's trace is ready
            (``prof.trace`` is that cycle's; ``framescope.trace_handler(dir)`` writes it), and
            at stop without a schedule.
        include_files: globs of the files whose Python frames are recorded (default: all).
        exclude_files: globs of files whose Python frames are not recorded. Both are decided
            once per code object at its first call, so a frame left out costs about what the
            frame hook alone costs. A left-out frame is simply absent: its callees in recorded
            files are recorded as calls of the nearest recorded frame around them, and its own
            builtin calls (``c_calls``) are not recorded. Globs follow fnmatch (``*`` also
            matches ``/``) against the code's file name (absolute for files Python loaded from
            disk); a relative glob is taken from the current directory, a path without a
            wildcard names that file, or every file under that directory. framescope's own
            frames are never recorded.
        max_depth: Python frames with ``max_depth`` Python frames around them are left out, with
            everything they enclose (ranges, builtins): the trace keeps the outer
            ``max_depth`` levels of Python calls (frames running at start count). Applied when
            the trace is read, like ``min_duration_ns``.
        min_duration_ns: slices shorter than this are left out of every output, with what
            they enclose; marks and memory samples inside them are kept. Applied when the trace
            is read: they are recorded (a saved ``.fstrace`` keeps them, and
            ``framescope.load(path, min_duration_ns=...)`` applies it again).
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> profile:
        # A schedule makes start/stop/step Python code driving several sessions (_stepping.py);
        # without one they are the C functions below.
        if cls is profile and kwargs.get("schedule") is not None:
            cls = _ScheduledProfile
        return super().__new__(cls)

    def __init__(
        self,
        *,
        activities: Iterable[Any] | None = None,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_flops: bool = False,
        with_stack: bool = True,
        c_calls: bool = False,
        backend: Backend = "auto",
        memory_limit: int | str | None = None,
        on_limit: Literal["stop", "keep_newest"] = "stop",
        torch_ops: bool | None = None,
        cpu_time: bool = True,
        schedule: Schedule | None = None,
        on_trace_ready: Callable[[profile], object] | None = None,
        include_files: Sequence[str | os.PathLike[str]] | str | None = None,
        exclude_files: Sequence[str | os.PathLike[str]] | str | None = None,
        max_depth: int | None = None,
        min_duration_ns: int = 0,
        stream_to: str | os.PathLike[str] | None = None,
        # torch.profiler.profile's other keywords, so that its recipes run unchanged
        # (framescope.profiler._activities.check_torch_only says what each means here):
        with_modules: bool = False,
        experimental_config: Any = None,
        execution_trace_observer: Any = None,
        acc_events: bool = False,
        use_cuda: bool | None = None,
        custom_trace_id_callback: Callable[[], str] | None = None,
        post_processing_timeout_s: float | None = None,
    ) -> None:
        if on_limit not in ("stop", "keep_newest"):
            raise ValueError(f"on_limit must be 'stop' or 'keep_newest', not {on_limit!r}")
        # ``{rank}`` as in save() and export(): each rank of a job streams to its own file.
        self._stream_to = (fspath(ranks.expand_rank(stream_to), "stream_to")
                           if stream_to is not None else "")
        if self._stream_to and on_limit == "keep_newest":
            raise ValueError("stream_to keeps every event: on_limit='keep_newest' does not apply")
        if memory_limit is None:
            memory_limit = "64MiB" if self._stream_to else "1GiB"
        # Flags by their truth, as torch's (the core takes bools: "x" used to fail in it).
        record_shapes = _arguments.flag("record_shapes", record_shapes)
        profile_memory = _arguments.flag("profile_memory", profile_memory)
        with_flops = _arguments.flag("with_flops", with_flops)
        with_stack = _arguments.flag("with_stack", with_stack)
        c_calls = _arguments.flag("c_calls", c_calls)
        if torch_ops is not None:  # None: as activities say (resolve_activities below)
            torch_ops = _arguments.flag("torch_ops", torch_ops)
        cpu_time = _arguments.flag("cpu_time", cpu_time)
        if c_calls and not with_stack:
            raise ValueError("c_calls=True needs with_stack=True")
        self.record_shapes = record_shapes
        self.profile_memory = profile_memory
        self.with_flops = with_flops
        self.with_stack = with_stack
        self.c_calls = c_calls
        self._requested_backend = check_backend(backend) if with_stack else "none"
        self._backend = self._requested_backend
        self._start_warnings: list[str] = []
        self._memory_limit = parse_memory_limit(memory_limit)
        self._keep_newest = on_limit == "keep_newest"
        # torch.profiler's activities: CPU with torch imported records torch ops unless torch_ops
        # says otherwise; device activities are accepted and noted unavailable (_activities).
        self.activities, torch_ops, self.unavailable_activities = resolve_activities(
            activities, torch_ops)
        self.unavailable_activities += [a for a in check_torch_only(
            with_modules=with_modules, experimental_config=experimental_config,
            execution_trace_observer=execution_trace_observer, acc_events=acc_events,
            use_cuda=use_cuda, custom_trace_id_callback=custom_trace_id_callback,
            post_processing_timeout_s=post_processing_timeout_s,
        ) if a not in self.unavailable_activities]
        self.torch_ops = torch_ops
        self._metadata: dict[str, str] = {}  # add_metadata(_json): top-level keys of the JSON
        if torch_ops:
            from framescope.integrations import _torch_ops

            _torch_ops.attach()  # fails here, before anything runs, when torch can't be observed
            if profile_memory:  # torch's tensor memory instead of the Python heap (_torch_memory)
                from framescope.integrations import _torch_memory

                _torch_memory.attach()
        self.cpu_time = cpu_time
        for name, value in (("schedule", schedule), ("on_trace_ready", on_trace_ready)):
            if value is not None and not callable(value):
                raise TypeError(f"{name} must be a callable or None, not {type(value).__name__}")
        self.on_trace_ready = on_trace_ready
        self.include_files = file_globs(include_files, "include_files")
        self.exclude_files = file_globs(exclude_files, "exclude_files")
        if max_depth is not None:
            _arguments.integer("max_depth", max_depth, 1, MAX_DEPTH_LIMIT)
        _arguments.integer("min_duration_ns", min_duration_ns, 0, MIN_DURATION_LIMIT_NS)
        self.max_depth = max_depth
        self.min_duration_ns = min_duration_ns
        # Files of the program launching the profiled code (framescope run: the console script,
        # runpy): never recorded, like framescope's own.
        self._launcher_files: list[str] = []
        # More files of host code than framescope.analysis._host_code knows (the %%framescope cell).
        self._host_files: tuple[str, ...] = ()
        self._host_export: Literal["mark", "drop", "show"] = "mark"  # see export_trace
        self._steps = StepDriver(self, schedule)
        self._trace: _core.Trace | None = None
        self._filtered: tuple[_core.Trace, _core.Trace] | None = None  # (recorded, as read)
        self._running = False
        self._clock: processes.SessionClock | None = None
        self._started_pid = 0

    # -- session -------------------------------------------------------------------------------
    # start, stop, __enter__ and __exit__ are C functions (framescope._core), so that a
    # KeyboardInterrupt, which lands between bytecodes, finds the session and this object
    # consistent: they run no bytecode between the core's start or stop and the profile's
    # bookkeeping (`_running`, `_trace`, set in the same C call). A `with` block is entered with
    # the session running, or raises with nothing running; an interrupt that cuts stop() short
    # leaves the session running and stop() working; a stopped trace is always stored. The
    # Python parts run where an interrupt changes nothing: _start_arguments() before the start,
    # _after_stop() once the trace is stored.
    if TYPE_CHECKING:

        def start(self) -> profile:
            """Starts recording; returns the profile."""

        def stop(self) -> profile:
            """Stops recording and replays the trace (``prof.trace``); returns the profile."""

        def __enter__(self) -> profile: ...

        def __exit__(
            self,
            exc_type: type[BaseException] | None,
            exc: BaseException | None,
            tb: TracebackType | None,
        ) -> None: ...

    else:
        start = _core._profile_start
        stop = _core._profile_stop
        __enter__ = _core._profile_enter
        __exit__ = _core._profile_exit

    @unrecorded
    def _start_arguments(self) -> dict[str, Any]:
        """What _core._start needs, worked out before anything starts."""
        if self._running:
            raise RuntimeError("this profile is already running")
        owner = _session.plugin_profile()
        if owner is not None and owner is not self and _session.is_running(owner):
            raise RuntimeError(
                "framescope: profiler already enabled: this test is profiled by the framescope "
                "pytest plugin (pytest --framescope), and one session records at a time; mark "
                "the test @pytest.mark.no_framescope to run it unprofiled, with its own session")
        self._start_warnings = []
        if self.with_stack:
            label_torch_modules()
            self._backend, why = resolve_backend(self._requested_backend)
            if why:
                self._start_warnings.append(why)
        if self.profile_memory:
            _tracemalloc_guard.install()
        self._clock = processes.session_starting()
        self._started_pid = os.getpid()
        _asyncio_tasks.arm()  # asyncio Tasks' steps as ranges (nothing runs without a loop)
        return {
            "record_shapes": self.record_shapes,
            "profile_memory": self.profile_memory,
            "with_flops": self.with_flops,
            "backend": self._backend,
            "c_calls": self.c_calls,
            "prune_prefixes": prune_prefixes(),
            "native_ids": native_thread_ids() if self.with_stack else None,
            # The frame hook does not see framescope's own start frames return: leave them out.
            "skip_frames_prefix": PACKAGE_DIR if self._backend == "frame_hook" else "",
            "memory_limit": self._memory_limit,
            "keep_newest": self._keep_newest,
            "torch_ops": self.torch_ops,  # attached in __init__; enabled with the session
            "cpu_sample_period_ns": CPU_SAMPLE_PERIOD_NS if self.cpu_time else 0,
            "skip_prefixes": [PACKAGE_DIR],
            "skip_files": self._launcher_files,
            "include_files": self.include_files,
            "exclude_files": self.exclude_files,
            "stream_to": self._stream_to,
        }

    @unrecorded
    def _after_stop(self) -> None:
        _asyncio_tasks.uninstall()
        if _session.end_of_session(self) is not None and self._trace is not None:
            if self._stream_to and ranks.current() is not None and \
                    self._started_pid == os.getpid():  # (not in a fork: the file is the parent's)
                # A rank's streamed file needs its rank and clock data for framescope merge.
                problem = processes.complete_stream(self._trace, self._stream_to)
                if problem is not None:
                    self._start_warnings.append(problem)
            if self.include_files and self.with_stack and not has_python_frames(self._trace):
                self._start_warnings.append(
                    "framescope: include_files matched no Python frame that ran, so the trace "
                    f"has none: {', '.join(self.include_files)} (globs are matched against "
                    "each code object's absolute file name; a relative glob is taken from the "
                    "directory the profile was created in)")
        for warning in self.warnings:
            try:
                print(warning, file=sys.stderr)
            except (OSError, ValueError, AttributeError):  # stderr closed or gone
                break
        if self.on_trace_ready is not None and self._trace is not None:
            self.on_trace_ready(self)

    # Each session of a scheduled profile (the StepDriver calls these: _stepping.SteppedSession).
    def _start_session(self) -> None:
        _core._start(self, **self._start_arguments())

    def _stop_session(self, keep: bool) -> None:
        if _core._stop(self, keep) and keep:
            for warning in self.warnings:
                try:
                    print(warning, file=sys.stderr)
                except (OSError, ValueError, AttributeError):
                    break

    def step(self) -> None:
        """Marks the start of the next step. Without a schedule every step is recorded (as
        torch's default schedule); see ``schedule``."""
        self._steps.step_num += 1

    @property
    def step_num(self) -> int:
        """The current step number (0 before the first step())."""
        return self._steps.step_num

    @unrecorded
    def snapshot(self) -> profile:
        """What the running session recorded so far, as a stopped profile of its own
        (``export()``, ``key_averages()``, ``summary()``...), while the session goes on: with
        ``on_limit="keep_newest"`` the newest events within ``memory_limit``, a flight
        recorder's window. Frames still running are open slices up to now. Copies the event
        buffers (transiently up to ``memory_limit`` more memory).

        Raises:
            RuntimeError: no session of this profile is recording, or it streams (``stream_to``:
                most of its events are in the file already, so a copy of the buffers would not
                be what ran; not supported).
        """
        if not self._running:
            raise RuntimeError("snapshot() needs a recording session (after stop, use the "
                               "profile itself)")
        if self._stream_to:
            raise RuntimeError("snapshot()/dump() are not supported in a streamed session "
                               "(stream_to): its events are in the file; stop the session and "
                               "read it, or record with on_limit='keep_newest' instead")
        copy = profile(profile_memory=self.profile_memory, with_flops=self.with_flops,
                       min_duration_ns=self.min_duration_ns, max_depth=self.max_depth)
        copy._trace = _core._snapshot()
        copy._backend = copy._trace.backend
        return copy

    @unrecorded
    def dump(self, path: str | os.PathLike[str], format: ExportFormat | str | None = None) -> None:
        """Writes what the running session recorded so far to ``path`` without stopping it
        (``snapshot().export(path, format)``): the flight recorder's dump."""
        self.snapshot().export(path, format)


# profile.__new__ takes (*args, **kwargs) (it picks the class of a scheduled profile): without
# this, inspect.signature(profile), help() and IDEs would show that, not __init__'s keywords.
profile.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    list(inspect.signature(profile.__init__).parameters.values())[1:])


def load(path: str | os.PathLike[str], min_duration_ns: int = 0,
         max_depth: int | None = None) -> profile:
    """Reads a trace written by ``profile.save()`` (or streamed with ``stream_to=``) and returns
    a stopped ``profile`` holding it: ``events()``, ``summary()``, ``export()`` work as after a
    session. The file is mapped, not read into memory (a pipe or FIFO is read into memory); if
    it is later truncated or rewritten in place, reading the events raises OSError.

    Raises:
        ValueError: the file is not a complete framescope trace.
        OSError: the file cannot be opened (IsADirectoryError for a directory).
    """
    prof = profile(min_duration_ns=min_duration_ns, max_depth=max_depth)
    prof._trace = _core.Trace.load(fspath(path))
    prof._backend = prof._trace.backend
    return prof


class _ScheduledProfile(profile):
    """A profile with a schedule (``profile(schedule=...)`` makes one): start, stop and step run
    the schedule's transitions in Python (_stepping.StepDriver), each session started and
    stopped by one C call (_core._start/_stop, which keep ``_running``/``_trace`` consistent).
    An interrupt inside ``step()`` may skip that cycle's on_trace_ready; the sessions themselves
    stay consistent."""

    _active = False  # between start() and stop()

    def start(self) -> profile:
        """Starts profiling: records now, or waits for the schedule's first recorded step."""
        if self._active:
            raise RuntimeError("this profile is already running")
        self._steps.start()
        self._active = True
        return self

    def stop(self) -> profile:
        """Stops profiling; a cycle being recorded ends here (and goes to on_trace_ready)."""
        if not self._active:
            raise RuntimeError("this profile is not running")
        self._active = False
        self._steps.stop()
        return self

    def __enter__(self) -> profile:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def step(self) -> None:
        """Marks the start of the next step: the previous step's ``ProfilerStep#N`` range ends,
        sessions start or stop as the schedule says."""
        if not self._active:
            raise RuntimeError("step() is called between start() and stop()")
        self._steps.step()
