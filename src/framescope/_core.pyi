"""Type stubs of framescope._core, the C++ extension (sessions, ranges, traces, eval_frame API)."""

from __future__ import annotations

from types import CodeType, FrameType, TracebackType
from typing import Any, Callable, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])
_T = TypeVar("_T")

__version__: str  # framescope's version (src/framescope/_version.py, through CMake)

# --- sessions and ranges

def _start(
    owner: object,
    record_shapes: bool,
    profile_memory: bool,
    with_flops: bool,
    backend: str,
    c_calls: bool,
    prune_prefixes: list[str],
    native_ids: dict[int, int] | None,
    memory_limit: int,
    keep_newest: bool,
    propagated_only: bool = False,
    torch_ops: bool = False,
    cpu_sample_period_ns: int = 0,
    skip_prefixes: list[str] = ...,
    skip_files: list[str] = ...,
    include_files: list[str] = ...,
    exclude_files: list[str] = ...,
    skip_frames_prefix: str = "",
    stream_to: str = "",
) -> None:
    """Starts the session for ``owner`` (a profile) and sets ``owner._running = True`` and
    ``owner._trace = None`` in the same call (RuntimeError if a session runs, ValueError for a
    bad backend, OSError when the ``stream_to`` file cannot be created). The frames running on
    every thread become open slices (``native_ids``: thread ident -> OS id); with the frame hook,
    the caller's innermost frames whose file starts with ``skip_frames_prefix`` (framescope's
    own) are left out. ``cpu_sample_period_ns`` > 0 samples every recording thread's CPU clock
    that often; the skip/include/exclude lists choose the files whose frames are recorded."""

def _stop(owner: object, keep: bool = True) -> bool:
    """Stops the session ``owner`` started; its Trace (None unless ``keep``) goes to
    ``owner._trace`` and ``owner._running`` becomes False, in the same call (a streamed session:
    its file is completed and mapped; OSError when streaming failed). False, changing nothing,
    when ``owner`` does not own the running session."""


