"""Workloads of the Python-level benchmarks: small modules, each with run(scale=1.0)."""

from __future__ import annotations

#: fib first (the micro benchmark with its own targets), then the real workloads.
MICRO = ("fib",)
REAL = ("richards", "nbody", "deltablue", "raytrace", "chaos", "go")
ALL = MICRO + REAL
#: Not in the tracer tables: the allocation-heavy workload of bench/analysis_overhead.py.
EXTRA = ("alloc", "inits")
