"""What a stopped profile offers (``trace``, ``events()``, ``export*()``, ``save()``,
``key_averages()``, ``summary()``, ``merge()``...): the reading half of ``profile``, for a
session's trace or a loaded one."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Literal

from framescope import _arguments, _core
# Imported now, not when summary() first runs: framescope run prints the summary at interpreter
# exit, where creating analysis's NamedTuple (an eval() of generated code) would reset CPython's
# record of an unhandled KeyboardInterrupt, and the run would exit with status 1, not by SIGINT.
from framescope.analysis._summary import summary_table
from framescope.analysis._events import EventList, MemoryEvent
from framescope.analysis._key_averages import KeyAverages
from framescope.export._formats import ExportFormat
from framescope.processes import _ranks as ranks
from framescope.profiler._options import MERGE_OFFSET_LIMIT_NS, PYTHON_ALLOCATOR_DEVICE, fspath
from framescope._unrecorded import unrecorded

if TYPE_CHECKING:
    from framescope.profiler._stepping import StepDriver


class ProfileResults:
    """The reading half of ``profile`` (its base class): everything here reads ``_trace``, the
    trace the session stored at stop (or ``load()`` read)."""

    # Set by profile.__init__ (and the core, for _trace, at stop).
    _trace: _core.Trace | None
    _filtered: tuple[_core.Trace, _core.Trace] | None
    _steps: StepDriver
    _start_warnings: list[str]
    _backend: str
    _metadata: dict[str, str]
    _host_files: tuple[str, ...]
    _host_export: Literal["mark", "drop", "show"]
    min_duration_ns: int
    max_depth: int | None
    profile_memory: bool
    record_shapes: bool
    with_flops: bool
    with_stack: bool
    torch_ops: bool
    unavailable_activities: list[Any]

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
        return [MemoryEvent(*m) for m in self.trace.memory if m[6] != PYTHON_ALLOCATOR_DEVICE]

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

        p = fspath(ranks.expand_rank(path))
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

        export_stacks(self.trace, fspath(ranks.expand_rank(path)), metric)

    @unrecorded
    def export_memory_timeline(self, path: str | os.PathLike[str],
                               device: str | None = None) -> None:
        """Writes the memory over time as torch's ``export_memory_timeline``: ``.json`` /
        ``.json.gz`` (``[times, sizes]``) or ``.html`` (a plot; needs matplotlib). Needs
        ``profile_memory=True``; the bytes are torch's tensor memory with torch ops on, else
        the Python heap's (docs/torch.md)."""
        from framescope.export._torch_exports import export_memory_timeline

        export_memory_timeline(self.trace, fspath(ranks.expand_rank(path)), device,
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
        self.trace.save(fspath(ranks.expand_rank(path)))

    @unrecorded
    def export_html(self, path: str | os.PathLike[str], max_nodes: int | None = None) -> None:
        """Writes a self-contained HTML report: a flame graph per thread and a summary table
        (``max_nodes`` bounds the call paths kept; see framescope.export._report)."""
        from framescope.export import _report as report

        p = fspath(path)
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
    def merge(self, other: ProfileResults | _core.Trace | bytes, offset_ns: int = 0) -> None:
        """Adds the events of another trace (e.g. another process's, as ``serialize()`` bytes).

        Safe to call while other threads export or iterate this trace: they keep reading the
        trace as it was. Raises ValueError for bytes that are not a valid serialized trace."""
        if isinstance(other, ProfileResults):
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
