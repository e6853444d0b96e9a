"""Putting the ranks of a job on one clock: offsets to rank 0 measured through the job's own
communication, wall-clock pairs as the fallback.

framescope's times are CLOCK_MONOTONIC nanoseconds. On one host that clock is system-wide, so
the processes of one host need no alignment (``framescope merge`` sees the same kernel boot id).
Across hosts each monotonic clock starts at its own boot, so each rank needs its offset to
rank 0's clock. Two sources, both stored in the rank's saved trace:

* **measured**: when ``torch.distributed`` or mpi4py's MPI is initialised, each rank exchanges a
  few ping-pong messages with rank 0 (NTP's method: rank 0's time taken between a send and a
  receive of the rank; the round trip with the smallest delay wins; the error is at most half
  of it). Messages go through torch.distributed's key-value store (a connection of its own to
  the job's c10d store) or MPI point-to-point messages on ``COMM_WORLD`` with tag
  :data:`MPI_TAG`, never through the job's collectives, so they cannot be mistaken for the
  program's own traffic. Before any ping, every rank says it reached the same sync point (a
  numbered round) and rank 0 decides; a rank that does not arrive within
  ``FRAMESCOPE_CLOCK_SYNC_TIMEOUT`` seconds (default 60) leaves the others with a warning and the
  fallback, never a hang.
* **wall clock** (the fallback): at the start and stop of every session, a pair of readings
  (CLOCK_MONOTONIC, CLOCK_REALTIME) taken back to back. Hosts whose wall clocks are kept by
  NTP/PTP are then aligned to within that service's accuracy (typically below a millisecond).

When ranks measure (``FRAMESCOPE_CLOCK_SYNC``): ``auto`` (default) when the launcher says the
job spans hosts (``LOCAL_WORLD_SIZE < WORLD_SIZE``, or it does not say); ``collective``
always; ``wall`` never. The decision uses only what every rank sees alike, so all ranks decide
the same. Measurements are taken when a session starts and stops, and under ``framescope run``
also right after ``torch.distributed.init_process_group`` returns, right before
``destroy_process_group`` and right after ``mpi4py.MPI`` is imported.

For tests only, ``FRAMESCOPE_TEST_CLOCK_SKEW_NS`` (one integer, or one per rank separated by
commas) shifts this process's monotonic clock as another host's would be: its recorded times and
every monotonic reading made here, not the wall clock; the process then counts as another host.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from framescope.processes import _ranks as ranks

#: MPI tag of framescope's clock messages (MPI guarantees tags up to 32767).
MPI_TAG = 32_119
_STORE_PREFIX = "framescope/clock"
_HELLO, _DECIDE, _PING, _PONG = 1, 2, 3, 4
_PINGS = 8


# ---- this process's clock ----------------------------------------------------------------------

def test_skew_ns(environ: Any = None) -> int:
    """The clock skew injected by FRAMESCOPE_TEST_CLOCK_SKEW_NS for this process (0 without).
    With one value per rank, the rank (from the launcher's environment) picks its own."""
    env = os.environ if environ is None else environ
    text = env.get("FRAMESCOPE_TEST_CLOCK_SKEW_NS", "").strip()
    if not text:
        return 0
    values = [v.strip() for v in text.split(",")]
    try:
        if len(values) == 1:
            return int(values[0])
        info = ranks.current(env)
        index = info.rank if info is not None else 0
        return int(values[index]) if index < len(values) else 0
    except ValueError:
        raise ValueError(f"FRAMESCOPE_TEST_CLOCK_SKEW_NS={text!r}: integers expected") from None


def applied_skew_ns() -> int:
    """The test skew this process applies (read once, at import)."""
    return _SKEW


def now_ns() -> int:
    """This process's CLOCK_MONOTONIC in ns, as its trace records it (with any test skew)."""
    return time.monotonic_ns() + _SKEW


def clock_pair() -> tuple[int, int]:
    """(monotonic ns, realtime ns) read back to back: of five tries, the pair whose realtime
    read took the least time between two monotonic reads."""
    best: tuple[int, int, int] | None = None
    for _ in range(5):
        m0 = time.monotonic_ns()
        r = time.time_ns()
        m1 = time.monotonic_ns()
        if best is None or m1 - m0 < best[0]:
            best = (m1 - m0, m0 + (m1 - m0) // 2, r)
    assert best is not None
    return best[1] + _SKEW, best[2]


def host_id() -> str:
    """What tells hosts apart: the kernel's boot id (processes with the same one share
    CLOCK_MONOTONIC), plus the injected skew, which makes this process another host."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip()
    except OSError:
        boot = "host:" + os.uname().nodename
    return f"{boot}+skew{_SKEW}" if _SKEW else boot


def _initial_skew() -> int:
    try:
        return test_skew_ns()
    except ValueError as exc:  # a bad test setting must not break `import framescope`
        warnings.warn(f"framescope: ignoring {exc}", stacklevel=2)
        return 0


_SKEW = _initial_skew()


# ---- measured offsets --------------------------------------------------------------------------

@dataclass(frozen=True)
class Measurement:
    """One measured offset: add ``offset_ns`` to this process's times to get rank 0's, at
    ``at_ns`` (this process's clock), within +-``error_ns``."""

    at_ns: int
    offset_ns: int
    error_ns: int
    via: str

    def as_dict(self) -> dict[str, object]:
        return {"at_ns": self.at_ns, "offset_ns": self.offset_ns, "error_ns": self.error_ns,
                "via": self.via}


class _Transport(Protocol):
    rank: int
    size: int
    via: str

    def send(self, dst: int, msg: tuple[int, ...]) -> None: ...
    def recv(self, src: int, deadline: float) -> tuple[int, ...] | None: ...


class _StoreTransport:
    """Messages as queues of torch.distributed's c10d store (``src/dst`` keys), through a
    connection of framescope's own (store.clone()), so the program's store client and its
    timeout are left alone."""

    via = "torch.distributed store"

    def __init__(self, store: Any, rank: int, size: int) -> None:
        self.store = store
        self.rank, self.size = rank, size

    def send(self, dst: int, msg: tuple[int, ...]) -> None:
        self.store.queue_push(f"{_STORE_PREFIX}/{self.rank}/{dst}", ",".join(map(str, msg)))

    def recv(self, src: int, deadline: float) -> tuple[int, ...] | None:
        import datetime

        # Past the deadline, still look once: a message may be waiting already.
        remaining = max(deadline - time.monotonic(), 0.01)
        self.store.set_timeout(datetime.timedelta(seconds=remaining))
        try:
            data = self.store.queue_pop(f"{_STORE_PREFIX}/{src}/{self.rank}")
        except Exception:  # noqa: BLE001 - DistStoreError (timeout) or a lost store
            return None
        text = data.decode() if isinstance(data, bytes) else str(data)
        return tuple(int(v) for v in text.split(","))


class _MpiTransport:
    """MPI point-to-point messages on COMM_WORLD with framescope's tag, polled with Iprobe so
    that a missing peer costs a timeout rather than a hang."""

    via = "MPI"

    def __init__(self, mpi: Any) -> None:
        self.mpi = mpi
        self.comm = mpi.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.pending: list[Any] = []

    def send(self, dst: int, msg: tuple[int, ...]) -> None:
        self.pending = [r for r in self.pending if not r.Test()]
        self.pending.append(self.comm.isend(msg, dest=dst, tag=MPI_TAG))

    def recv(self, src: int, deadline: float) -> tuple[int, ...] | None:
        spins = 0
        while not self.comm.Iprobe(source=src, tag=MPI_TAG):
            if time.monotonic() > deadline:
                return None
            spins += 1
            if spins > 10_000:
                time.sleep(0.0005)
        msg = self.comm.recv(source=src, tag=MPI_TAG)
        return tuple(int(v) for v in msg)


_rounds: dict[str, int] = {}
_transport_cache: dict[str, Any] = {}
_lock = threading.Lock()


def _recv_round(t: _Transport, src: int, kind: int, round_: int,
                deadline: float) -> tuple[int, ...] | None:
    """The next message of round ``round_`` from ``src``; older rounds' leftovers (of a peer that
    gave up) are dropped. None at the deadline or when the peer is at another round."""
    while True:
        msg = t.recv(src, deadline)
        if msg is None or len(msg) < 2:
            return None
        if msg[1] < round_:
            continue
        if msg[1] > round_ or msg[0] != kind:
            return None
        return msg


def measure(t: _Transport, timeout_s: float) -> tuple[Measurement | None, str | None]:
    """One sync round over ``t``: rank 0 answers, every other rank measures its offset. Returns
    (measurement or None, warning or None)."""
    key = t.via
    round_ = _rounds.get(key, 0)
    _rounds[key] = round_ + 1
    start = time.monotonic()
    if t.rank == 0:
        # Every rank has `timeout_s` to arrive; then each is served with a fresh `timeout_s`.
        ready = []
        for r in range(1, t.size):
            if _recv_round(t, r, _HELLO, round_, start + timeout_s) is not None:
                ready.append(r)
        for r in range(1, t.size):
            t.send(r, (_DECIDE, round_, int(r in ready)))
        for r in ready:
            deadline = time.monotonic() + timeout_s
            for _ in range(_PINGS):
                if _recv_round(t, r, _PING, round_, deadline) is None:
                    break
                t.send(r, (_PONG, round_, now_ns()))
        missing = sorted(set(range(1, t.size)) - set(ready))
        warning = None
        if missing:
            warning = (f"framescope: clock sync: rank(s) {missing} did not reach sync round "
                       f"{round_} within {timeout_s:g}s; their times are aligned by the wall clock")
        return Measurement(now_ns(), 0, 0, t.via), warning
    t.send(0, (_HELLO, round_))
    # Rank 0 decides within `timeout_s` of its own arrival, which may be up to `timeout_s` later.
    decision = _recv_round(t, 0, _DECIDE, round_, start + 2 * timeout_s)
    if decision is None or len(decision) < 3 or not decision[2]:
        return None, (f"framescope: clock sync: rank 0 did not take part in sync round {round_} "
                      f"(within {timeout_s:g}s); this rank's times are aligned by the wall clock")
    best: Measurement | None = None
    # Rank 0 serves the ranks one after another: this one's turn may take a while to come.
    deadline = time.monotonic() + timeout_s + 0.01 * t.size
    for _ in range(_PINGS):
        t1 = now_ns()
        t.send(0, (_PING, round_))
        pong = _recv_round(t, 0, _PONG, round_, deadline)
        t3 = now_ns()
        if pong is None or len(pong) < 3:
            break
        half_rtt = (t3 - t1 + 1) // 2
        if best is None or half_rtt < best.error_ns:
            best = Measurement(t1 + (t3 - t1) // 2, pong[2] - (t1 + (t3 - t1) // 2), half_rtt,
                               t.via)
    if best is None:
        return None, f"framescope: clock sync: no answer from rank 0 in round {round_}"
    return best, None


# ---- when and over what ------------------------------------------------------------------------

def _mode() -> str:
    mode = os.environ.get("FRAMESCOPE_CLOCK_SYNC", "auto").strip().lower() or "auto"
    if mode not in ("auto", "collective", "wall"):
        warnings.warn(f"framescope: FRAMESCOPE_CLOCK_SYNC={mode!r} is not auto, collective or "
                      "wall; using auto", stacklevel=3)
        return "auto"
    return mode


def _timeout() -> float:
    text = os.environ.get("FRAMESCOPE_CLOCK_SYNC_TIMEOUT", "60")
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        warnings.warn(f"framescope: FRAMESCOPE_CLOCK_SYNC_TIMEOUT={text!r} is not a positive "
                      "number of seconds; using 60", stacklevel=3)
        return 60.0
    return value


def _torch_transport() -> _StoreTransport | None:
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if not (dist.is_available() and dist.is_initialized()):
            return None
        store = dist.distributed_c10d._get_default_store()
        rank, size = dist.get_rank(), dist.get_world_size()
    except Exception:  # noqa: BLE001 - a torch without these: no measured sync
        return None
    cached = _transport_cache.get("torch")
    if cached is not None and cached[0] is store:
        return cached[1]  # type: ignore[no-any-return]
    try:
        own = store.clone()
    except Exception:  # noqa: BLE001 - stores that cannot clone
        return None
    transport = _StoreTransport(own, rank, size)
    _transport_cache["torch"] = (store, transport)
    return transport


def _mpi_transport() -> _MpiTransport | None:
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None:
        return None
    try:
        if not mpi.Is_initialized() or mpi.Is_finalized():
            return None
        if not mpi.Is_thread_main() and mpi.Query_thread() < mpi.THREAD_MULTIPLE:
            return None  # MPI may only be called from its main thread here
    except Exception:  # noqa: BLE001
        return None
    cached = _transport_cache.get("mpi")
    if cached is None:
        cached = _transport_cache["mpi"] = _MpiTransport(mpi)
    return cached


#: Measurements of this process, in order (sessions keep those taken while they ran).
measurements: list[Measurement] = []
#: Set in processes that must not measure (children followed by framescope run).
disabled = False


def wanted(info: ranks.RankInfo | None) -> bool:
    """Whether this process measures its offset (see the module docs)."""
    if disabled or info is None or info.world_size < 2:
        return False
    mode = _mode()
    if mode == "wall":
        return False
    return mode == "collective" or info.single_host is not True


def sync_point(where: str) -> Measurement | None:
    """Measures this rank's offset to rank 0 now, if wanted and a transport is initialised
    (torch.distributed first, then MPI). Every rank of the job must call it at the same point of
    the program; a missing peer costs the timeout and gives a warning. ``where`` names the point
    in warnings."""
    info = ranks.current()
    if not wanted(info):
        return None
    with _lock:
        transport: _Transport | None = _torch_transport() or _mpi_transport()
        if transport is None:
            return None
        if info is not None and transport.size != info.world_size:
            return None  # a sub-job (a communicator of another size): not the launcher's ranks
        m, warning = measure(transport, _timeout())
    if warning:
        print(f"{warning} (at {where})", file=sys.stderr)
    if m is not None:
        measurements.append(m)
    return m


def install_hooks() -> None:
    """Under ``framescope run``: sync right after ``init_process_group`` and MPI's
    initialisation (import of ``mpi4py.MPI``), and right before ``destroy_process_group``,
    where every rank of a job is at the same point of its program."""
    from framescope import _import_hooks as import_hooks

    import_hooks.after_import("torch.distributed", _wrap_torch_distributed)
    def after_mpi_init(module: object) -> None:
        sync_point("MPI initialisation")

    import_hooks.after_import("mpi4py.MPI", after_mpi_init)


def _wrap_torch_distributed(dist: Any) -> None:
    import functools

    init = getattr(dist, "init_process_group", None)
    destroy = getattr(dist, "destroy_process_group", None)
    if init is None or destroy is None or getattr(init, "_framescope_wrapped", False):
        return

    @functools.wraps(init)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        result = init(*args, **kwargs)
        sync_point("init_process_group")
        return result

    @functools.wraps(destroy)
    def destroy_process_group(*args: Any, **kwargs: Any) -> Any:
        group = args[0] if args else kwargs.get("group")
        if group is None:  # the default group: the whole job
            sync_point("destroy_process_group")
        return destroy(*args, **kwargs)

    wrapped: list[tuple[str, Callable[..., Any]]] = [("init_process_group", init_process_group),
                                                     ("destroy_process_group", destroy_process_group)]
    for name, fn in wrapped:
        setattr(fn, "_framescope_wrapped", True)
        setattr(dist, name, fn)
