"""The ``--by-task`` summary of asyncio Tasks (framescope.integrations._asyncio_tasks records their steps).

The Tasks' tracks in Chrome JSON and Perfetto files (a track per Task: its lifetime as a span,
each step as a slice inside it, the time it awaited as the gaps) are written by the native
writers themselves (cpp/export/task_tracks.h), so every export path has them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from framescope.integrations._asyncio_tasks import task_steps
from framescope.analysis._names import fit_name, name_width

if TYPE_CHECKING:
    from framescope._core import Trace

def by_task_table(trace: Trace, limit: int = 20, functions: int = 3) -> str:
    """One row per Task: steps, time running (its steps), lifetime (first step to last), the
    share of its lifetime it awaited; under each, its ``functions`` hottest functions."""
    tasks = task_steps(trace, functions=functions > 0)
    if not tasks:
        return ("no asyncio Task ran while recording (or its loop is not asyncio's: uvloop's "
                "steps are not attributed)")
    tasks.sort(key=lambda t: t.running_ns, reverse=True)
    total = sum(t.running_ns for t in tasks)
    head = f"{'steps':>8} {'running ms':>11} {'run %':>6} {'lifetime ms':>12} {'awaiting':>9}"
    width = name_width(len(head) + 2)
    lines = [f"Time per asyncio Task, by time running (its steps); % of the {total / 1e6:.2f} ms "
             f"the {len(tasks)} Tasks ran", head + "  task", "-" * len(head) + "  " + "-" * 30]
    for t in tasks if limit < 0 else tasks[:limit]:
        life = max(t.end_ns - t.start_ns, 1)
        awaiting = 100.0 * max(life - t.running_ns, 0) / life
        lines.append(f"{len(t.steps):>8} {t.running_ns / 1e6:11.3f} "
                     f"{100.0 * t.running_ns / total if total else 0:5.1f}% "
                     f"{life / 1e6:12.3f} {awaiting:8.1f}%  {fit_name(t.name, width)}")
        top = sorted(t.functions.items(), key=lambda kv: kv[1][1], reverse=True)[:functions]
        for name, (calls, self_ns) in top:
            lines.append(f"{'':>8} {self_ns / 1e6:11.3f} {'':>6} {calls:>12} {'calls':>9}    "
                         f"{fit_name(name, width - 2)}")
    return "\n".join(lines)
