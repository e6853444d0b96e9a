"""The top-level members torch.profiler writes in its Chrome/Kineto JSON and its readers read
(torch-tb-profiler, HTA): ``traceName``, ``distributedInfo``, the recording options, and the
user's ``add_metadata``/``add_metadata_json`` keys; and the Chrome export that writes them."""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import TYPE_CHECKING, Any, Mapping

from framescope.processes import _clock_sync as clock_sync
from framescope.processes import _ranks as ranks

if TYPE_CHECKING:
    from framescope._core import Trace


def metadata_value(value: str) -> str:
    """``add_metadata``'s value as the JSON text torch stores (a string)."""
    if not isinstance(value, str):
        raise TypeError(f"add_metadata: value must be a str, not {type(value).__name__} "
                        "(add_metadata_json takes JSON text)")
    return json.dumps(value)


def metadata_json(key: str, value: str) -> str:
    """``add_metadata_json``'s value, checked to be one JSON value (it is written verbatim)."""
    if not isinstance(key, str) or not isinstance(value, str):
        raise TypeError("add_metadata_json(key, value) takes two str")
    try:
        json.loads(value)
    except ValueError as exc:
        raise ValueError(f"add_metadata_json: the value of {key!r} is not valid JSON ({exc})") \
            from None
    return value


def distributed_info() -> dict[str, Any] | None:
    """torch's ``distributedInfo``: from torch.distributed when a process group is initialized
    (torch's own fields), else from the launcher's environment (framescope.processes._ranks), else None."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            info: dict[str, Any] = {
                "backend": dist.get_backend(),
                "rank": dist.get_rank(),
                "world_size": dist.get_world_size(),
                "pg_count": dist.get_pg_count(),
            }
            try:
                info["pg_config"] = dist.distributed_c10d._get_all_pg_configs()
            except Exception:  # (a private function of torch's; its absence loses one field)
                pass
            return info
    except Exception:
        pass
    rank = ranks.current()
    if rank is None:
        return None
    return {"backend": "", "rank": rank.rank, "world_size": rank.world_size, "pg_count": 0}


def top_level_members(path: str, options: Mapping[str, Any], metadata: Mapping[str, str],
                      unavailable: list[str]) -> str:
    """The ``"key":value,`` members written first in the JSON object (torch's order)."""
    members: dict[str, str] = {
        "with_stack": str(int(bool(options.get("with_stack")))),
        "profile_memory": str(int(bool(options.get("profile_memory")))),
        "record_shapes": str(int(bool(options.get("record_shapes")))),
        "host_name": json.dumps(socket.gethostname()),
        "traceName": json.dumps(os.path.abspath(path)),
    }
    info = distributed_info()
    if info is not None:
        members["distributedInfo"] = json.dumps(info, default=str)
    if unavailable:
        members["framescopeUnavailableActivities"] = json.dumps(unavailable)
    members.update(metadata)
    return "".join(f"{json.dumps(k)}:{v},\n" for k, v in members.items())


def export_chrome(trace: Trace, path: str, options: Mapping[str, Any],
                  metadata: Mapping[str, str], unavailable: list[str]) -> None:
    """Writes the Chrome JSON (``.gz``: compressed) with torch's top-level members, and
    baseTimeNanoseconds in Unix time as torch's (the events' times stay the trace's)."""
    monotonic, realtime = clock_sync.clock_pair()
    # With torch's tensor memory recorded, the Python heap's samples stay counters only: as
    # "[memory]" instants they would mix into the tensor memory's curve (docs/torch.md).
    trace._export_chrome(path, top_level_members(path, options, metadata, unavailable),
                         realtime - monotonic,
                         python_heap_instants=not options.get("torch_memory"))
