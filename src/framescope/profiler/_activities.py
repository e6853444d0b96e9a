"""``ProfilerActivity`` and ``profile(activities=...)``: torch.profiler's way of saying what to
record, mapped onto framescope's (the CPU activity means Python calls plus, with torch imported,
torch's CPU operators; other devices are accepted and recorded as unavailable)."""

from __future__ import annotations

import enum
import sys
import warnings
from typing import Iterable

__all__ = ["ProfilerActivity", "supported_activities", "resolve_activities", "check_torch_only"]


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
    # torch also takes {activity: [names]} items (per-activity options): their activities count
    keys = [k for a in activities for k in (a if isinstance(a, dict) else [a])]
    asked = tuple(dict.fromkeys(_as_activity(a) for a in keys))
    unavailable = [a.name for a in asked if a not in supported_activities()]
    if unavailable:
        warnings.warn(
            f"framescope: {', '.join(unavailable)} activity unavailable (framescope records "
            f"the CPU: Python calls and torch's CPU ops); recorded as unavailable",
            stacklevel=3)
    if torch_ops is None:
        torch_ops = ProfilerActivity.CPU in asked and "torch" in sys.modules
    return asked, bool(torch_ops), unavailable


def check_torch_only(
    *,
    with_modules: bool,
    experimental_config: object,
    execution_trace_observer: object,
    acc_events: bool,
    use_cuda: bool | None,
    custom_trace_id_callback: object,
    post_processing_timeout_s: float | None,
) -> list[str]:
    """torch.profiler.profile's keywords that framescope takes so a recipe runs unchanged: what
    they change here (the device activities they imply, for ``unavailable_activities``).

    ``with_modules`` is always on with ``with_stack`` (``nn.Module: ...`` slices);
    ``experimental_config``, ``acc_events``, ``custom_trace_id_callback`` and
    ``post_processing_timeout_s`` tune torch's Kineto collector and change nothing here.

    Raises:
        NotImplementedError: an ``execution_trace_observer`` (framescope has no execution
            trace).
    """
    del with_modules, experimental_config, acc_events, custom_trace_id_callback
    del post_processing_timeout_s
    if execution_trace_observer is not None:
        raise NotImplementedError(
            "framescope does not record torch's execution trace: profile(execution_trace_"
            "observer=...) is not supported (leave it out; the Chrome trace has the ops)")
    if use_cuda:
        warnings.warn("framescope: CUDA activity unavailable (use_cuda=True; framescope records "
                      "the CPU); recorded as unavailable", stacklevel=3)
        return ["CUDA"]
    return []
