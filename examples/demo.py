"""A small program to profile: `framescope run examples/demo.py` writes a trace and a summary.

It parses a generated log, aggregates it on worker threads, and renders a report, with a few
`record_function` ranges marking the phases, so the trace shows Python calls on several
threads nested under user annotations.
"""

from __future__ import annotations

import random
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import framescope

LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]
SERVICES = ["auth", "db", "cache", "api", "queue"]


def generate_log(lines: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [
        f"2026-11-23T10:{i // 600 % 60:02d}:{i // 10 % 60:02d} {rng.choice(LEVELS)} "
        f"{rng.choice(SERVICES)} latency={rng.expovariate(1 / 40):.1f}ms"
        for i in range(lines)
    ]


def parse_line(line: str) -> tuple[str, str, float]:
    _, level, service, latency = line.split(" ")
    return level, service, float(latency[len("latency="):-2])


def aggregate(chunk: list[str]) -> tuple[Counter[str], dict[str, list[float]]]:
    levels: Counter[str] = Counter()
    latencies: dict[str, list[float]] = {}
    for line in chunk:
        level, service, ms = parse_line(line)
        levels[level] += 1
        latencies.setdefault(service, []).append(ms)
    return levels, latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(levels: Counter[str], latencies: dict[str, list[float]]) -> str:
    rows = [f"{'service':<8} {'count':>6} {'p50 ms':>8} {'p99 ms':>8}"]
    for service in sorted(latencies):
        values = latencies[service]
        rows.append(
            f"{service:<8} {len(values):>6} {percentile(values, 0.5):>8.1f} "
            f"{percentile(values, 0.99):>8.1f}"
        )
    rows.append("levels: " + ", ".join(f"{k}={v}" for k, v in sorted(levels.items())))
    return "\n".join(rows)


def main(lines: int = 40_000, workers: int = 2) -> None:
    with framescope.record_function("generate"):
        log = generate_log(lines)
    with framescope.record_function("aggregate"):
        size = (len(log) + workers - 1) // workers
        chunks = [log[i : i + size] for i in range(0, len(log), size)]
        with ThreadPoolExecutor(workers) as pool:
            parts = list(pool.map(aggregate, chunks))
    with framescope.record_function("report"):
        levels: Counter[str] = Counter()
        latencies: dict[str, list[float]] = {}
        for part_levels, part_latencies in parts:
            levels.update(part_levels)
            for service, values in part_latencies.items():
                latencies.setdefault(service, []).extend(values)
        print(report(levels, latencies))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40_000)
