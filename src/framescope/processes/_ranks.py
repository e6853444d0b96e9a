"""Which rank of a multi-process job this process is, read from its launcher's environment.

torchrun (and torch.distributed.launch) set ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and
``LOCAL_WORLD_SIZE``; Open MPI's mpirun sets ``OMPI_COMM_WORLD_RANK``/``_SIZE``/``_LOCAL_RANK``/
``_LOCAL_SIZE``; PMI launchers (MPICH's and Intel MPI's Hydra, Slurm's srun with PMI) set
``PMI_RANK``/``PMI_SIZE`` (Hydra adds ``MPI_LOCALRANKID``/``MPI_LOCALNRANKS``). The first family
found, in that order, wins. Under ``framescope run`` a rank writes its own trace, named by its
rank (:func:`rank_output`), for ``framescope merge``.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Mapping

# (launcher, rank, world size, local rank, local world size) variable names
_FAMILIES = [
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
]


@dataclass(frozen=True)
class RankInfo:
    """A process's place in a job: its global rank among ``world_size``, and on its host."""

    rank: int
    world_size: int
    local_rank: int | None
    local_world_size: int | None
    launcher: str

    @property
    def label(self) -> str:
        """What merged traces call this rank's process group: ``"rank N"``."""
        return f"rank {self.rank}"

    @property
    def single_host(self) -> bool | None:
        """True when every rank runs on this host (so all share CLOCK_MONOTONIC), False when
        the job spans hosts, None when the launcher does not say."""
        if self.local_world_size is None:
            return None
        return self.local_world_size >= self.world_size

    def as_dict(self) -> dict[str, object]:
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "local_rank": self.local_rank,
            "local_world_size": self.local_world_size,
            "launcher": self.launcher,
        }


def _int(environ: Mapping[str, str], name: str) -> int | None:
    text = environ.get(name)
    if text is None or text.strip() == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not an integer") from None


def current(environ: Mapping[str, str] | None = None) -> RankInfo | None:
    """The rank this process is, or None outside a launcher. A launcher variable that is not a
    valid number (or a rank outside ``0..world_size-1``) gives a warning and None: the process
    is then profiled as a lone process rather than mislabelled."""
    env = os.environ if environ is None else environ
    for launcher, rank_var, size_var, local_var, local_size_var in _FAMILIES:
        if rank_var not in env or size_var not in env:
            continue
        try:
            rank, size = _int(env, rank_var), _int(env, size_var)
            local, local_size = _int(env, local_var), _int(env, local_size_var)
            if rank is None or size is None:
                raise ValueError(f"{rank_var} and {size_var} must both be set")
            if size < 1 or not 0 <= rank < size:
                raise ValueError(f"{rank_var}={rank} is not a rank of {size_var}={size}")
        except ValueError as exc:
            warnings.warn(f"framescope: ignoring the {launcher} environment: {exc}", stacklevel=2)
            return None
        return RankInfo(rank, size, local, local_size, launcher)
    return None


def rank_output(path: str | None, info: RankInfo) -> str:
    """The file a rank writes for the output ``path`` of ``framescope run``: ``{rank}`` in the
    path is replaced by the rank; otherwise ``.rankN`` goes before the extension
    (``trace.json`` -> ``trace.rank1.json``); without a path, ``rankN.fstrace``."""
    if path is None:
        return f"rank{info.rank}.fstrace"
    if "{rank}" in path:
        return path.replace("{rank}", str(info.rank))
    head, tail = os.path.split(path)
    for ext in (".speedscope.json.gz", ".speedscope.json", ".json.gz", ".collapsed.gz"):
        if tail.endswith(ext) and len(tail) > len(ext):
            return os.path.join(head, f"{tail[: -len(ext)]}.rank{info.rank}{ext}")
    stem, ext = os.path.splitext(tail)
    if not stem:  # ".json": no stem to keep
        stem, ext = tail, ""
    return os.path.join(head, f"{stem}.rank{info.rank}{ext}")


def expand_rank(path: os.PathLike[str] | str) -> os.PathLike[str] | str:
    """``path`` with ``{rank}`` replaced by this process's rank (0 outside a launcher), for
    ``profile.save("rank{rank}.fstrace")`` in a script that every rank runs."""
    try:
        text = os.fspath(path)
    except TypeError:  # not a path: the caller's check names the argument
        return path
    if not isinstance(text, str) or "{rank}" not in text:
        return path
    info = current()
    return text.replace("{rank}", str(info.rank if info is not None else 0))