def _call_unrecorded(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """fn(*args, **kwargs) with the calling thread not recording (nested calls are counted)."""
def _session_owner() -> object | None:
    """The profile object whose session runs, or None."""

# framescope.profile's start, stop, __enter__ and __exit__ (instance methods written in C).
def _profile_start(self: Any) -> Any: ...
def _profile_enter(self: Any) -> Any: ...
def _profile_stop(self: Any) -> Any: ...
def _profile_exit(self: Any, exc_type: Any, exc: Any, tb: Any) -> None: ...

def _rearm_memory_hooks() -> bool:
    """During a profile_memory session: puts framescope's counting allocator wrappers back when
    another tool unlinked them (tracemalloc.stop()); returns whether it did."""

def _allocators_wrapped() -> tuple[bool, bool]:
    """(MEM, OBJ): whether framescope's counting wrapper is the installed allocator (tests)."""

def _snapshot() -> Trace:
    """The running session's events so far as a Trace; the session goes on recording
    (RuntimeError when none runs)."""

def is_enabled() -> bool:
    """True while a framescope session records."""

def _backend() -> str: ...
def _foreign_frame_hook() -> str:
    """The PEP 523 function another tool installed (described), or '' when none is."""
def _set_stack_segment_budget(bytes: int) -> int:
    """Sets how much C stack (bytes, per thread) the frame hook may add in segments for deep
    recursion (0: none); returns the previous budget."""
def _stack_segments_supported() -> bool:
    """True when the frame hook can continue deep recursion on stack segments here."""
def mark(name: str) -> None:
    """Records an instant event on the calling thread; no-op without a session. TypeError for a
    name that is not a str; lone surrogates are stored as U+FFFD."""

def record_memory(
    address: int, bytes: int, total_allocated: int, total_reserved: int = 0, device: int = -1
) -> None:
    """Records a memory sample when profile_memory is on, as torch's memory profiler reports
    one: ``bytes`` allocated (> 0) or freed (< 0) at ``address``, the allocator's totals after it
    (``total_allocated``, ``total_reserved``) and the device (-1: CPU). All ints; a wrong call
    raises a TypeError showing this signature."""

def label_calls(code: CodeType, label: str, per_instance: bool = False) -> None:
    """Shows calls of ``code`` as ``"<label>: <class of first argument>"``; ``per_instance``:
    ``"<label>: <class>_<n>"``, n numbering the class's instances in the session (as torch
    names nn.Module calls; ``label`` is then per instance for every code labelled with it)."""

class record_function:
    """A user range: a context manager, or a decorator when called with a function."""

    def __init__(self, name: str, args: str | None = None) -> None: ...
    @property
    def name(self) -> str: ...
    @property
    def args(self) -> str | None: ...
    def __enter__(self) -> record_function: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...
    def __call__(self, fn: _F) -> _F:
        """Wraps ``fn`` (functools.wraps-style, binds as a method) so each call is a range."""

class Event:
    """One event: a Python call, a range, a builtin call or a mark (``duration_ns == -1``)."""

    @property
    def index(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def category(self) -> str: ...
    @property
    def thread(self) -> int: ...
    @property
    def start_ns(self) -> int: ...
    @property
    def duration_ns(self) -> int: ...
    @property
    def end_ns(self) -> int: ...
    @property
    def parent(self) -> int | None: ...
    @property
    def depth(self) -> int: ...
    @property
    def open_at_stop(self) -> bool: ...

class _EventIterator:
    def __iter__(self) -> _EventIterator: ...
    def __next__(self) -> Event: ...

class Trace:
    """A stored trace: the recorded events, replayed on demand. Readers may run on several
    threads at once; merge() swaps in a merged copy."""

    def __len__(self) -> int: ...
    def event(self, i: int) -> tuple[str, str, int, int, int, int, int, int, int]:
        """(name, category, thread, start ns, duration ns (-1: instant), parent (-1: none),
        depth, symbol, category id)."""

    def event_object(self, i: int) -> Event:
        """Event ``i`` (IndexError past the end), through an index built on first use."""

    def iter_events(self, start: int = 0, stop: int | None = None) -> _EventIterator:
        """Events with index in [start, stop), in index order, read by a replay as they are
        iterated (bounds clamped to 0..len; stop None: to the end)."""

    def find_events(self, name: str) -> list[Event]:
        """The events with this exact name, in index order."""

    def children(self, parent: int) -> list[Event]:
        """The direct children of the event with index ``parent``, in index order."""
    def symbol(self, s: int) -> tuple[str, str, int, str]:
        """(name, file, line, function) of symbol ``s``."""

    @property
    def symbol_count(self) -> int: ...
    def find(self, name: str) -> list[int]:
        """Indices of the events with this exact name."""

    def detail(self, i: int) -> tuple[int, int, int, list[Any]] | None:
        """(handle, sequence number, flops, inputs) of a range that recorded them."""

    @property
    def threads(self) -> list[tuple[int, int, int, str]]:
        """(pid, OS thread id, pthread id, name) per recorded thread, by thread index."""

    def stats(self) -> list[tuple[str, int, int, int, str, int, str]]:
        """(name, calls, total ns, self ns, file, line, function) per symbol, by self time."""

    def export_chrome_trace(self, path: str) -> None: ...
    def export(self, path: str, format: str | None = None, progress: bool = True) -> None:
        """Writes ``format`` (from the extension when None); OSError/ValueError on failure."""

    def _export_chrome(self, path: str, extra_members: str, wall_offset_ns: int,
                       progress: bool = True, python_heap_instants: bool = True) -> None:
        """Chrome JSON for torch's readers: ``extra_members`` (``"key":value,`` members) first
        in the object, Python heap ``[memory]`` instants (unless ``python_heap_instants`` is
        false: torch's tensor memory is in the trace), ``wall_offset_ns`` added to
        baseTimeNanoseconds."""

    def save(self, path: str) -> None: ...
    @staticmethod
    def load(path: str) -> Trace:
        """Maps a .fstrace; ValueError when malformed, OSError when it cannot be opened."""

    def serialize(self) -> bytes: ...
    @staticmethod
    def deserialize(data: bytes) -> Trace:
        """Raises ValueError for data that is not a serialized trace."""

    def merge(self, other: Trace, offset_ns: int = 0) -> None: ...
    # process table and clocks (cpp/python/bindings/bindings_processes.cpp; used by
    # framescope.processes._process_table, framescope.processes._merge and framescope.processes._follow)
    def _processes(self) -> list[tuple[int, str, list[str], int, str]]:
        """(pid, name, labels, sort index, metadata JSON) per process entry."""
    def _set_process(self, pid: int, name: str, labels: list[str], sort_index: int,
                     metadata: str) -> None:
        """Adds or replaces the entry of ``pid`` (copy-on-write, as merge())."""
    def _shift_times(self, offset_ns: int) -> None:
        """Shifts every time by ``offset_ns`` (ValueError when |offset| >= 2**61)."""
    def _merge_separate_pids(self, other: Trace, offset_ns: int) -> None:
        """merge() that gives ``other``'s pids and tids that clash with this trace's fresh
        numbers (traces of other hosts)."""
    @property
    def warnings(self) -> list[str]: ...
    @property
    def dropped_events(self) -> int: ...
    @property
    def recorded_events(self) -> int: ...
    @property
    def slot_bytes(self) -> int: ...
    @property
    def start_ns(self) -> int: ...
    @property
    def stop_ns(self) -> int: ...
    @property
    def backend(self) -> str: ...
    @property
    def memory(self) -> list[tuple[int, int, int, int, int, int, int]]:
        """(time ns, thread, address, bytes, total allocated, total reserved, device)."""


# --- analysis (cpp/analysis, cpp/python/bindings/bindings_analysis.cpp)

_KeyAverageRow = tuple[
    str, str, int | None, str, list[str], int, int, int, int | None, int | None, int, int, int,
    bool, bool, str, int,
]

def export_formats() -> list[tuple[str, str, tuple[str, ...], tuple[str, ...]]]:
    """The native writers' formats: (name, default extension, file endings, other names)."""
    ...

def _with_filter(trace: Trace, min_duration_ns: int = 0, max_depth: int = 0) -> Trace:
    """The same events read without slices shorter than ``min_duration_ns`` or deeper than
    ``max_depth`` Python frames (0: no limit); ValueError for a negative duration."""

def _with_host(trace: Trace, classes: bytes, fold: bool, drop: bool = False) -> Trace:
    """The same events with host code marked (category "host" in Chrome JSON and Perfetto),
    with ``fold`` every host frame named "[host]", with ``drop`` host frames left out (what
    they enclose kept, re-parented); ``classes``: one byte per symbol (0 the
    program's, 1 host, 2 the class of its caller; see framescope.analysis._host_code). ValueError for a
    byte above 2."""

def _key_averages(
    trace: Trace,
    group_by_input_shape: bool = False,
    group_by_stack_n: int = 0,
    group_by_thread: bool = False,
    merge_nested_same_name: bool = False,
) -> tuple[list[_KeyAverageRow], list[tuple[int, int | None]], bool, bool]:
    """Per-key totals of one replay (merge_nested_same_name: torch's removal of a range nested
    alone in a range of the same name): rows of (name, category, thread, input shapes, stack,
    count, total ns, self ns, on-CPU total ns, on-CPU self ns, memory total, memory self, flops,
    is_async, top_level, file, line); per thread (self ns, on-CPU self ns); has_cpu; has_memory."""

# --- tables (cpp/export/columnar_batches.cpp, cpp/python/bindings/bindings_tables.cpp)

#: Row kinds of the Parquet export, by kind number: python, c, op, range, instant, scope, memory.
_ROW_KINDS: list[str]

def _column_batches(trace: Trace, sink: Callable[[dict[str, Any]], object],
                    batch_rows: int = 1048576, offset_ns: int = 0) -> None:
    """Replays ``trace`` into batches of ``batch_rows`` rows, calling ``sink`` with each: a
    dict of "rows", per-row columns (buffer-protocol arrays over the batch's own memory: "id",
    "parent_id", "start_ns", "dur_ns", "self_ns", "cpu_ns", "cpu_self_ns", "alloc_bytes",
    "alloc_self_bytes", "flops" int64; "thread", "name" uint32; "depth", "detail" int32;
    "kind" uint8; "is_async", "recursive", "host" bit-packed as Arrow booleans), "symbols" (names, files, lines, functions of the
    batch's name numbers), "args" (JSON per detail number), "any_cpu_known",
    "any_cpu_unknown". ``offset_ns`` is added to every start. What ``sink`` raises ends the
    replay and propagates."""

def _noop_eval_hook(enable: bool) -> None:
    """Installs (or removes) a PEP 523 hook that does nothing: the limit of any frame-hook tracer
    (bench/tracer_overhead.py)."""

def _clock_floor_eval_hook(enable: bool) -> None:
    """Installs (or removes) a PEP 523 hook that reads the clock at each call's entry and exit
    and stores two 16-byte events in a small ring: the limit of any tracer that times every call
    (bench/tracer_overhead.py)."""

def _chunk_pool_stats() -> dict[str, int]:
    """Full event chunks this process mapped ahead ("mapped_ahead": the pool's refill thread, a
    session's start) and on demand ("mapped_on_demand": by a recording thread that found none
    free), and the free chunks now ("free_chunks"). For benchmarks (bench/self_time_stalls.py)."""

def _save_on_sigterm(callback: Callable[[], bool], /) -> bool:
    """On SIGTERM, calls callback() from a thread of framescope's (which records nothing) and
    ends the process by SIGTERM when it returns true; False when SIGTERM already has a handler
    (cpp/python/integrations/term_signal.cpp, used by framescope.processes._follow)."""

# --- asyncio (cpp/python/integrations/asyncio_steps.cpp; used by framescope.integrations._asyncio_tasks)

def _asyncio_steps_install(handle_class: type, task_types: tuple[type, ...]) -> None:
    """Replaces handle_class._run: a callback bound to an instance of task_types (1 to 4
    classes) runs inside the Task's range. Idempotent."""
def _asyncio_task_name(task: Any, /) -> str:
    """The name of a Task's range, 'asyncio.Task <name> #<n>' (<n> unique in the process), made
    at its first use for the Task (weakly referenced; forgotten at uninstall)."""
def _asyncio_steps_uninstall(handle_class: type) -> None:
    """Puts handle_class._run back and forgets the Tasks."""

# --- torch ops (cpp/python/integrations/torch_ops.cpp; used by framescope.integrations._torch_ops)

def _torch_ops_attach() -> tuple[str, bool]:
    """Finds torch's RecordFunction functions in the loaded libtorch: (library path, whether
    input dtypes are available). RuntimeError when torch is not loaded or lacks one."""
def _torch_ops_probe(fn: Callable[[], object], /) -> list[tuple[str, int, list[list[int]], list[str]]]:
    """Calls fn() under the observer and returns (name, torch scope, input sizes, input types)
    of each op it saw on this thread, recording nothing."""
def _torch_ops_enable(record_inputs: bool, /) -> None:
    """Registers the observer: torch ops record into the active session (idempotent)."""
def _torch_ops_disable() -> None:
    """Removes the observer (idempotent)."""

# --- torch's tensor memory (cpp/python/integrations/torch_memory.cpp; framescope.integrations._torch_memory)

def _torch_memory_attach() -> str:
    """Finds c10's ThreadLocalDebugInfo functions in the loaded torch: the library path.
    RuntimeError when torch is not loaded or lacks one."""
def _torch_memory_probe(fn: Callable[[], _T], /) -> tuple[list[tuple[int, int, int, int, int, int]], _T]:
    """Calls fn() with a probe state pushed on this thread, then reports (0x1000, 1, 2, 3, CPU)
    through torch: ((address, bytes, total allocated, total reserved, device type, device
    index) of each report, fn's result)."""
def _torch_memory_enable() -> None:
    """Pushes a recording state on this thread (idempotent)."""
def _torch_memory_disable() -> bool:
    """Stops recording; True when the state could be popped (idempotent)."""
def _torch_memory_yield() -> None:
    """torch's profiler starts on this thread: the session's state steps aside for good."""

# --- eval_frame API
# (cpp/python/eval_frame/; public names and docs in framescope.eval_frame)

import enum
from collections.abc import Iterator, Mapping, MutableMapping, ItemsView, KeysView, ValuesView
from typing import final, overload

class FrameAction(enum.IntEnum):
    """What an intercepted frame does (torch's FrameAction)."""

    DEFAULT = 0
    SKIP = 1
    RUN_ONLY = 2

@final
class FrameExecStrategy:
    """torch's FrameExecStrategy: what frames of a code do, and what every frame they call does."""

    def __init__(
        self,
        cur_action: FrameAction | int = ...,
        recursive_action: FrameAction | int = ...,
        apply_to_code: bool = True,
    ) -> None: ...
    @property
    def cur_action(self) -> FrameAction: ...
    @property
    def recursive_action(self) -> FrameAction: ...
    @property
    def apply_to_code(self) -> bool: ...

@final
class GuardedCode:
    """What an eval_frame callback returns: run ``code`` now, and later when ``check_fn`` holds."""

    def __init__(
        self,
        code: CodeType,
        check_fn: Callable[[Mapping[str, Any]], Any],
        strategy: FrameExecStrategy | None = None,
    ) -> None: ...
    @property
    def code(self) -> CodeType: ...
    @property
    def check_fn(self) -> Callable[[Mapping[str, Any]], Any]: ...
    @property
    def strategy(self) -> FrameExecStrategy | None: ...

@final
class GuardValue:
    """A value a :class:`Guard` checks; each check method returns it, so checks chain."""

    @property
    def source(self) -> str: ...
    def type_is(self, cls: type, /) -> GuardValue: ...
    def is_(self, obj: object, /) -> GuardValue: ...
    def is_none(self) -> GuardValue: ...
    def is_not_none(self) -> GuardValue: ...
    def equals(self, constant: object, /) -> GuardValue: ...
    def len_is(self, n: int, /) -> GuardValue: ...
    def satisfies(self, predicate: Callable[[Any], object], /) -> GuardValue: ...
    def attr(self, name: str, /) -> GuardValue: ...
    def item(self, key: object, /) -> GuardValue: ...

@final
class Guard:
    """A check_fn of declared checks on f_locals; decided from the frame when it runs no code."""

    def __init__(self) -> None: ...
    def __call__(self, f_locals: Mapping[str, Any], /) -> bool: ...
    def local(self, name: str, /) -> GuardValue: ...
    def failure(self, f_locals: Mapping[str, Any], /) -> str | None: ...
    @property
    def checks(self) -> tuple[str, ...]: ...
    @property
    def runs_no_code(self) -> bool: ...
    @property
    def frozen(self) -> bool: ...

@final
class CacheEntry:
    """A cached entry of a code object; after reset_code() code and check_fn read None."""

    @property
    def code(self) -> CodeType | None: ...
    @property
    def check_fn(self) -> Callable[[Mapping[str, Any]], Any] | None: ...
    @property
    def next(self) -> CacheEntry | None: ...
    @property
    def isolation(self) -> object: ...

@final
class FrameLocals(MutableMapping[str, Any]):
    """f_locals of an intercepted frame (torch's frame locals); writes never reach the frame."""

    def __getitem__(self, key: str) -> Any: ...
    def __setitem__(self, key: str, value: Any) -> None: ...
    def __delitem__(self, key: str) -> None: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[str]: ...
    def __contains__(self, key: object) -> bool: ...
    @overload
    def get(self, key: str, /) -> Any | None: ...
    @overload
    def get(self, key: str, default: Any, /) -> Any: ...
    def keys(self) -> KeysView[str]: ...
    def values(self) -> ValuesView[Any]: ...
    def items(self) -> ItemsView[str, Any]: ...
    def copy(self) -> dict[str, Any]: ...

@final
class EvalFrame:
    """The frame a callback receives; every attribute raises RuntimeError after the callback."""

    @property
    def f_code(self) -> CodeType: ...
    @property
    def f_locals(self) -> FrameLocals: ...
    @property
    def f_globals(self) -> dict[str, Any]: ...
    @property
    def f_builtins(self) -> dict[str, Any]: ...
    @property
    def f_lasti(self) -> int: ...
    @property
    def f_lineno(self) -> int: ...
    @property
    def f_back(self) -> FrameType | None: ...
    @property
    def closure(self) -> tuple[Any, ...]: ...

_EvalCallback = (
    None
    | bool
    | Callable[
        [EvalFrame, CacheEntry | None, dict[str, Any]],
        GuardedCode | FrameExecStrategy | None,
    ]
)
_GuardHook = Callable[
    [Callable[[Mapping[str, Any]], Any], CodeType, Mapping[str, Any], int, bool], Any
]

def set_eval_frame(
    callback: _EvalCallback,
    /,
    *,
    isolate: object = False,
    guard_errors: str = "raise",
) -> Any: ...
def get_eval_frame_callback() -> Any: ...
def _eval_frame_setting() -> tuple[Any, Any, str]: ...
def skip_code(code: CodeType, /) -> None: ...
def set_code_exec_strategy(code: CodeType, strategy: FrameExecStrategy, /) -> None: ...
def get_code_exec_strategy(code: CodeType, /) -> FrameExecStrategy: ...
def reset_code(code: CodeType, /) -> None: ...
def reset() -> None: ...
def cache_entries(code: CodeType, /) -> list[CacheEntry]: ...
def is_skipped(code: CodeType, /) -> bool: ...
def set_guard_fail_hook(hook: _GuardHook | None, /) -> None: ...
def set_guard_error_hook(hook: _GuardHook | None, /) -> None: ...
def set_guard_complete_hook(
    hook: Callable[[bool], Any] | None, /
) -> Callable[[bool], Any] | None: ...
def set_skip_guard_eval_unsafe(value: bool, /) -> bool: ...
def _eval_frame_drop_all() -> None: ...
def _eval_frame_debug() -> dict[str, Any]: ...
