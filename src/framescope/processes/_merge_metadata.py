"""Checks of the process metadata ``framescope merge`` reads (clock data, rank, world size), so
that a saved trace with odd values (a string, null or infinity where a number goes, a missing
field, a world size that is not a count) is one ValueError naming the file and the field, never
a traceback or an unbounded allocation."""

from __future__ import annotations

from typing import Any

_INT64 = 2**63
#: The largest rank merged: the merged trace orders process groups by rank * 1000 in 32 bits.
MAX_RANK = 2_000_000
#: Ranks a "missing ranks" warning lists by number (the rest are counted).
_LISTED_RANKS = 16


def _int64(path: str, what: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -_INT64 <= value < _INT64:
        raise ValueError(f"{path}: invalid process metadata: {what} is {value!r}, not a "
                         "64-bit integer (nanoseconds)")
    return value


def check(path: str, meta: dict[str, Any]) -> None:
    """Raises ValueError when the clock or rank data of ``meta`` (one process entry of the trace
    at ``path``) has a field of the wrong type or range; absent sections are fine (older or
    hand-made traces: merged without clock data)."""
    clock = meta.get("clock", {})
    if not isinstance(clock, dict):
        raise ValueError(f"{path}: invalid process metadata: clock is {clock!r}, not an object")
    for name in ("start", "stop"):
        pair = clock.get(name)
        if pair is None:
            continue
        if not isinstance(pair, list) or len(pair) != 2:
            raise ValueError(f"{path}: invalid process metadata: clock.{name} is {pair!r}, not a "
                             "[monotonic_ns, realtime_ns] pair")
        for k, v in enumerate(pair):
            _int64(path, f"clock.{name}[{k}]", v)
    measured = clock.get("measured", [])
    if not isinstance(measured, list):
        raise ValueError(f"{path}: invalid process metadata: clock.measured is {measured!r}, "
                         "not a list")
    for k, m in enumerate(measured):
        if not isinstance(m, dict):
            raise ValueError(f"{path}: invalid process metadata: clock.measured[{k}] is {m!r}, "
                             "not an object")
        for field in ("offset_ns", "error_ns"):
            if field not in m:
                raise ValueError(f"{path}: invalid process metadata: clock.measured[{k}] has no "
                                 f"{field}")
            _int64(path, f"clock.measured[{k}].{field}", m[field])
        if m["error_ns"] < 0:
            raise ValueError(f"{path}: invalid process metadata: clock.measured[{k}].error_ns is "
                             f"negative ({m['error_ns']})")
    if "test_skew_ns" in clock:
        _int64(path, "clock.test_skew_ns", clock["test_skew_ns"])
    host = meta.get("host_id")
    if host is not None and not isinstance(host, str):
        raise ValueError(f"{path}: invalid process metadata: host_id is {host!r}, not a string")
    rank = meta.get("rank")
    if isinstance(rank, dict) and isinstance(rank.get("rank"), int):
        size = rank.get("world_size")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int)
                                 or size < 1 or size >= _INT64):
            raise ValueError(f"{path}: invalid process metadata: rank.world_size is {size!r}, "
                             "not a positive count of processes")
        number = rank["rank"]
        top = min(size - 1, MAX_RANK) if isinstance(size, int) else MAX_RANK
        if isinstance(number, bool) or not 0 <= number <= top:
            raise ValueError(f"{path}: invalid process metadata: rank.rank is {number!r}, not a "
                             f"rank of the job (0..{top})")


def missing_ranks(size: int, present: set[int]) -> str | None:
    """The ranks of ``0..size-1`` not in ``present``, as the warning says them ("rank(s) [0, 2]
    of 3", or "999998 of the 1000000 ranks (the first: 0, 2, ...)"), or None when none is
    missing. Never builds the whole range: a world size is a number read from a file."""
    have = sum(1 for r in present if 0 <= r < size)
    count = size - have
    if count <= 0:
        return None
    listed: list[int] = []
    r = 0
    while len(listed) < min(count, _LISTED_RANKS):
        if r not in present:
            listed.append(r)
        r += 1
    if count <= _LISTED_RANKS:
        return f"rank(s) {listed} of {size}"
    return f"{count} of the {size} ranks (the first: {', '.join(map(str, listed))}, ...)"
