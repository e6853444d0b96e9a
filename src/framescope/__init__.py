"""framescope: a low-overhead profiler and PEP 523 frame-evaluation toolkit for CPython.

Python calls are recorded from a PEP 523 frame hook, C++ and C ranges through the same C++ core,
all into one timeline per thread.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from framescope._core import record_function
from framescope._public_functions import is_enabled, mark, record_memory
from framescope import eval_frame
from framescope._version import __version__ as __version__
from framescope.analysis._events import Event, EventList, MemoryEvent
from framescope.analysis._key_averages import FunctionEventAvg, KeyAverages
from framescope.profiler._profile import label_calls, load, profile
from framescope.profiler._schedule import ProfilerAction, ScheduleError, schedule, trace_handler
from framescope.profiler._activities import ProfilerActivity, supported_activities

#: torch.profiler's name of ``trace_handler`` (the same files), for the one-line import swap.
tensorboard_trace_handler = trace_handler

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
    "ProfilerActivity",
    "record_function",
    "record_memory",
    "schedule",
    "ScheduleError",
    "sql",
    "supported_activities",
    "tensorboard_trace_handler",
    "trace_handler",
]


def get_include() -> str:
    """Directory holding ``framescope/c_api.h`` and the C++ headers, for extension builds."""
    return os.path.join(os.path.dirname(__file__), "include")


def sql(path: str | os.PathLike[str], query: str,
        result: Literal["pandas", "arrow"] = "pandas") -> Any:
    """Runs SQL (DuckDB) on a saved trace, a .parquet export or a dataset directory; returns a
    pandas DataFrame (``result="arrow"``: a pyarrow Table). The table is ``events``; named views
    and macros are listed in framescope.tables._sql and docs/tables.md. Needs
    ``pip install 'framescope[sql]'``."""
    from framescope.tables._sql import sql as run

    return run(path, query, result)


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext framescope``: adds the ``%%framescope`` / ``%framescope`` magics
    (see framescope.integrations._jupyter)."""
    from framescope.integrations._jupyter import load_ipython_extension as load

    load(ipython)


# FRAMESCOPE_LISTEN=1: accept `framescope attach PID` through a Unix socket (docs/attach.md).
if os.environ.get("FRAMESCOPE_LISTEN", "") not in ("", "0"):
    from framescope.attach._listen import listen_from_environment as _listen

    _listen()
    del _listen
