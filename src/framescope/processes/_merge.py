"""``framescope merge``: saved traces of the ranks of a job (or of any processes) as one trace,
on rank 0's clock, one process group per rank labelled ``rank N``.

The reference is rank 0's trace (else the first given). Each other trace is shifted by its
offset to the reference, chosen in this order (see framescope.processes._clock_sync):

1. ``measured``: both have offsets measured through the job's communication: the difference of
   their means;
2. ``same host``: both ran on the same host (same kernel boot id): 0, CLOCK_MONOTONIC is
   system-wide;
3. ``wall clock``: the (realtime - monotonic) difference of the two hosts, from the pairs read at
   session start and stop;
4. ``none``: a trace without clock data (older, or hand-made): 0, with a warning.

Pids and tids of different traces that clash (other hosts) are renumbered in the merged trace.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from typing import Any

from framescope.processes import _merge_metadata
from framescope.processes import _process_table as processes
from framescope.profiler._profile import load, profile

#: Offsets whose start and stop measurements differ by more than this (plus their errors) get a
#: warning: clocks that drift apart are aligned by one constant offset only.
DRIFT_WARNING_NS = 1_000_000


@dataclass
class MergedPart:
    """How one input was placed: its rank, the offset applied and how it was found."""

    path: str
    rank: int | None
    pid: int | None
    hostname: str
    offset_ns: int
    method: str
    error_ns: int | None
    test_skew_ns: int = 0

    def describe(self) -> str:
        who = f"rank {self.rank}" if self.rank is not None else "no rank"
        err = f" (±{self.error_ns / 1e3:.0f} µs)" if self.error_ns is not None else ""
        skew = (f" [its clock was skewed by {self.test_skew_ns / 1e6:+.3f} ms for a test]"
                if self.test_skew_ns else "")
        return (f"{self.path}: {who}, pid {self.pid} on {self.hostname or '?'}: "
                f"{self.offset_ns / 1e6:+.3f} ms by {self.method}{err}{skew}")


def _main_entry(prof: profile) -> processes.Process | None:
    table = processes.read(prof.trace)
    candidates = [p for p in table if p.role == "main" and p.metadata]
    candidates += [p for p in table if p.metadata]
    return candidates[0] if candidates else None


def _measured(meta: dict[str, Any]) -> tuple[int, int] | None:
    """Mean measured offset and the largest error, or None."""
    ms = [m for m in meta.get("clock", {}).get("measured", []) if isinstance(m, dict)]
    if not ms:
        return None
    return (int(statistics.mean(int(m["offset_ns"]) for m in ms)),
            max(int(m["error_ns"]) for m in ms))


def _wall_delta(meta: dict[str, Any]) -> int | None:
    """Mean (realtime - monotonic) of the start and stop pairs, or None."""
    clock = meta.get("clock", {})
    pairs = [clock.get("start"), clock.get("stop")]
    deltas = [int(p[1]) - int(p[0]) for p in pairs if isinstance(p, list) and len(p) == 2]
    return int(statistics.mean(deltas)) if deltas else None


def clock_offset(meta: dict[str, Any] | None, ref: dict[str, Any] | None) -> tuple[int, str, int | None]:
    """(offset to add to the times of the trace with metadata ``meta`` to put them on the
    clock of ``ref``, method, error bound or None)."""
    if meta is None or ref is None:
        return 0, "none (no clock data)", None
    if meta is ref:
        return 0, "reference", 0
    mine, theirs = _measured(meta), _measured(ref)
    if mine is not None and theirs is not None:
        return mine[0] - theirs[0], "measured offset", mine[1] + theirs[1]
    if meta.get("host_id") and meta.get("host_id") == ref.get("host_id"):
        return 0, "same host", 0
    mine_wall, ref_wall = _wall_delta(meta), _wall_delta(ref)
    if mine_wall is not None and ref_wall is not None:
        return mine_wall - ref_wall, "wall clock", None
    return 0, "none (no clock data)", None


def _drift_warning(path: str, meta: dict[str, Any]) -> str | None:
    ms = [m for m in meta.get("clock", {}).get("measured", []) if isinstance(m, dict)]
    if len(ms) < 2:
        return None
    first, last = ms[0], ms[-1]
    spread = abs(int(last["offset_ns"]) - int(first["offset_ns"]))
    if spread <= DRIFT_WARNING_NS + int(first["error_ns"]) + int(last["error_ns"]):
        return None
    return (f"framescope merge: {path}: the clock offset changed by {spread / 1e6:.3f} ms "
            "between the first and last measurement; the mean offset is applied to the whole "
            "trace")


def merge_files(paths: list[str]) -> tuple[profile, list[MergedPart], list[str]]:
    """Loads and merges saved traces; returns the merged profile, how each input was placed, and
    warnings (clock drift, duplicate or missing ranks).

    Raises:
        ValueError: no paths, or a file that is not a framescope trace.
        OSError: a file cannot be read.
    """
    if not paths:
        raise ValueError("give at least one saved trace (.fstrace)")
    loaded = []
    for path in paths:
        prof = load(path)
        entry = _main_entry(prof)
        if entry is not None:
            _merge_metadata.check(path, entry.metadata)
        loaded.append((path, prof, entry))
    warnings: list[str] = []
    ranked = [(e.rank, path) for path, _, e in loaded if e is not None and e.rank is not None]
    seen: dict[int, str] = {}
    for rank, path in ranked:
        if rank in seen:
            warnings.append(f"framescope merge: {seen[rank]} and {path} are both rank {rank}")
        seen.setdefault(rank, path)
    sizes = {e.metadata["rank"].get("world_size") for _, _, e in loaded
             if e is not None and e.rank is not None} - {None}
    if len(sizes) == 1:
        (size,) = sizes
        missing = _merge_metadata.missing_ranks(size, set(seen))
        if missing:
            warnings.append(f"framescope merge: no trace of {missing}")
    elif len(sizes) > 1:
        warnings.append(f"framescope merge: the traces are of jobs of different sizes {sorted(sizes)}")

    # Ranks in order, then unranked traces in the order given.
    order = sorted(range(len(loaded)), key=lambda i: (
        loaded[i][2] is None or loaded[i][2].rank is None,  # type: ignore[union-attr]
        loaded[i][2].rank if loaded[i][2] is not None and loaded[i][2].rank is not None else 0,  # type: ignore[union-attr]
        i))
    ref_meta = loaded[order[0]][2].metadata if loaded[order[0]][2] is not None else None  # type: ignore[union-attr]
    merged: profile | None = None
    placed: list[MergedPart] = []
    for position, i in enumerate(order):
        path, prof, entry = loaded[i]
        meta = entry.metadata if entry is not None else None
        offset, method, error = clock_offset(meta, ref_meta)
        if meta is not None:
            drift = _drift_warning(path, meta)
            if drift:
                warnings.append(drift)
        elif method.startswith("none") and position:
            warnings.append(f"framescope merge: {path} has no clock data: merged unshifted")
        its_rank = entry.rank if entry is not None else None
        group = its_rank if its_rank is not None else position
        _relabel(prof, its_rank, group, offset, method)
        skew = meta.get("clock", {}).get("test_skew_ns", 0) if meta else 0
        placed.append(MergedPart(os.path.basename(path), its_rank, entry.pid if entry else None,
                                 str(meta.get("hostname", "")) if meta else "", offset, method,
                                 error, int(skew) if isinstance(skew, int) else 0))
        if merged is None:
            if offset:
                prof.trace._shift_times(offset)
            merged = prof
        else:
            merged.trace._merge_separate_pids(prof.trace, offset)
    assert merged is not None
    return merged, placed, warnings


def _relabel(prof: profile, rank: int | None, group: int, offset: int, method: str) -> None:
    """Orders the processes of one input as group ``group`` (rank order), labels every one of a
    rank with ``rank N``, and notes the offset applied in each entry's metadata."""
    table = processes.read(prof.trace)
    pids = {t[0] for t in prof.trace.threads}
    known = {p.pid for p in table}
    for pid in sorted(pids - known):  # processes without an entry (older traces)
        table.append(processes.Process(pid, f"rank {rank}" if rank is not None else "", [], 0))
    for p in table:
        if rank is not None:
            label = f"rank {rank}"
            if p.name != label and label not in p.labels:
                p.labels = [label, *p.labels]
        p.sort_index = group * 1000 + min(p.sort_index, 999)
        if p.metadata:
            p.metadata["merge"] = {"offset_ns": offset, "method": method}
        processes.set_entry(prof.trace, p)
