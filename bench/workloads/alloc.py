"""Allocation-heavy: small objects, dicts, lists and strings built in many small Python calls
(profile_memory's worst case: nearly every call allocates, so nearly every call and return
carries the bytes allocated since the previous one)."""

from __future__ import annotations

#: Records built per run at scale 1 (~0.5 s untraced on 3.12 here).
RECORDS = 100_000


class Point:
    __slots__ = ("x", "y", "tags")

    def __init__(self, x: int, y: int) -> None:
        self.x = x
        self.y = y
        self.tags = [tag(x), tag(y)]


def tag(v: int) -> str:
    return f"t{v}"


def parts(i: int) -> list[int]:
    return list(range(i % 8))


def name(i: int) -> str:
    return "item-" + str(i)


def make_record(i: int) -> dict[str, object]:
    return {"id": i, "name": name(i), "point": Point(i, i * 2), "parts": parts(i)}


def summarize(records: list[dict[str, object]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in records:
        key = str(r["name"])[:6]
        counts[key] = counts.get(key, 0) + 1
    return counts


def run(scale: float = 1.0) -> int:
    n = max(1000, int(RECORDS * scale))
    total = 0
    for start in range(0, n, 10_000):
        batch = [make_record(i) for i in range(start, min(n, start + 10_000))]
        total += len(summarize(batch))
    return total
