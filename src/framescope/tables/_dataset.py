"""Datasets: the saved traces of a job's ranks as one Hive-partitioned Parquet table,
``DIR/rank=N/part-K.parquet``, every time on the merged clock (the offsets
``framescope merge`` applies, framescope.processes._merge.clock_offset), readable as one table by DuckDB,
pyarrow.dataset, Dask, Spark and Trino."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass

from framescope.processes import _merge as merge_mod
from framescope.profiler._profile import load
from framescope.tables import _parquet
from framescope.tables._deps import require

#: Batches per part file: parts of ~16 M rows give a distributed reader several tasks per rank.
BATCHES_PER_FILE = 16

_PART = re.compile(r"part-\d+\.parquet")
_RANK_DIR = re.compile(r"rank=-?\d+")


@dataclass
class WrittenRank:
    """One input as written: its partition, the clock offset applied and how it was found."""

    path: str
    rank: int
    offset_ns: int
    method: str
    rows: int
    files: list[str]


def is_dataset_output(path: str) -> bool:
    """Whether an output path names a dataset directory: a trailing '/' or an existing
    directory."""
    return path.endswith(("/", os.sep)) or os.path.isdir(path)


def is_dataset(path: str) -> bool:
    """Whether ``path`` is a dataset directory this module wrote (has rank=N subdirectories)."""
    return os.path.isdir(path) and any(_RANK_DIR.fullmatch(n) for n in os.listdir(path))


def _prepare(folder: str) -> None:
    """Creates ``folder``, or empties a dataset written before; refuses a directory holding
    anything else (it is not ours to delete)."""
    if not os.path.exists(folder):
        os.makedirs(folder)
        return
    if not os.path.isdir(folder):
        raise ValueError(f"{folder!r} exists and is not a directory")
    for entry in os.listdir(folder):
        sub = os.path.join(folder, entry)
        ours = _RANK_DIR.fullmatch(entry) and os.path.isdir(sub) and all(
            _PART.fullmatch(f) for f in os.listdir(sub))
        if not ours:
            raise ValueError(f"{folder!r} holds {entry!r}, which is not part of a framescope "
                             "dataset: give an empty or new directory")
    for entry in os.listdir(folder):
        shutil.rmtree(os.path.join(folder, entry))


def write_dataset(paths: list[str], folder: str) -> tuple[list[WrittenRank], list[str]]:
    """Writes the traces ``paths`` (one per rank) as a dataset in ``folder``; returns how each
    was placed and warnings (duplicate ranks, clock drift).

    A trace's partition is its rank (the process table's, as ``framescope merge`` reads it);
    traces without one get the first numbers no ranked trace uses. The reference clock is rank
    0's (else the first trace's), as in ``framescope merge``.

    Raises:
        ValueError: no paths, a file that is not a trace, two traces of one rank, or a folder
            holding other files.
        OSError: a file cannot be read or written.
        MissingDependency: pyarrow is not installed.
    """
    require("pyarrow.parquet", "parquet", "a Parquet dataset")
    if not paths:
        raise ValueError("give at least one saved trace (.fstrace)")
    loaded = []
    for path in paths:
        prof = load(path)
        loaded.append((path, prof, merge_mod._main_entry(prof)))
    warnings: list[str] = []
    ranks: dict[int, str] = {}
    for path, _, entry in loaded:
        if entry is not None and entry.rank is not None:
            if entry.rank in ranks:
                raise ValueError(f"{ranks[entry.rank]} and {path} are both rank {entry.rank}: "
                                 "a dataset has one partition per rank")
            ranks[entry.rank] = path
    free = (r for r in range(len(loaded) + len(ranks) + 1) if r not in ranks)
    order = sorted(range(len(loaded)), key=lambda i: (
        loaded[i][2] is None or loaded[i][2].rank is None,  # type: ignore[union-attr]
        loaded[i][2].rank if loaded[i][2] is not None and loaded[i][2].rank is not None else i,  # type: ignore[union-attr]
    ))
    first = loaded[order[0]][2]
    ref_meta = first.metadata if first is not None else None
    _prepare(folder)
    written: list[WrittenRank] = []
    for i in order:
        path, prof, entry = loaded[i]
        meta = entry.metadata if entry is not None else None
        offset, method, _error = merge_mod.clock_offset(meta, ref_meta)
        if meta is not None:
            drift = merge_mod._drift_warning(path, meta)
            if drift:
                warnings.append(drift.replace("framescope merge:", "framescope convert:"))
        rank = entry.rank if entry is not None and entry.rank is not None else next(free)
        if entry is None or entry.rank is None:
            warnings.append(f"framescope convert: {path} has no rank: written as rank={rank}")
        part_dir = os.path.join(folder, f"rank={rank}")
        os.makedirs(part_dir, exist_ok=True)
        files: list[str] = []

        def name(k: int, part_dir: str = part_dir, files: list[str] = files) -> str:
            files.append(os.path.join(part_dir, f"part-{k}.parquet"))
            return files[-1]

        rows = _parquet.write_batches(prof.trace, name, rank=rank, with_rank=False,
                                      offset_ns=offset, batches_per_file=BATCHES_PER_FILE)
        written.append(WrittenRank(path, rank, offset, method, rows, files))
    return written, warnings
