"""framescope.profile: a profiling session of Python calls and native ranges."""

from __future__ import annotations

import inspect
import os
import site
import sys
import sysconfig
import threading
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal, Sequence

from framescope import _arguments, _core
from framescope.integrations import _asyncio_tasks
from framescope.profiler import _tracemalloc_guard
from framescope.processes import _process_table as processes
from framescope.processes import _ranks as ranks
from framescope.profiler._activities import check_torch_only, resolve_activities
# Imported now, not when summary() first runs: framescope run prints the summary at interpreter
# exit, where creating analysis's NamedTuple (an eval() of generated code) would reset CPython's
# record of an unhandled KeyboardInterrupt, and the run would exit with status 1, not by SIGINT.
from framescope.analysis._summary import summary_table
from framescope.analysis._events import EventList, MemoryEvent
from framescope.analysis._key_averages import KeyAverages
from framescope.profiler._schedule import Schedule
from framescope.profiler._stepping import StepDriver
from framescope.profiler._unrecorded import unrecorded

Backend = Literal["auto", "frame_hook", "sys.monitoring", "setprofile", "fallback"]
ExportFormat = Literal["chrome", "json", "perfetto", "pftrace", "pstats", "prof", "speedscope",
                       "collapsed", "fstrace", "html"]


def _fspath(path: str | os.PathLike[str], name: str = "path") -> str:
    return _arguments.path(path, name)


def _prune_prefixes() -> list[str]:
    """Path prefixes removed from file names: site-packages, the standard library, the cwd."""
    prefixes: list[str] = []
    try:
        prefixes += site.getsitepackages()
    except AttributeError:  # virtualenvs of old pythons
        pass
    user = site.getusersitepackages()
    if isinstance(user, str):
        prefixes.append(user)
    paths = sysconfig.get_paths()
    prefixes += [paths.get("stdlib", ""), paths.get("platstdlib", "")]
    try:
        prefixes.append(os.getcwd())
    except OSError:  # the current directory was deleted: its files keep their whole names
        pass
    return sorted({os.path.realpath(p) for p in prefixes if p} | {p for p in prefixes if p}, key=len, reverse=True)


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

#: Bounds of the trace filters: depths are counted in 32 bits, durations in signed 64-bit ns.
MAX_DEPTH_LIMIT = 2**32 - 1
MIN_DURATION_LIMIT_NS = 2**63 - 1
#: merge()'s offset: times stay within the core's 62-bit range (|offset| < 2**61).
MERGE_OFFSET_LIMIT_NS = 2**61


# In a forked child, threading keeps the parent's OS id for the thread that forked (3.10-3.13):
# the right one is read once in the child.
_forked_native_ids: dict[int, int] = {}


def _note_forked_thread() -> None:
    _forked_native_ids.clear()
    _forked_native_ids[threading.get_ident()] = threading.get_native_id()


os.register_at_fork(after_in_child=_note_forked_thread)


def _native_thread_ids() -> dict[int, int]:
    """Thread ident -> OS thread id of the threads threading knows (pthread ids are reused when a
    thread exits mid-session, OS ids are not). The frames running on every thread are read by
    the core itself when the session starts, with no Python code in between."""
    ids = {t.ident: t.native_id for t in threading.enumerate() if t.ident and t.native_id}
    ids.update((i, n) for i, n in _forked_native_ids.items() if i in ids)
    return ids


#: MemorySample device of Python's allocations (counted with profile_memory, trace.h).
_PYTHON_ALLOCATOR_DEVICE = -2

#: How often a session with ``cpu_time=True`` reads each recording thread's CPU clock.
#: A wake-up costs the sampler thread 10-20 us of CPU on the loaded KVM machines measured
#: (bench/analysis_overhead.py), and each one can preempt a recording thread when the cores are
#: busy: 4 ms keeps the direct cost under 0.5% of a core (1 ms measured 2-3.5% of the recording
#: thread's CPU time there, 2 ms 2-7% with the interference).
CPU_SAMPLE_PERIOD_NS = 4_000_000
# The profile the pytest plugin (framescope.integrations.pytest_plugin) records the running test with, if
# any: a test starting a session of its own is told why it cannot, and how to opt out.
_plugin_profile: profile | None = None


