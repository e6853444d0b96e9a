"""framescope: a low-overhead profiler and PEP 523 frame-evaluation toolkit for CPython.

Python calls are recorded from a PEP 523 frame hook, C++ and C ranges through the same C++ core,
all into one timeline per thread.
"""

from __future__ import annotations

import os
from typing import Any

from framescope._core import record_function
from framescope._public_functions import is_enabled, mark, record_memory
from framescope import eval_frame
from framescope._version import __version__ as __version__
from framescope.events import Event, EventList, MemoryEvent
from framescope.key_averages import FunctionEventAvg, KeyAverages
from framescope.profiler import label_calls, load, profile
from framescope.schedule import ProfilerAction, ScheduleError, schedule, trace_handler

__all__ = [
    "Event",
    "EventList",
    "eval_frame",
    "FunctionEventAvg",
    "get_include",
    "is_enabled",
    "KeyAverages",
    "label_calls",
    "load",
    "load_ipython_extension",
    "MemoryEvent",
    "mark",
    "profile",
    "ProfilerAction",
    "record_function",
    "record_memory",
    "schedule",
    "ScheduleError",
    "trace_handler",
]


def get_include() -> str:
    """Directory holding ``framescope/c_api.h`` and the C++ headers, for extension builds."""
    return os.path.join(os.path.dirname(__file__), "include")


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext framescope``: adds the ``%%framescope`` / ``%framescope`` magics
    (see framescope.jupyter)."""
    from framescope.jupyter import load_ipython_extension as load

    load(ipython)
