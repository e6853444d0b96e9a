"""Parquet export: a trace as one table, one row per slice, instant and memory sample.

The rows are made natively (cpp/export/columnar_batches.cpp: one replay filling column buffers
of ``BATCH_ROWS`` rows, with self, CPU and allocation totals computed as key_averages computes
them) and handed over without a copy: each column is a buffer that pyarrow wraps as an Arrow
array. Names, files, thread and process names become dictionary arrays whose indices are the
batch's own symbol and thread numbers, so pyarrow never hashes a string per row, and Parquet
stores them dictionary-encoded. Each batch is written as one row group by
``pyarrow.parquet.ParquetWriter`` (zstd), so memory stays one batch however long the trace is.
See docs/tables.md for the schema and why this split (native rows, pyarrow's Parquet writer).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from framescope import _core
from framescope.analysis import _host_code
from framescope.processes import _process_table as processes
from framescope.tables._deps import require

if TYPE_CHECKING:
    import pyarrow as pa

    from framescope._core import Trace

#: Rows per batch (and per Parquet row group): ~25 MB of column buffers. Against 1 M rows: the
#: same instruction count (callgrind, batcher and writer), a little less CPU time measured (the
#: batch's buffers stay nearer the cache), ~75 MB less peak memory, files ~1.4% larger (more
#: row groups, each with its own dictionaries and statistics).
BATCH_ROWS = 1 << 18

#: (column, Arrow type name, description): the documented schema, in file order. ``rank`` is
#: left out of the files of a dataset (its ``rank=N`` directories hold it, as Hive's layout).
COLUMNS: list[tuple[str, str, str]] = [
    ("id", "int64", "the event's index in its trace (-1 for memory rows)"),
    ("parent_id", "int64", "id of the enclosing event on the same thread, -1 at the root"),
    ("kind", "string", "python, c, op, range, scope, instant or memory"),
    ("name", "string", "display name, e.g. 'app.py(12): run', 'aten::mm', 'step'"),
    ("qualname", "string", "the bare function name for Python functions, else the name"),
    ("file", "string", "source file of Python functions, else ''"),
    ("line", "int32", "first line of Python functions, else 0"),
    ("start_ns", "int64", "start, CLOCK_MONOTONIC ns (datasets: on the merged clock)"),
    ("dur_ns", "int64", "duration (0 for instants and memory rows)"),
    ("self_ns", "int64", "duration less the direct children's (0 for async ranges)"),
    ("cpu_ns", "int64", "on-CPU part of dur_ns; null when CPU time was not sampled"),
    ("cpu_self_ns", "int64", "on-CPU part of self_ns; null when not sampled"),
    ("depth", "int32", "events enclosing it on its thread"),
    ("recursive", "bool", "inside an event of the same name and kind (totals skip it)"),
    ("is_async", "bool", "a range that ended on another thread"),
    ("host", "bool", "host code (Jupyter/IPython, pytest, framescope, runpy...): docs/host_code.md"),
    ("tid", "int64", "OS thread id"),
    ("thread_name", "string", "the thread's name"),
    ("pid", "int64", "process id"),
    ("process_name", "string", "the process's name ('rank 0', a worker's name...)"),
    ("rank", "int32", "the process's rank in its job; null when it has none"),
    ("alloc_bytes", "int64", "bytes allocated inside, children included (profile_memory)"),
    ("alloc_self_bytes", "int64", "bytes allocated directly inside; memory rows: the sample"),
    ("flops", "int64", "the range's flops estimate (with_flops), else 0"),
    ("args", "string", "JSON: a range's inputs (shapes, values), flops, seq_nr; null if none"),
]

_STRINGS = ["kind", "name", "qualname", "file", "thread_name", "process_name", "args"]
_DELTA = ["id", "parent_id", "start_ns", "dur_ns", "self_ns", "cpu_ns", "cpu_self_ns"]
#: Delta-encoded columns stored without zstd: their bit-packed deltas are nearly incompressible
#: (zstd took a third of their writing time for ~10% of their size, ~0.35 B/event in all).
_UNCOMPRESSED = ["start_ns", "dur_ns", "self_ns", "cpu_ns", "cpu_self_ns"]
_NULLABLE = {"cpu_ns", "cpu_self_ns", "rank", "args"}


def schema(with_rank: bool = True, dictionaries: bool = False) -> pa.Schema:
    """The Arrow schema of the exported table as readers see it (without ``rank`` for a
    dataset's files). ``dictionaries``: string columns as the writer is given them,
    dictionary<int32, string> (stored as dictionary-encoded strings)."""
    pa = require("pyarrow", "parquet", "Parquet export")
    string = pa.dictionary(pa.int32(), pa.string()) if dictionaries else pa.string()
    types = {"int64": pa.int64(), "int32": pa.int32(), "bool": pa.bool_(), "string": string}
    # Columns that are never null are stored as REQUIRED: the writer then encodes no
    # definition levels for them (~20% of its time).
    fields = [pa.field(n, types[t], nullable=n in _NULLABLE) for n, t, _ in COLUMNS
              if with_rank or n != "rank"]
    if dictionaries:  # kind's indices are the batcher's one-byte kind numbers
        fields[1 + [f.name for f in fields[1:]].index("kind")] = pa.field(
            "kind", pa.dictionary(pa.int8(), pa.string()), nullable=False)
    return pa.schema(fields)


@dataclass
class _Threads:
    """Per-thread columns, by thread index: what each row's thread number expands to. Names
    are (index per thread, distinct names): a dictionary with repeated values makes the Parquet
    writer hash every row."""

    tid: Any
    pid: Any
    name: tuple[Any, Any]
    process: tuple[Any, Any]
    rank: Any


def _distinct(values: list[str]) -> tuple[Any, Any]:
    """(index of each value among the distinct ones, the distinct values) as Arrow arrays."""
    pa = require("pyarrow", "parquet", "Parquet export")
    seen: dict[str, int] = {}
    index = [seen.setdefault(v, len(seen)) for v in values]
    return pa.array(index, pa.int32()), pa.array(list(seen), pa.string())


def _threads(trace: Trace, rank: int | None) -> _Threads:
    pa = require("pyarrow", "parquet", "Parquet export")
    table = processes.read(trace)
    by_pid = {p.pid: p for p in table}
    ranks = {p.rank for p in table if p.rank is not None}
    only = next(iter(ranks)) if len(ranks) == 1 else None
    tids, pids, names, procs, rks = [], [], [], [], []
    for pid, tid, _pthread, name in trace.threads:
        p = by_pid.get(pid)
        tids.append(tid if tid < 1 << 63 else tid - (1 << 64))
        pids.append(pid)
        names.append(name)
        procs.append(p.name if p is not None and p.name else f"python {pid}")
        own = p.rank if p is not None else None
        rks.append(rank if rank is not None else (own if own is not None else only))
    return _Threads(pa.array(tids, pa.int64()), pa.array(pids, pa.int64()), _distinct(names),
                    _distinct(procs), pa.array(rks, pa.int32()))


def _record_batch(b: dict[str, Any], threads: _Threads, with_rank: bool) -> pa.RecordBatch:
    pa = require("pyarrow", "parquet", "Parquet export")
    pc = require("pyarrow.compute", "parquet", "Parquet export")
    n = int(b["rows"])

    def col(key: str, typ: Any) -> Any:
        return pa.Array.from_buffers(typ, n, [None, pa.py_buffer(b[key])])

    def dictionary(indices: Any, values: Any) -> Any:
        # The indices are the batcher's (symbol, thread and detail numbers of this batch), in
        # range by construction: no bounds check over every row (safe=False).
        return pa.DictionaryArray.from_arrays(indices, values, safe=False)

    def flags(key: str) -> Any:  # bit-packed by the batcher, as Arrow's booleans are
        return pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(b[key])])

    def take(values: Any, indices: Any) -> Any:
        # Per-thread and per-symbol values expanded to rows. The indices are in range by
        # construction: no bounds check (it took 60% of the gather's time).
        return pc.take(values, indices, boundscheck=False)

    def distinct(indices: Any, by_index: tuple[Any, Any]) -> Any:
        if len(by_index[0]) == len(by_index[1]):  # already distinct
            return dictionary(indices, by_index[1])
        return dictionary(take(by_index[0], indices), by_index[1])

    names, files, lines, functions = b["symbols"]
    name_ix = col("name", pa.int32())  # symbol numbers of the batch: < 2^31
    thread_ix = col("thread", pa.int32())
    cpu, cpu_self = col("cpu_ns", pa.int64()), col("cpu_self_ns", pa.int64())
    if not b["any_cpu_known"]:
        cpu = cpu_self = pa.nulls(n, pa.int64())
    elif b["any_cpu_unknown"]:
        unknown = pc.less(cpu, 0)
        null = pa.scalar(None, pa.int64())
        cpu = pc.if_else(unknown, null, cpu)
        cpu_self = pc.if_else(unknown, null, cpu_self)
    if b["args"]:
        detail = col("detail", pa.int32())
        detail = pc.if_else(pc.less(detail, 0), pa.scalar(None, pa.int32()), detail)
        args = dictionary(detail, pa.array(b["args"], pa.string()))
    else:
        args = pa.nulls(n, pa.dictionary(pa.int32(), pa.string()))
    kind = dictionary(col("kind", pa.int8()), _kinds())
    columns: dict[str, Any] = {
        "id": col("id", pa.int64()),
        "parent_id": col("parent_id", pa.int64()),
        "kind": kind,
        "name": dictionary(name_ix, pa.array(names, pa.string())),
        "qualname": distinct(name_ix, _distinct(functions)),
        "file": distinct(name_ix, _distinct(files)),
        "line": take(pa.array(lines, pa.int32()), name_ix),
        "start_ns": col("start_ns", pa.int64()),
        "dur_ns": col("dur_ns", pa.int64()),
        "self_ns": col("self_ns", pa.int64()),
        "cpu_ns": cpu,
        "cpu_self_ns": cpu_self,
        "depth": col("depth", pa.int32()),
        "recursive": flags("recursive"),
        "is_async": flags("is_async"),
        "host": flags("host"),
        "tid": take(threads.tid, thread_ix),
        "thread_name": distinct(thread_ix, threads.name),
        "pid": take(threads.pid, thread_ix),
        "process_name": distinct(thread_ix, threads.process),
        "rank": take(threads.rank, thread_ix),
        "alloc_bytes": col("alloc_bytes", pa.int64()),
        "alloc_self_bytes": col("alloc_self_bytes", pa.int64()),
        "flops": col("flops", pa.int64()),
        "args": args,
    }
    if not with_rank:
        del columns["rank"]
    return pa.RecordBatch.from_arrays(list(columns.values()),
                                      schema=schema(with_rank, dictionaries=True))


_KINDS: list[Any] = []


def _kinds() -> pa.Array:
    if not _KINDS:
        pa = require("pyarrow", "parquet", "Parquet export")
        _KINDS.append(pa.array(list(_core._ROW_KINDS), pa.string()))
    return _KINDS[0]


#: Page options, where the installed pyarrow has them (pyarrow >= 21 cuts pages at 20,000 rows
#: by default). Pages of up to 8 MB and no row limit: a 1 M-row row group is then a few pages per
#: column instead of ~50, and each page costs the writer a zstd context, a header, statistics
#: and copies (13% fewer instructions in the writer, counted with callgrind). Readers read a
#: page at a time, so 8 MB per column is their buffer; engines skip by row group.
_PAGE_OPTIONS: dict[str, Any] = {}


def _page_options() -> dict[str, Any]:
    if not _PAGE_OPTIONS:
        pq = require("pyarrow.parquet", "parquet", "Parquet export")
        import inspect

        known = inspect.signature(pq.ParquetWriter.__init__).parameters
        _PAGE_OPTIONS["data_page_size"] = 8 << 20
        if "max_rows_per_page" in known:
            _PAGE_OPTIONS["max_rows_per_page"] = 1 << 30
    return _PAGE_OPTIONS


def _writer(path: str, with_rank: bool) -> Any:
    pq = require("pyarrow.parquet", "parquet", "Parquet export")
    # Strings are dictionary-encoded (their arrays already are: no hashing per row). Ids and
    # times are delta-encoded (DELTA_BINARY_PACKED): ids and starts grow row after row, and
    # durations are mostly small, so their deltas pack into few bits; writing them so is 2-3x
    # faster than plain values through zstd, at about the same size (durations a little
    # bigger; measured in bench/tables.py's runs). Times are then stored uncompressed
    # (_UNCOMPRESSED); ids keep zstd (their deltas repeat: 1.2 -> 0.1 B/row for ~1 ns/row).
    # The rest is plain and left to zstd, which shrinks the per-thread runs of tid, pid, rank
    # and depth to almost nothing. BYTE_STREAM_SPLIT + zstd would make the times smaller but
    # not faster than uncompressed delta, and DuckDB reads it for integers only since 2026
    # (duckdb#24175): older engines could not open the files. Statistics only where engines
    # use them to skip row groups (times). The file keeps no Arrow schema: readers see plain
    # strings, not per-row-group dictionaries (pandas categoricals), from every tool.
    names = schema(with_rank).names
    return pq.ParquetWriter(
        path, schema(with_rank, dictionaries=True),
        compression={c: "none" if c in _UNCOMPRESSED else "zstd" for c in names},
        compression_level={c: 1 for c in names if c not in _UNCOMPRESSED},
        use_dictionary=_STRINGS, store_schema=False, write_statistics=["start_ns", "dur_ns"],
        column_encoding={c: "DELTA_BINARY_PACKED" for c in _DELTA}, **_page_options())


def write_batches(trace: Trace, open_file: Callable[[int], str], *, rank: int | None = None,
                  with_rank: bool = True, offset_ns: int = 0, batch_rows: int = BATCH_ROWS,
                  batches_per_file: int = 0) -> int:
    """Writes ``trace`` as Parquet: ``open_file(k)`` names the k-th file (a new file every
    ``batches_per_file`` batches when > 0). ``rank`` fills the rank column (else the process
    table's ranks), ``offset_ns`` shifts every start. Returns the rows written."""
    threads = _threads(trace, rank)
    # Host code is marked (Slice::host) by a replay through the host classes of the trace's
    # symbols (decided once per symbol, docs/host_code.md): the ``host`` column.
    marked = _host_code.host_view(trace, fold=False)
    state: dict[str, Any] = {"writer": None, "files": 0, "batches": 0, "rows": 0, "paths": []}

    def sink(b: dict[str, Any]) -> None:
        if state["writer"] is None or (batches_per_file and state["batches"] >= batches_per_file):
            if state["writer"] is not None:
                state["writer"].close()
            path = open_file(state["files"])
            state["paths"].append(path)
            state["writer"] = _writer(path, with_rank)
            state["files"] += 1
            state["batches"] = 0
        state["writer"].write_batch(_record_batch(b, threads, with_rank))
        state["batches"] += 1
        state["rows"] += int(b["rows"])

    try:
        _core._column_batches(marked, sink, batch_rows, offset_ns)
        if state["writer"] is None:  # an empty trace: a file with the schema and no rows
            path = open_file(0)
            state["paths"].append(path)
            state["writer"] = _writer(path, with_rank)
        state["writer"].close()
        state["writer"] = None
    except BaseException:
        if state["writer"] is not None:
            try:
                state["writer"].close()
            except Exception:  # noqa: BLE001 - the first error is the one to report
                pass
        for path in state["paths"]:
            try:
                os.unlink(path)
            except OSError:
                pass
        raise
    return int(state["rows"])


def write_parquet(trace: Trace, path: str) -> int:
    """Writes ``trace`` to ``path`` (.parquet) through a temporary beside it, renamed at the end
    (a failed export leaves no partial file). Returns the rows written."""
    require("pyarrow.parquet", "parquet", "Parquet export")
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    rows = write_batches(trace, lambda k: tmp)
    os.replace(tmp, path)
    return rows