def _has_python_frames(trace: _core.Trace) -> bool:
    """True when ``trace`` names a Python function (symbols with a file: one per code object
    recorded, so few)."""
    return any(trace.symbol(i)[1] for i in range(trace.symbol_count))


def _file_globs(patterns: Sequence[str | os.PathLike[str]] | str | None, what: str) -> list[str]:
    """include_files/exclude_files as absolute fnmatch globs (see profile)."""
    if patterns is None:
        return []
    out: list[str] = []
    for text in _arguments.glob_list(what, patterns):
        if text.startswith("<"):  # <string>, <frozen ...>: compiled from no file
            out.append(text)
        elif not any(c in text for c in "*?["):
            path = os.path.normpath(os.path.join(_cwd_for(what, text), text))
            out.append(path.rstrip(os.sep) + os.sep + "*" if os.path.isdir(path) else path)
        elif os.path.isabs(text) or text.startswith("*"):
            out.append(text)
        else:
            out.append(os.path.join(_cwd_for(what, text), text))
    return out


def _cwd_for(what: str, glob: str) -> str:
    """The current directory, which a relative glob is taken from ("" for an absolute one)."""
    if os.path.isabs(glob):
        return ""
    try:
        return os.getcwd()
    except OSError as exc:  # the directory was deleted (or cannot be read)
        raise ValueError(f"{what}: the relative glob {glob!r} is taken from the current "
                         f"directory, which is gone ({exc.strerror}): give an absolute one") \
            from None


_FALLBACK_BACKEND = "sys.monitoring" if sys.version_info >= (3, 12) else "setprofile"


def _check_backend(backend: str) -> str:
    if backend in ("auto", "frame_hook", "fallback", "sys.monitoring", "setprofile"):
        return backend
    raise ValueError(
        f"unknown backend {backend!r}: expected 'auto', 'frame_hook', 'sys.monitoring', "
        "'setprofile' or 'fallback'"
    )


def _resolve_backend(backend: str) -> tuple[str, str | None]:
    """The backend a session started now uses, and why "auto" chose the fallback (or None).

    "auto" is the frame hook unless another tool's PEP 523 function is installed: chained to,
    that tool could take the hook back at any time (Pyjion, for one, restores CPython's default)
    and every later Python call would be lost, so "auto" leaves the hook to it and records with the
    fallback instead. "frame_hook" chains to it regardless."""
    if backend == "auto":
        owner = _core._foreign_frame_hook()
        if not owner:
            return "frame_hook", None
        return _FALLBACK_BACKEND, (
            f"framescope: another tool's PEP 523 frame hook ({owner}) is installed; Python calls "
            f"are recorded with {_FALLBACK_BACKEND} instead (backend='frame_hook' chains to it)"
        )
    if backend == "fallback":
        return _FALLBACK_BACKEND, None
    return backend, None


