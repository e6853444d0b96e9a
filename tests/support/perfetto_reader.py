"""Reads a .pftrace with Perfetto's official generated classes (perfetto_trace_pb2) and rebuilds
its slices the way trace_processor does: incremental clocks per sequence, interned names per
sequence, TracePacketDefaults, slices paired last-in-first-out per track. Checks the rules a
consumer relies on while reading (a descriptor for every track, resolvable iids, first packet of
a sequence clears its state)."""

from __future__ import annotations

from dataclasses import dataclass, field

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

SEQ_INCREMENTAL_STATE_CLEARED = 1
SEQ_NEEDS_INCREMENTAL_STATE = 2


@dataclass
class PSlice:
    name: str
    category: str
    start: int
    dur: int
    depth: int
    track: int
    source: tuple[str, str, int] | None = None
    args: dict[str, object] = field(default_factory=dict)


@dataclass
class Track:
    uuid: int
    parent: int | None
    name: str
    pid: int | None = None
    tid: int | None = None
    counter: bool = False


@dataclass
class PerfettoTrace:
    tracks: dict[int, Track]
    slices: list[PSlice]
    instants: list[PSlice]
    counters: dict[int, list[tuple[int, int]]]
    bytes: int
    packets: int


@dataclass
class _Seq:
    clocks: dict[int, int] = field(default_factory=dict)
    incremental: set[int] = field(default_factory=set)
    default_clock: int | None = None
    default_track: int | None = None
    names: dict[int, str] = field(default_factory=dict)
    categories: dict[int, str] = field(default_factory=dict)
    locations: dict[int, tuple[str, str, int]] = field(default_factory=dict)
    started: bool = False


def read(path: str) -> PerfettoTrace:
    data = open(path, "rb").read()
    trace = pb.Trace()
    trace.ParseFromString(data)
    tracks: dict[int, Track] = {}
    seqs: dict[int, _Seq] = {}
    stacks: dict[int, list[PSlice]] = {}
    slices: list[PSlice] = []
    instants: list[PSlice] = []
    counters: dict[int, list[tuple[int, int]]] = {}
    for p in trace.packet:
        sid = p.trusted_packet_sequence_id
        assert sid, "every packet names its sequence"
        seq = seqs.setdefault(sid, _Seq())
        if not seq.started:
            seq.started = True
            if p.HasField("interned_data") or p.HasField("trace_packet_defaults"):
                assert p.sequence_flags & SEQ_INCREMENTAL_STATE_CLEARED
        if p.sequence_flags & SEQ_INCREMENTAL_STATE_CLEARED:
            seq.names.clear()
            seq.categories.clear()
            seq.locations.clear()
        if p.HasField("clock_snapshot"):
            for c in p.clock_snapshot.clocks:
                seq.clocks[c.clock_id] = c.timestamp
                if c.is_incremental:
                    seq.incremental.add(c.clock_id)
        if p.HasField("trace_packet_defaults"):
            d = p.trace_packet_defaults
            if d.HasField("timestamp_clock_id"):
                seq.default_clock = d.timestamp_clock_id
            if d.HasField("track_event_defaults"):
                seq.default_track = d.track_event_defaults.track_uuid
        if p.HasField("interned_data"):
            assert p.sequence_flags & SEQ_NEEDS_INCREMENTAL_STATE
            for e in p.interned_data.event_names:
                assert e.iid != 0
                seq.names[e.iid] = e.name
            for e in p.interned_data.event_categories:
                seq.categories[e.iid] = e.name
            for loc in p.interned_data.source_locations:
                seq.locations[loc.iid] = (loc.file_name, loc.function_name, loc.line_number)
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            t = Track(d.uuid, d.parent_uuid if d.HasField("parent_uuid") else None, d.name)
            if d.HasField("process"):
                t.pid, t.name = d.process.pid, d.process.process_name
            if d.HasField("thread"):
                t.pid, t.tid, t.name = d.thread.pid, d.thread.tid, d.thread.thread_name
            t.counter = d.HasField("counter")
            assert d.uuid not in tracks
            tracks[d.uuid] = t
            continue
        if not p.HasField("track_event"):
            continue
        # the packet's time
        clock = p.timestamp_clock_id if p.HasField("timestamp_clock_id") else seq.default_clock
        if clock in seq.incremental:
            seq.clocks[clock] += p.timestamp
            ts = seq.clocks[clock]
        else:
            ts = p.timestamp
        ev = p.track_event
        track = ev.track_uuid if ev.HasField("track_uuid") else seq.default_track
        assert track in tracks, f"event on track {track} without a descriptor"
        if ev.type == pb.TrackEvent.TYPE_COUNTER:
            counters.setdefault(track, []).append((ts, ev.counter_value))
            continue
        name = ev.name if ev.HasField("name") else seq.names.get(ev.name_iid, None)
        if ev.type in (pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_INSTANT):
            assert name is not None, "name iid resolves"
            cats = [seq.categories[i] for i in ev.category_iids] + list(ev.categories)
            src = seq.locations[ev.source_location_iid] if ev.HasField("source_location_iid") else None
            args = {}
            for a in ev.debug_annotations:
                args[a.name] = a.string_value if a.HasField("string_value") else a.int_value
            stack = stacks.setdefault(track, [])
            s = PSlice(name, ",".join(cats), ts, -1, len(stack), track, src, args)
            if ev.type == pb.TrackEvent.TYPE_INSTANT:
                instants.append(s)
            else:
                stack.append(s)
        elif ev.type == pb.TrackEvent.TYPE_SLICE_END:
            stack = stacks.get(track, [])
            assert stack, "an end without a begin"
            s = stack.pop()
            assert ts >= s.start
            s.dur = ts - s.start
            slices.append(s)
    assert all(not s for s in stacks.values()), "every slice ends"
    return PerfettoTrace(tracks, slices, instants, counters, len(data), len(trace.packet))
