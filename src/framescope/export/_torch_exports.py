"""torch.profiler's remaining exports on a framescope trace: ``export_stacks`` (collapsed stacks
in µs, Python frames and ops) and ``export_memory_timeline`` (torch's ``[times, sizes]``
layout, its HTML plot, gzip), both from what framescope records on any machine."""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import tempfile
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from framescope._core import Trace

#: torch's memory categories (torch/profiler/_memory_profiler.py, _CATEGORY_TO_INDEX order);
#: framescope knows no tensor's role, so every byte is in the last, "Unknown".
MEMORY_CATEGORIES = ("PARAMETER", "OPTIMIZER_STATE", "INPUT", "TEMPORARY", "ACTIVATION",
                     "GRADIENT", "AUTOGRAD_DETAIL", "Unknown")
_UNKNOWN_SLOT = len(MEMORY_CATEGORIES)  # sizes[0] is torch's 0 base of the stacked plot

_STACK_METRICS = ("self_cpu_time_total", "self_cuda_time_total", "self_device_time_total",
                  "self_xpu_time_total", "self_privateuse1_time_total")


def export_stacks(trace: Trace, path: str, metric: str = "self_cpu_time_total") -> None:
    """Collapsed stacks ``outer;...;inner <µs>``, one line per distinct stack of Python frames,
    ranges and torch ops, with its self time as ``metric`` (torch's file, which flamegraph.pl
    and speedscope read). framescope measures CPU-side time: a device metric writes an empty
    file, as torch does for device time it did not record.

    Raises:
        ValueError: ``metric`` is not one of torch's stack metrics.
    """
    if metric not in _STACK_METRICS:
        raise ValueError(f"export_stacks: unknown metric {metric!r}: expected one of "
                         f"{', '.join(_STACK_METRICS)}")
    if metric != "self_cpu_time_total":
        with open(path, "w", encoding="utf-8"):
            return
    # The native collapsed writer gives "thread;outer;...;inner µs"; torch's lines have no
    # thread frame, so the first frame is cut and equal stacks of several threads summed.
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(suffix=".collapsed", dir=directory)
    os.close(fd)
    try:
        trace.export(tmp, "collapsed", progress=False)
        totals: dict[str, int] = {}
        with open(tmp, encoding="utf-8") as f:
            for line in f:
                stack, _, value = line.rstrip("\n").rpartition(" ")
                _, _, frames = stack.partition(";")
                if frames and value.isdigit():
                    totals[frames] = totals.get(frames, 0) + int(value)
    finally:
        os.unlink(tmp)
    with open(path, "w", encoding="utf-8") as out:
        for frames, micros in totals.items():
            if micros > 0:
                out.write(f"{frames} {micros}\n")


def memory_timeline(trace: Trace) -> tuple[list[int], list[list[int]]]:
    """torch's ``[times, sizes]``: times in µs, and per time the bytes held by category (a
    leading 0, then torch's categories; all bytes are in "Unknown"). The bytes are torch's
    CPU tensor memory when the trace holds torch's allocator samples, else the Python heap
    (profile_memory's counts, summed over threads)."""
    samples = sorted(trace.memory, key=lambda m: m[0])
    device_samples = [m for m in samples if m[6] != -2]
    times: list[int] = []
    sizes: list[list[int]] = []
    if device_samples:
        for m in device_samples:
            times.append(m[0] // 1000)
            sizes.append(_row(m[4]))
        return times, sizes
    per_thread: dict[int, int] = {}
    total = 0
    for m in samples:
        total += m[4] - per_thread.get(m[1], 0)
        per_thread[m[1]] = m[4]
        times.append(m[0] // 1000)
        sizes.append(_row(total))
    return times, sizes


def _row(total: int) -> list[int]:
    row = [0] * (_UNKNOWN_SLOT + 1)
    row[_UNKNOWN_SLOT] = total
    return row


def export_memory_timeline(trace: Trace, path: str, device: str | None = None,
                           profile_memory: bool = True) -> None:
    """Writes the memory timeline as torch does, by ``path``'s suffix: ``.html`` (a plot, needs
    matplotlib), ``.json.gz`` or ``.json`` (``[times, sizes]``). ``device``: None or "cpu"
    (framescope records no device memory).

    Raises:
        ValueError: a device other than the CPU, an unknown suffix, or a profile without
            ``profile_memory``.
        RuntimeError: ``.html`` without matplotlib.
    """
    if device is not None and str(device).split(":")[0] != "cpu":
        raise ValueError(f"export_memory_timeline: framescope records CPU memory only, not "
                         f"{device!r} (use device=None or 'cpu')")
    if not profile_memory:
        raise ValueError("export_memory_timeline needs profile(profile_memory=True)")
    if not (path.endswith(".html") or path.endswith(".json") or path.endswith(".json.gz")):
        raise ValueError(f"export_memory_timeline: {path!r}: use a .json, .json.gz or .html path")
    times, sizes = memory_timeline(trace)
    if path.endswith(".html"):
        _write_html(path, times, sizes)
    elif path.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            json.dump([times, sizes], f)
    else:
        with open(path, "w", encoding="utf-8") as f:
            json.dump([times, sizes], f)


def _write_html(path: str, times: list[int], sizes: list[list[int]]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("export_memory_timeline: an .html timeline needs matplotlib "
                           "(pip install matplotlib), or use a .json path") from None
    fig: Any = plt.figure(figsize=(20, 12), dpi=80)
    axes = fig.gca()
    t0 = times[0] if times else 0
    xs = [(t - t0) / 1e3 for t in times]
    ys = [row[_UNKNOWN_SLOT] / 1024**2 for row in sizes]
    axes.fill_between(xs, 0, ys, color="grey", alpha=0.7, step="post")
    axes.set_xlabel("Time (ms)")
    axes.set_ylabel("Memory (MiB)")
    axes.set_title(f"framescope memory timeline (peak {max(ys, default=0):.2f} MiB)")
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    encoded = base64.b64encode(buf.getvalue()).decode("ascii")
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"<html><head><title>framescope memory timeline</title></head><body>"
                f"<img src='data:image/png;base64,{encoded}'></body></html>\n")