_MIN_MEMORY_LIMIT = 256 << 10  # one event chunk
_BYTE_UNITS = {
    "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}
_BYTE_FORMS = "an int of bytes or a string such as '512MiB', '1.5GB', '100000000' (units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"


def parse_memory_limit(limit: object) -> int:
    """Bytes of a ``memory_limit``: an int, or a number with a unit ("1.5GB", "512 MiB").

    Raises TypeError for other types and ValueError, naming the accepted forms, for text that is
    not such a size or a size below one event chunk (256 KiB)."""
    if isinstance(limit, bool) or not isinstance(limit, (int, str)):
        raise TypeError(f"memory_limit must be {_BYTE_FORMS}, not {type(limit).__name__}")
    if isinstance(limit, int):
        value = limit
    else:
        text = limit.strip().lower().replace(" ", "").replace("_", "")
        number, unit = text, "b"
        for suffix in sorted(_BYTE_UNITS, key=len, reverse=True):
            if text.endswith(suffix) and text[: -len(suffix)]:
                number, unit = text[: -len(suffix)], suffix
                break
        try:
            amount = float(number) if any(c in number for c in ".e") else int(number)
            value = int(amount * _BYTE_UNITS[unit])
        except (ValueError, OverflowError):
            raise ValueError(f"memory_limit {limit!r} is not a size: give {_BYTE_FORMS}") from None
    if value < _MIN_MEMORY_LIMIT:
        raise ValueError(f"memory_limit must be at least 256KiB (one event chunk), not {limit!r}")
    if value >= 1 << 63:
        raise ValueError(f"memory_limit {limit!r} is too large")
    return value


def _label_torch_modules() -> None:
    torch = sys.modules.get("torch")
    if torch is None:
        return
    try:
        call = torch.nn.Module.__call__
    except AttributeError:
        return
    code = getattr(call, "__code__", None)
    if code is not None:
        _core.label_calls(code, "nn.Module", per_instance=True)  # torch's "Linear_0", "Linear_1"


def label_calls(cls: type, label: str | None = None) -> None:
    """Show calls of instances of ``cls`` as ``"<label>: <instance class>"`` slices, with the
    frames of the call nested under them (as torch does for ``nn.Module``).

    Raises:
        TypeError: ``cls`` is not a class (an instance, say), or has no Python ``__call__``;
            ``label`` is not a str.
        ValueError: ``label`` is empty, or has a NUL character or a lone surrogate.
    """
    if not isinstance(cls, type):
        raise TypeError(f"label_calls(): cls must be a class, not {type(cls).__name__} "
                        f"(label_calls(type(obj)) labels the calls of obj's class)")
    if label is not None:
        _arguments.text("label_calls(): label", label)
    call = getattr(cls, "__call__", None)
    code = getattr(call, "__code__", None)
    if code is None:
        raise TypeError(f"{cls!r} has no Python-level __call__ to label")
    _core.label_calls(code, label or cls.__name__)


class profile:
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
            torch's profiler records them (framescope._torch_memory, docs/torch.md).
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
            thread's CPU clock every 4 ms (the recording threads pay nothing; the sampler uses
            about 0.5% of a core with one recording thread and about 1% with 64, as measured in
            bench/README.md); readers interpolate between readings (``key_averages()``'s
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
        # A schedule makes start/stop/step Python code driving several sessions (stepping.py);
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
        # (framescope._activities.check_torch_only says what each means here):
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
        self._stream_to = (_fspath(ranks.expand_rank(stream_to), "stream_to")
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
        self._requested_backend = _check_backend(backend) if with_stack else "none"
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
        self.include_files = _file_globs(include_files, "include_files")
        self.exclude_files = _file_globs(exclude_files, "exclude_files")
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
        owner = _plugin_profile
        if owner is not None and owner is not self and owner._running:
            raise RuntimeError(
                "framescope: profiler already enabled: this test is profiled by the framescope "
                "pytest plugin (pytest --framescope), and one session records at a time; mark "
                "the test @pytest.mark.no_framescope to run it unprofiled, with its own session")
        self._start_warnings = []
        if self.with_stack:
            _label_torch_modules()
            self._backend, why = _resolve_backend(self._requested_backend)
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
            "prune_prefixes": _prune_prefixes(),
            "native_ids": _native_thread_ids() if self.with_stack else None,
            # The frame hook does not see framescope's own start frames return: leave them out.
            "skip_frames_prefix": _PACKAGE_DIR if self._backend == "frame_hook" else "",
            "memory_limit": self._memory_limit,
            "keep_newest": self._keep_newest,
            "torch_ops": self.torch_ops,  # attached in __init__; enabled with the session
            "cpu_sample_period_ns": CPU_SAMPLE_PERIOD_NS if self.cpu_time else 0,
            "skip_prefixes": [_PACKAGE_DIR],
            "skip_files": self._launcher_files,
            "include_files": self.include_files,
            "exclude_files": self.exclude_files,
            "stream_to": self._stream_to,
        }

    @unrecorded
    def _after_stop(self) -> None:
        _asyncio_tasks.uninstall()
        if self._trace is not None:  # names this process in its trace (framescope.processes._process_table)
            processes.session_stopped(self._trace, self._clock)
            if self._stream_to and ranks.current() is not None and \
                    self._started_pid == os.getpid():  # (not in a fork: the file is the parent's)
                # A rank's streamed file needs its rank and clock data for framescope merge.
                problem = processes.complete_stream(self._trace, self._stream_to)
                if problem is not None:
                    self._start_warnings.append(problem)
            if self.include_files and self.with_stack and not _has_python_frames(self._trace):
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

    # -- results -------------------------------------------------------------------------------
    @property
    def trace(self) -> _core.Trace:
        """The replayed trace (after stop), as read through ``min_duration_ns``/``max_depth``."""
        recorded = self._trace
        if recorded is None:
            if self._steps.record_steps and self._steps.stopped:
                raise RuntimeError("no trace: this profile's schedule recorded no step (it "
                                   "stopped during wait or warmup steps)")
            raise RuntimeError("no trace yet: stop the profile first")
        if not (self.min_duration_ns or self.max_depth):
            return recorded
        if self._filtered is None or self._filtered[0] is not recorded:
            view = _core._with_filter(recorded, self.min_duration_ns, self.max_depth or 0)
            self._filtered = (recorded, view)
        return self._filtered[1]

    @property
    def backend(self) -> str:
        """Where Python calls came from: "frame_hook", "sys.monitoring", "setprofile", or
        "frame_hook->sys.monitoring" when deep recursion moved the session to the fallback."""
        return self.trace.backend if self._trace is not None else self._backend

    @property
    def warnings(self) -> list[str]:
        """What went differently than asked (backend choice, limits, lost hooks), in order."""
        return self._start_warnings + list(self.trace.warnings)

    @unrecorded
    def events(self) -> EventList:
        """Every event (Python calls, ranges, builtins, marks) as a lazy sequence."""
        return EventList(self.trace)

    @unrecorded
    def memory_events(self) -> list[MemoryEvent]:
        """The ``record_memory`` samples of the session (``profile_memory=True``), by time."""
        return [MemoryEvent(*m) for m in self.trace.memory if m[6] != _PYTHON_ALLOCATOR_DEVICE]

    @unrecorded
    def export_chrome_trace(self, path: str | os.PathLike[str],
                            use_python_export: bool = False) -> None:
        """Writes a Chrome trace JSON file (open it in ui.perfetto.dev or chrome://tracing);
        gzip-compressed when ``path`` ends with ``.gz``. It is the file torch.profiler's
        readers take (torch-tb-profiler, HTA): torch's top-level members (``traceName``,
        ``distributedInfo``, ``add_metadata`` keys...), baseTimeNanoseconds in Unix time, the
        ``[memory]`` instants with ``profile_memory`` (torch's tensor memory with torch ops on,
        else the Python heap's: docs/torch.md); ``export()``
        writes the plain Chrome JSON. ``use_python_export`` is accepted for torch.profiler's
        callers (its ``tensorboard_trace_handler`` passes it) and changes nothing: the writer
        is always the native one."""
        del use_python_export
        from framescope.export import _torch_json

        p = _fspath(ranks.expand_rank(path))
        options = {"with_stack": self.with_stack, "profile_memory": self.profile_memory,
                   "record_shapes": self.record_shapes,
                   "torch_memory": self.profile_memory and self.torch_ops}
        from framescope.export._formats import host_marked

        trace = host_marked(self.trace, "chrome", self._host_files, self._host_export)
        _torch_json.export_chrome(trace, p, options, self._metadata, self.unavailable_activities)

    def add_metadata(self, key: str, value: str) -> None:
        """Adds ``key`` with the string ``value`` at the top level of the Chrome JSON that
        ``export_chrome_trace`` (and so ``tensorboard_trace_handler``) writes, as torch's."""
        from framescope.export._torch_json import metadata_value

        self._metadata[str(key)] = metadata_value(value)

    def add_metadata_json(self, key: str, value: str) -> None:
        """Adds ``key`` with ``value``, JSON text (ValueError when it is not), at the top level
        of the Chrome JSON, as torch's."""
        from framescope.export._torch_json import metadata_json

        self._metadata[str(key)] = metadata_json(key, value)

    def preset_metadata_json(self, key: str, value: str) -> None:
        """torch's name for adding JSON metadata before the profile starts: the same as
        ``add_metadata_json`` here (the keys are written at export either way)."""
        self.add_metadata_json(key, value)

    @unrecorded
    def export_stacks(self, path: str | os.PathLike[str],
                      metric: str = "self_cpu_time_total") -> None:
        """Writes collapsed stacks (``outer;...;inner <µs>``: Python frames, ranges and torch
        ops with their self time), as torch's ``export_stacks`` (flamegraph.pl, speedscope)."""
        from framescope.export._torch_exports import export_stacks

        export_stacks(self.trace, _fspath(ranks.expand_rank(path)), metric)

    @unrecorded
    def export_memory_timeline(self, path: str | os.PathLike[str],
                               device: str | None = None) -> None:
        """Writes the memory over time as torch's ``export_memory_timeline``: ``.json`` /
        ``.json.gz`` (``[times, sizes]``) or ``.html`` (a plot; needs matplotlib). Needs
        ``profile_memory=True``; the bytes are torch's tensor memory with torch ops on, else
        the Python heap's (docs/torch.md)."""
        from framescope.export._torch_exports import export_memory_timeline

        export_memory_timeline(self.trace, _fspath(ranks.expand_rank(path)), device,
                               self.profile_memory)

    @unrecorded
    def export_pstats(self, path: str | os.PathLike[str]) -> None:
        """Writes a cProfile-compatible stats file (``pstats.Stats(path)`` loads it)."""
        self.export(path, format="pstats")

    @unrecorded
    def export(self, path: str | os.PathLike[str], format: ExportFormat | str | None = None) -> None:
        """Writes the trace to ``path``, in ``format`` or else the one its extension names:
        ``.json`` (Chrome JSON), ``.pftrace`` (Perfetto protobuf), ``.speedscope.json``,
        ``.collapsed`` (collapsed stacks), ``.prof``/``.pstats`` (cProfile stats), ``.fstrace``
        (framescope's own, as ``save()``), ``.html`` (the report page: a flame graph per thread
        and a summary table, framescope.export._report); ``.gz`` after a Chrome JSON, Perfetto,
        speedscope or collapsed name compresses it (pstats, ``.fstrace`` and HTML are never
        compressed: a ``.gz`` name for them raises ValueError).
        ``{rank}`` in the path becomes the rank of a multi-process job (framescope.processes._ranks; 0
        outside a launcher).

        The file is replaced atomically (a failed write leaves an older one intact). Exports
        longer than about a second show progress on stderr when it is a terminal.

        Raises:
            ValueError: unknown format or extension, or a path with a NUL character.
            OSError: the file cannot be written (with errno and filename).
        """
        from framescope.export._formats import export_trace

        export_trace(self.trace, ranks.expand_rank(path), format, extra_host=self._host_files,
                     host=self._host_export)

    @unrecorded
    def save(self, path: str | os.PathLike[str]) -> None:
        """Writes the trace in framescope's own form (``.fstrace``: the ``serialize()`` bytes),
        which ``framescope.load(path)`` reads back and ``framescope convert`` turns into any
        format (``framescope merge`` combines the traces of several ranks: ``{rank}`` in the path
        becomes this process's rank)."""
        self.trace.save(_fspath(ranks.expand_rank(path)))

    @unrecorded
    def export_html(self, path: str | os.PathLike[str], max_nodes: int | None = None) -> None:
        """Writes a self-contained HTML report: a flame graph per thread and a summary table
        (``max_nodes`` bounds the call paths kept; see framescope.export._report)."""
        from framescope.export import _report as report

        p = _fspath(path)
        if max_nodes is not None:
            _arguments.integer("export_html(): max_nodes", max_nodes, 1, 2**31 - 1)
        data = report.from_trace(self._host_folded(), os.path.basename(p))
        report.write(data, p, max_nodes=max_nodes or report.DEFAULT_MAX_NODES)

    def _host_folded(self) -> _core.Trace:
        """The trace with every host frame (framescope.analysis._host_code) named "[host]"."""
        from framescope.analysis import _host_code

        return _host_code.host_view(self.trace, True, self._host_files)

    @unrecorded
    def stats(self) -> list[tuple[str, int, int, int]]:
        """(name, calls, total ns, self ns) per function or range, by self time."""
        return [(n, c, t, s) for n, c, t, s, *_ in self.trace.stats()]

    @unrecorded
    def key_averages(
        self, group_by_input_shape: bool = False, group_by_stack_n: int = 0,
        show_host: bool = False,
    ) -> KeyAverages:
        """Averages of every function, range and builtin, as ``torch.profiler``'s
        ``key_averages()``: one FunctionEventAvg per name (and input shapes, and the innermost
        ``group_by_stack_n`` Python frames that called it, when asked), with torch's attribute
        names and units (µs, bytes) plus ``on_cpu_time_total`` / ``self_on_cpu_time_total``.
        ``.table(sort_by=..., row_limit=...)`` prints torch's table. Host code (the Jupyter
        kernel, pytest, framescope; framescope.analysis._host_code) is one ``[host]`` entry unless
        ``show_host``."""
        from framescope.analysis._key_averages import KeyAverages, key_averages

        if self._trace is None and self._steps.record_steps and self._steps.stopped:
            # As torch.profiler: a schedule stopped before any active step averages nothing.
            return KeyAverages(profile_memory=self.profile_memory, with_flops=self.with_flops)
        return key_averages(
            self.trace if show_host else self._host_folded(),
            group_by_input_shape=group_by_input_shape,
            group_by_stack_n=group_by_stack_n,
            profile_memory=self.profile_memory,
            with_flops=self.with_flops,
        )

    @unrecorded
    def summary(
        self,
        limit: int = 20,
        sort_by: Literal["self", "total", "calls", "on_cpu", "memory"] = "self",
        by_thread: bool = False,
        show_host: bool = False,
        by_task: bool = False,
    ) -> str:
        """A table of the top functions and ranges by self time, total time, call count, self
        time on CPU (``"on_cpu"``) or bytes allocated (``"memory"``, with ``profile_memory``),
        over all threads or one table per thread (``by_thread``).
        Percentages are of the time recorded on the threads (never above 100%); the first line
        says what was measured (wall time or time on CPU). Ranges ended on another thread than
        their own are async spans, listed under the table with their calls and total time (no
        self time: their thread's other slices hold it; docs/tracing.md). Host code (the Jupyter
        kernel, pytest, framescope; framescope.analysis._host_code) is left out, its total said under
        the table, unless ``show_host``. ``by_task``: one row per asyncio Task instead (its
        steps, the time it ran and awaited, its hottest functions; framescope.integrations._asyncio_tasks)."""
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise TypeError(f"summary(): limit must be an int, not {type(limit).__name__}")
        by_thread = _arguments.flag("summary(): by_thread", by_thread)
        show_host = _arguments.flag("summary(): show_host", show_host)
        by_task = _arguments.flag("summary(): by_task", by_task)
        if by_task:
            from framescope.integrations._asyncio_tracks import by_task_table

            return by_task_table(self.trace, limit=limit)
        return summary_table(self.trace, limit=limit, sort_by=sort_by, by_thread=by_thread,
                             show_host=show_host, extra_host=self._host_files)

    @unrecorded
    def merge(self, other: profile | _core.Trace | bytes, offset_ns: int = 0) -> None:
        """Adds the events of another trace (e.g. another process's, as ``serialize()`` bytes).

        Safe to call while other threads export or iterate this trace: they keep reading the
        trace as it was. Raises ValueError for bytes that are not a valid serialized trace."""
        if isinstance(other, profile):
            other = other.trace
        elif isinstance(other, (bytes, bytearray, memoryview)):
            other = _core.Trace.deserialize(bytes(other))
        elif not isinstance(other, _core.Trace):
            raise TypeError(f"merge() takes a profile, a Trace or bytes, not {type(other).__name__}")
        _arguments.integer("merge(): offset_ns", offset_ns, -MERGE_OFFSET_LIMIT_NS + 1,
                           MERGE_OFFSET_LIMIT_NS - 1)
        self.trace.merge(other, offset_ns)

    @unrecorded
    def serialize(self) -> bytes:
        """The trace in framescope's compact binary form (for merge() in another process)."""
        return self.trace.serialize()


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
    prof._trace = _core.Trace.load(_fspath(path))
    prof._backend = prof._trace.backend
    return prof


class _ScheduledProfile(profile):
    """A profile with a schedule (``profile(schedule=...)`` makes one): start, stop and step run
    the schedule's transitions in Python (stepping.StepDriver), each session started and
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

    def _start_session(self) -> None:
        _core._start(self, **self._start_arguments())

    def _stop_session(self, keep: bool) -> None:
        if _core._stop(self, keep) and keep:
            for warning in self.warnings:
                try:
                    print(warning, file=sys.stderr)
                except (OSError, ValueError, AttributeError):
                    break
