"""``ProfilerActivity`` and ``profile(activities=...)``: torch.profiler's way of saying what to
record, mapped onto framescope's (the CPU activity means Python calls plus, with torch imported,
torch's CPU operators; other devices are accepted and recorded as unavailable)."""

from __future__ import annotations

import enum
import sys
import warnings
from typing import Iterable

__all__ = ["ProfilerActivity", "supported_activities", "resolve_activities"]


class ProfilerActivity(enum.Enum):
    """The activities ``torch.profiler.ProfilerActivity`` names, with torch's values. framescope
    records ``CPU`` (Python calls, native ranges and, with torch, its CPU operators); the device
    activities are accepted so that a torch recipe runs unchanged, and are reported unavailable
    (framescope has no GPU or accelerator tracer)."""

    CPU = 0
    XPU = 1
    MTIA = 2
    CUDA = 3
    HPU = 4
    PrivateUse1 = 5


def supported_activities() -> set[ProfilerActivity]:
    """The activities framescope records on this machine (as torch.profiler's function of the
    same name): ``{ProfilerActivity.CPU}``, whatever devices torch sees, since framescope
    records no device activity."""
    return {ProfilerActivity.CPU}


def _as_activity(value: object) -> ProfilerActivity:
    """A ProfilerActivity from ours, torch's enum (by name) or a name string."""
    if isinstance(value, ProfilerActivity):
        return value
    name = getattr(value, "name", value)
    if isinstance(name, str):
        for member in ProfilerActivity:
            if member.name.lower() == name.lower():
                return member
    raise ValueError(
        f"unknown profiler activity {value!r}: expected a ProfilerActivity "
        f"({', '.join(m.name for m in ProfilerActivity)}), framescope's or torch's")


def resolve_activities(
    activities: Iterable[object] | None, torch_ops: bool | None
) -> tuple[tuple[ProfilerActivity, ...] | None, bool, list[str]]:
    """What ``profile(activities=..., torch_ops=...)`` records: the activities as given (None
    when not given), whether torch ops are recorded, and the activities asked for that this
    machine cannot record (warned about once, here).

    torch ops follow the activities unless ``torch_ops`` is given: recorded when CPU is asked
    for and torch is already imported (a program that never imported torch has no torch op to
    record, and framescope does not import it for the program)."""
    if activities is None:
        return None, bool(torch_ops), []
    if isinstance(activities, (str, bytes)) or not hasattr(activities, "__iter__"):
        raise TypeError(f"activities must be an iterable of ProfilerActivity, not "
                        f"{type(activities).__name__}")
    asked = tuple(dict.fromkeys(_as_activity(a) for a in activities))
    unavailable = [a.name for a in asked if a not in supported_activities()]
    if unavailable:
        warnings.warn(
            f"framescope: {', '.join(unavailable)} activity unavailable (framescope records "
            f"the CPU: Python calls and torch's CPU ops); recorded as unavailable",
            stacklevel=3)
    if torch_ops is None:
        torch_ops = ProfilerActivity.CPU in asked and "torch" in sys.modules
    return asked, bool(torch_ops), unavailable
