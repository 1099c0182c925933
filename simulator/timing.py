"""The timing tier: when each reference delivery arrives, computed over arrays (DESIGN.md §8).

Replication transparency (§III) fixes the *content* of every delivery: each application gets exactly
the records of the non-replicated reference run.  What a deployment changes is only *when* each of
them arrives, and that is a function of paths and link delays:

1. **Content with lineage.**  The sources' records over the window (the same generator the reference
   tier uses, :func:`simulator.sources.messages`) go through the query's own operators once, in the
   order of the plan, as the reference run of :func:`engine.replay.replay` does; every record carries
   its row number as a trailing field, so each output row knows the input rows it came from (a Union
   row: its port and row; a Filter row: its row; a Join row: its left and right rows, §IV-E).  The
   operator code decides what matches; nothing here re-implements a predicate or a window.
2. **Times per replica.**  For every logical node (entry point, operator, application) an array
   ``[rows, replicas]`` of the simulated time each replica emits each row:

   * a hop ``u → r`` between servers leaves at ``u``'s emission time and arrives after the trace's
     one-way delay at send time (:mod:`simulator.network` rule 1); a link is FIFO (rule 2: a running
     maximum over its sends in time order); a send during an outage leaves when the trace first
     shows the pair again, with that frame's delay (``outage = "hold"``, rule 3); a hop inside one
     server takes no time (the node core routes it);
   * a replica's input row is ready at the **first** arrival over its upstream replicas (the
     duplicate filter, §IV-B) plus the per-record CPU cost of its kind (``[processing_us]``);
   * Union, Filter and Map emit a row when its input row is ready; a Join emits a pair when the
     *second* of its two rows is ready (Alg. 2: the pair is made by whichever arrives second);
   * an application's delivery time is its input row's first arrival (+ its CPU cost).

3. **Crashes** remove paths: a crashed server's replicas emit nothing from the crash on, and what is
   in flight to or from it then is lost (its connections drop, :meth:`Simulation.crash`).

What it does not model (``docs/simulator.md``, "The timing tier", has the measured differences):
the node's CPU as a queue (a record's cost is added, waiting behind other batches is not), FIFO
between messages of different operators or control messages on the same link, a peer time-out that
drops a connection in a long outage (the reference then replays after a redial), and batches
(every record is its own message).  It refuses what it cannot time: punctuation-driven operators
(aggregates, ordered applications), ``outage = "drop"``, restarts, cuts, congestion, spikes, bandwidth,
a ``[coordinator]`` and engine modes other than replication.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa

from replicast.engine.node import Mode
from replicast.operators.plan import plan
from replicast.operators.record import Record
from replicast.simulator.deploy import deploy
from replicast.simulator.scenario import ScenarioError
from replicast.simulator.sources import messages, reference_records

#: "Never": a row a replica does not emit (crashed, lost, or a link that never comes back).
NEVER = np.int64(2**62)
#: Operator kinds whose output rows follow from input rows without waiting for punctuations.
TIMED_KINDS = ("union", "filter", "map", "join")


class TimingUnsupported(ScenarioError):
    """The scenario uses something the timing tier does not time (the reference tier does)."""


class Rows:
    """The rows of one logical stream (a source stream, an operator's or an application's output).

    ``parents`` holds, per input port, the input row of each row (Join: left and right; Union: the
    row in the input ``port`` says).  A Filter's rows are its input's rows: their records are made
    only when asked for (an application's input needs only times), and so is the tagged copy an
    operator reads (:func:`_tagged`, made once for every consumer)."""

    def __init__(self, records: list[Record] | None, ts: np.ndarray, parents: tuple[np.ndarray, ...] = (),
                 port: np.ndarray | None = None, of: "Rows | None" = None):
        self._records, self.ts, self.parents, self.port, self._of = records, ts, parents, port, of
        self._tagged: list[Record] | None = None

    @property
    def records(self) -> list[Record]:
        if self._records is None:
            source = self._of.records
            self._records = [source[i] for i in self.parents[0].tolist()]
        return self._records

    def tagged(self) -> list[Record]:
        if self._tagged is None:
            self._tagged = _tagged(self.records)
        return self._tagged

    def __len__(self) -> int:
        return len(self.ts)


# -- 1. content with lineage ----------------------------------------------------------------------

def _tagged(records: list[Record]) -> list[Record]:
    """Each record with its row number appended (operators address fields by position, so a trailing
    field changes nothing they compute and comes back in their outputs)."""
    return [(*r, i) for i, r in enumerate(records)]


def operator_rows(query: Any, name: str, inputs: list[Rows]) -> Rows:
    """``name``'s output rows from its inputs' rows, by the operator's own code, with lineage."""
    spec = query.operators[name]
    if spec.kind not in TIMED_KINDS:
        raise TimingUnsupported(f"{query.source}: operator {name!r} is a {spec.kind}; the timing tier times "
                                f"{', '.join(TIMED_KINDS)} (its outputs wait for punctuations); use the "
                                f"reference tier")
    if spec.kind == "union":
        records = [r for rows in inputs for r in rows.records]
        port = np.concatenate([np.full(len(rows), p, np.int32) for p, rows in enumerate(inputs)]
                              or [np.empty(0, np.int32)])
        row = np.concatenate([np.arange(len(rows)) for rows in inputs] or [np.empty(0, np.int64)])
        ts = np.concatenate([rows.ts for rows in inputs] or [np.empty(0, np.int64)])
        return Rows(records, ts, (row,), port)
    operator = query.new_operator(name)
    if spec.kind == "filter":
        out = operator.on_batch(0, inputs[0].tagged())
        parent = np.array([r[-1] for r in out], np.int64)
        return Rows(None, inputs[0].ts[parent], (parent,), of=inputs[0])
    if spec.kind == "map":          # a new record per input: one call per record keeps the lineage
        records, parent = [], []
        for i, record in enumerate(inputs[0].records):
            made = operator.on_batch(0, [record])
            records.extend(made)
            parent.extend([i] * len(made))
        return Rows(records, np.array([r[0] for r in records], np.int64), (np.array(parent, np.int64),))
    # Join: every left row buffered, then every right row probes them: each pair once (Alg. 2).
    width = len(query.schemas[spec.inputs[0]].names) + 1        # ts, left fields (then the tag)
    pairs = operator.on_batch(0, inputs[0].tagged())
    pairs += operator.on_batch(1, inputs[1].tagged())
    records = [(p[0], *p[1:width], *p[width + 1:-1]) for p in pairs]
    left = np.array([p[width] for p in pairs], np.int64)
    right = np.array([p[-1] for p in pairs], np.int64)
    return Rows(records, np.array([r[0] for r in records], np.int64), (left, right))


# -- 2. the network over arrays --------------------------------------------------------------------

class Links:
    """One-way delays of the links a deployment uses, frame by frame (int64 µs; -1 = outage), for the
    frames ``[first, last]``; ``pairs`` are the (server, server) links needed."""

    def __init__(self, trace: Any, servers: dict[str, int], origin: int, first: int, last: int,
                 pairs: list[tuple[str, str]] | None = None):
        self.interval = trace.interval_us
        self.origin = origin
        self.last_frame = trace.n_frames - 1
        self.first = first
        if pairs is None:
            pairs = [(a, b) for a in servers for b in servers if a != b]
        self.column = {pair: i for i, pair in enumerate(pairs)}
        src = np.array([servers[a] for a, _ in pairs], np.intp)
        dst = np.array([servers[b] for _, b in pairs], np.intp)
        self._trace, self._pairs, self._beyond = trace, list(zip(src.tolist(), dst.tolist())), {}
        count = last - first + 1
        # int32 (µs up to 35 min; frame numbers): an hour of 10-s frames over 3000 links is 5 MB each
        self.delays = np.empty((count, len(pairs)), np.int32)
        for f in range(first, last + 1):
            rtt = trace.frame(f)[src, dst].astype(np.float64)
            # round(rtt * 500) as TraceStore.one_way_us and Network._frame_delays do
            self.delays[f - first] = np.where(np.isnan(rtt), -1, np.rint(np.nan_to_num(rtt) * 500.0))
        # Hold mode: for each frame, the first frame at or after it in which the pair is measured.
        ahead = np.where(self.delays >= 0, np.arange(count, dtype=np.int32)[:, None], np.int32(count))
        self.recovers = np.minimum.accumulate(ahead[::-1], axis=0)[::-1]   # == count: not in these frames

    def _delay(self, column: int, frame: int) -> int:
        """Link ``column``'s one-way delay in any frame of the trace (-1: an outage)."""
        a, b = self._pairs[column]
        rtt = float(self._trace.frame(frame)[a, b])
        return -1 if rtt != rtt else round(rtt * 500.0)

    def _recovery(self, column: int, frame: int) -> int:
        """The first frame at or after ``frame`` in which link ``column`` is measured (NEVER: none)."""
        loaded = self.first + len(self.delays)
        if self.first <= frame < loaded:
            found = int(self.recovers[frame - self.first, column]) + self.first
            if found < loaded:
                return found
            frame = loaded
        key = (column, frame)
        if key not in self._beyond:          # an outage past the frames read at once: rare, scalar
            self._beyond[key] = next((f for f in range(frame, self.last_frame + 1) if self._delay(column, f) >= 0),
                                     int(NEVER))
        return self._beyond[key]

    def arrive(self, a: str, b: str, sent: np.ndarray) -> np.ndarray:
        """Arrival at ``b`` of messages leaving ``a`` at ``sent`` (NEVER: not sent), FIFO on the link."""
        column = self.column[(a, b)]
        live = sent < NEVER
        t = np.where(live, sent, self.origin)
        frame = np.clip((t - self.origin) // self.interval, 0, self.last_frame)
        relative = frame - self.first
        inside = (relative >= 0) & (relative < len(self.delays))
        delay = np.empty(len(t), np.int64)
        delay[inside] = self.delays[relative[inside], column]
        if not inside.all():                 # sent after the frames read (a long hold upstream)
            delay[~inside] = [self._delay(column, f) for f in frame[~inside].tolist()]
        held = delay < 0
        arrival = t + delay
        if held.any():
            recover = self._recoveries(column, frame[held])
            never = recover >= NEVER
            recover = np.where(never, self.first, recover)
            until = self.origin + recover * self.interval
            arrival[held] = np.where(never, NEVER, until + self._delays_at(column, recover))
        arrival[~live] = NEVER
        return fifo(frame - frame.min(), arrival, int(frame.max() - frame.min()) + 1)

    def _recoveries(self, column: int, frames: np.ndarray) -> np.ndarray:
        """:meth:`_recovery` for many frames: from the table where it answers, else one by one."""
        relative = frames - self.first
        inside = (relative >= 0) & (relative < len(self.delays))
        out = np.empty(len(frames), np.int64)
        out[inside] = self.recovers[relative[inside], column].astype(np.int64) + self.first
        redo = ~inside | (out >= self.first + len(self.delays))
        if redo.any():
            out[redo] = [self._recovery(column, f) for f in frames[redo].tolist()]
        return out

    def _delays_at(self, column: int, frames: np.ndarray) -> np.ndarray:
        relative = frames - self.first
        inside = (relative >= 0) & (relative < len(self.delays))
        out = np.empty(len(frames), np.int64)
        out[inside] = self.delays[relative[inside], column]
        if not inside.all():
            out[~inside] = [self._delay(column, f) for f in frames[~inside].tolist()]
        return out


def fifo(frame: np.ndarray, arrival: np.ndarray, frames: int) -> np.ndarray:
    """Rule 2 of :mod:`simulator.network`: no message overtakes one sent earlier on its link.

    Within one frame a link's arrival is a non-decreasing function of the send time (``t + d``, or
    one recovery time for a whole held outage), so the running maximum over sends in time order is
    ``max(arrival, the largest arrival of the sends of earlier frames)``: a maximum per frame and a
    prefix maximum over frames, without sorting the sends.  (NEVER, a lost message, holds nothing up.)
    """
    if len(arrival) < 2:
        return arrival
    finite = arrival < NEVER
    latest = np.full(frames, -1, np.int64)
    np.maximum.at(latest, frame[finite], arrival[finite])
    before = np.empty(frames, np.int64)            # the largest arrival of the frames before each one
    before[0] = -1
    np.maximum.accumulate(latest[:-1], out=before[1:])
    bound = before[frame]
    if not (finite & (bound > arrival)).any():
        return arrival                             # nothing overtook anything (the common case)
    return np.where(finite, np.maximum(arrival, bound), NEVER)


# -- 3. runs -------------------------------------------------------------------------------------------

@dataclass
class Deployed:
    """One configuration (kmax × deployment) of a prepared scenario, ready to be timed window by window."""

    kmax: int
    deployment: str
    placement: dict[str, list[str]]
    physical: Any
    cost: dict[str, float]
    crashes: dict[str, int]
    pairs: list[tuple[str, str]]
    upstreams: dict[tuple[Any, int], list[Any]]   # (replica, port) -> the replicas feeding it


def deployed(prepared: Any, kmax: int, deployment: str | None = None) -> Deployed:
    from replicast.simulator.run import replica_server

    scenario, query = prepared.scenario, prepared.query
    if deployment is not None and deployment != scenario.deployment:
        scenario = replace(scenario, deployment=deployment)
    check_supported(scenario, query)
    placement = deploy(scenario, query, prepared.sources, list(prepared.servers), kmax, prepared.placement_network)
    physical = plan(query, {name: len(nodes) for name, nodes in placement.items()})
    cost_us = scenario.processing_us
    cost = {name: cost_us.get("entry", 0.0) for name in query.streams}
    cost.update({name: cost_us.get(spec.kind, 0.0) for name, spec in query.operators.items()})
    cost.update({name: cost_us.get("application", 0.0) for name in query.applications})
    crashes: dict[str, int] = {}
    for i, fault in enumerate(scenario.faults, start=1):
        server = replica_server(placement, fault.target[0], f"{scenario.path}: [[faults]] #{i}")
        crashes[server] = min(crashes.get(server, NEVER), prepared.start + fault.from_us)
    homes = {source.stream: source.server for source in prepared.sources}
    pairs = {(homes[stream], server) for stream in query.streams for server in placement[stream]}
    pairs |= {(placement[s.source.name][s.source.index], placement[s.target.name][s.target.index])
              for s in physical.stream_replicas}
    upstreams: dict[tuple[Any, int], list[Any]] = {}
    for s in physical.stream_replicas:              # in plan order: the duplicate filter's
        upstreams.setdefault((s.target, s.port), []).append(s.source)
    return Deployed(kmax, scenario.deployment, placement, physical, cost, crashes,
                    sorted((a, b) for a, b in pairs if a != b), upstreams)


def time_window(prepared: Any, config: Deployed, window: "Window", links: Links) -> dict[str, np.ndarray]:
    """Per application, the arrival time of each row of its input in ``window`` (NEVER: not delivered)."""
    query, placement, physical, cost, crashes = (prepared.query, config.placement, config.physical, config.cost,
                                                 config.crashes)
    rows = window.rows
    emitted: dict[str, np.ndarray] = {}        # name -> [rows, replicas] emission times

    def alive(server: str, t: np.ndarray) -> np.ndarray:
        crash = crashes.get(server)
        return t if crash is None else np.where(t >= crash, NEVER, t)

    def hop(a: str, b: str, sent: np.ndarray) -> np.ndarray:
        if a == b:
            return sent
        arrival = links.arrive(a, b, sent)
        for server in (a, b):          # in flight when either end crashed: lost with the connection
            crash = crashes.get(server)
            if crash is not None:
                arrival = np.where(arrival >= crash, NEVER, arrival)
        return arrival

    def ready(name: str, index: int, port: int, upstream: str) -> np.ndarray:
        """When replica ``name#index`` has processed each row of its input ``port`` (first copy)."""
        target = placement[name][index]
        times = emitted[upstream]
        best = None
        for source in config.upstreams.get((physical.replicas[name][index], port), ()):
            at = hop(placement[upstream][source.index], target, times[:, source.index])
            best = at if best is None else np.minimum(best, at)
        return alive(target, _plus(best, cost[name]))

    for stream in query.streams:
        times = np.empty((len(rows[stream].ts), len(placement[stream])), np.int64)
        for e, server in enumerate(placement[stream]):
            times[:, e] = alive(server, _plus(hop(window.homes[stream], server, window.published[stream]),
                                              cost[stream]))
        emitted[stream] = times
    for name, spec in query.operators.items():
        out = rows[name]
        times = np.empty((len(out.ts), len(placement[name])), np.int64)
        for r in range(len(placement[name])):
            ports = [ready(name, r, p, upstream) for p, upstream in enumerate(spec.inputs)]
            if spec.kind == "union":
                stacked = np.empty(len(out.ts), np.int64)
                for p, at in enumerate(ports):
                    mine = out.port == p
                    stacked[mine] = at[out.parents[0][mine]]
                times[:, r] = stacked
            elif spec.kind == "join":
                times[:, r] = np.maximum(ports[0][out.parents[0]], ports[1][out.parents[1]])
            else:
                times[:, r] = ports[0][out.parents[0]]
        emitted[name] = times
    return {app: ready(app, 0, 0, spec.input) for app, spec in query.applications.items()}


@dataclass
class Window:
    """The content of one window of the run: rows with ts in ``[warm, end)``; deliveries are kept for
    ts in ``[begin, end)`` (the rows before ``begin`` are there for Joins and FIFO links)."""

    warm: int
    begin: int
    end: int
    rows: dict[str, Rows]
    published: dict[str, np.ndarray]
    homes: dict[str, str]


def warmup_us(query: Any) -> int:
    """How far before a window its rows must start: the longest Join window (a pair's rows lie
    within one window of its ``ts``, the later of the two)."""
    windows = [query.new_operator(name).window_us for name, spec in query.operators.items() if spec.kind == "join"]
    return max(windows, default=0) + 1


def windows(prepared: Any, window_us: int) -> Any:
    """The run's content, a window of ``window_us`` simulated µs at a time (memory: one window)."""
    trace, servers, origin, query = prepared.trace, prepared.servers, prepared.origin, prepared.query

    def rtt(a: str, b: str, t: int) -> float | None:
        return trace.latency_ms(servers[a], servers[b], max(0, t - origin))

    for source in prepared.sources:
        if not source.stamped:
            raise TimingUnsupported(f"{prepared.scenario.path}: the timing tier needs source-stamped streams "
                                    f"(entry_mode = \"source\"), got entry-stamped {source.stream!r}")
    warm = warmup_us(query)
    feeds = {s.stream: messages(s, prepared.start, prepared.end, rtt, close=False) for s in prepared.sources}
    homes = {s.stream: s.server for s in prepared.sources}
    pending: dict[str, Any] = {stream: next(feed, None) for stream, feed in feeds.items()}
    carried: dict[str, tuple[list, list]] = {stream: ([], []) for stream in feeds}
    begin = prepared.start
    while begin < prepared.end:
        end = min(prepared.end, begin + window_us)
        rows, published = {}, {}
        for source in prepared.sources:
            stream = source.stream
            schema = query.streams[stream].schema
            records, sent = carried[stream]
            item = pending[stream]
            while item is not None and item[0] < end:
                made = reference_records(schema, item[1], item[0], f"source {stream}")
                records.extend(made)
                sent.extend([item[0]] * len(made))
                item = next(feeds[stream], None)
            pending[stream] = item
            ts = np.array([r[0] for r in records], np.int64)
            rows[stream] = Rows(records, ts, ())
            published[stream] = np.array(sent, np.int64)
            tail = int(np.searchsorted(ts, end - warm)) if len(ts) else 0
            carried[stream] = (records[tail:], sent[tail:])
        for name in query.operators:
            rows[name] = operator_rows(query, name, [rows[i] for i in query.operators[name].inputs])
        yield Window(begin - warm, begin, end, rows, published, homes)
        begin = end


def window_links(prepared: Any, pairs: list[tuple[str, str]], window: Window, lookahead_us: int) -> Links:
    interval, origin = prepared.trace.interval_us, prepared.origin
    limit = window.end + lookahead_us + (round(prepared.scenario.drain_s * 1e6) if window.end >= prepared.end else 0)
    first = max(0, (window.warm - origin) // interval)
    last = min(prepared.trace.n_frames - 1, max(first, (limit - origin) // interval + 1))
    return Links(prepared.trace, prepared.servers, origin, first, last, pairs)


@dataclass
class TimingResult:
    kmax: int
    placement: dict[str, list[str]]
    deliveries: pa.Table                       # app, ts, arrival, latency_us (as the reference tier's)
    outputs: dict[str, list[Record]]           # per application, its records (row order of deliveries)
    summary: dict[str, Any]


def check_supported(scenario: Any, query: Any) -> None:
    where = scenario.path
    if scenario.mode is not Mode.REPLICATION:
        raise TimingUnsupported(f"{where}: the timing tier times mode \"replication\", got {scenario.mode.value!r}")
    if scenario.outage != "hold":
        raise TimingUnsupported(f"{where}: [network] outage = {scenario.outage!r}: the timing tier models held "
                                f"links only (a dropped connection is replayed from acks: use the reference tier)")
    if scenario.bandwidth_mbps:
        raise TimingUnsupported(f"{where}: [network] bandwidth_mbps is not modelled by the timing tier")
    if scenario.coordinator is not None:
        raise TimingUnsupported(f"{where}: a [coordinator] changes replicas during the run; use the reference tier")
    for i, fault in enumerate(scenario.faults, start=1):
        if fault.kind != "crash":
            raise TimingUnsupported(f"{where}: [[faults]] #{i} is a {fault.kind!r}; the timing tier models crashes "
                                    f"only")
    ordered = [a for a, spec in query.applications.items() if spec.ordered]
    if ordered:
        raise TimingUnsupported(f"{where}: application {ordered[0]!r} is ordered (it waits for punctuations); the "
                                f"timing tier does not time sorters")
    for name, spec in query.operators.items():
        if spec.kind not in TIMED_KINDS:
            raise TimingUnsupported(f"{query.source}: operator {name!r} is a {spec.kind}; the timing tier times "
                                    f"{', '.join(TIMED_KINDS)} (its outputs wait for punctuations); use the "
                                    f"reference tier")


DELIVERY_SCHEMA = pa.schema([("app", pa.dictionary(pa.int32(), pa.string())), ("ts", pa.int64()),
                             ("arrival", pa.int64()), ("latency_us", pa.int64())])
#: Default window: a simulated hour (memory holds one hour's rows and delays whatever the run's
#: length: ~0.7 GB for 100 servers and ten configurations).
WINDOW_US = 3_600_000_000
#: How far past a window the trace is read at once (a held link's recovery beyond it is looked up).
LOOKAHEAD_US = 600_000_000


class Sink:
    """One configuration's deliveries: streamed to ``directory/deliveries.parquet`` (or kept, for
    tests and checks), counted in a :class:`~simulator.recorder.Totals` for the summary."""

    def __init__(self, config: Deployed, directory: Any = None, keep_records: bool = False):
        from replicast.simulator.recorder import Totals

        self.config, self.directory, self.keep_records = config, directory, keep_records
        self.totals = Totals()
        self.tables: list[pa.Table] = []
        self.outputs: dict[str, list[Record]] = {}
        self.wall = 0.0
        self._writer = None
        if directory is not None:
            import pyarrow.parquet as pq

            directory.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(directory / "deliveries.parquet", DELIVERY_SCHEMA, compression="zstd")

    def add(self, query: Any, window: Window, arrivals: dict[str, np.ndarray]) -> None:
        parts = []
        for app, arrival in arrivals.items():
            feed = window.rows[query.applications[app].input]
            got = (arrival < NEVER) & (feed.ts >= window.begin) & (feed.ts < window.end)
            if self.keep_records:
                self.outputs.setdefault(app, []).extend(r for r, ok in zip(feed.records, got.tolist()) if ok)
            ts = feed.ts[got]
            parts.append(pa.table({"app": pa.DictionaryArray.from_arrays(np.zeros(len(ts), np.int32), [app]),
                                   "ts": ts, "arrival": arrival[got], "latency_us": arrival[got] - ts}))
        table = pa.concat_tables(parts, promote_options="permissive").unify_dictionaries().combine_chunks() \
            if parts else DELIVERY_SCHEMA.empty_table()
        self.totals.add_deliveries(table)
        if self._writer is not None:
            self._writer.write_table(table.cast(DELIVERY_SCHEMA))
        else:
            self.tables.append(table)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def deliveries(self) -> pa.Table:
        if self.directory is not None:
            import pyarrow.parquet as pq

            return pq.read_table(self.directory / "deliveries.parquet")
        return pa.concat_tables([t.cast(DELIVERY_SCHEMA) for t in self.tables]) if self.tables \
            else DELIVERY_SCHEMA.empty_table()

    def latency_columns(self):
        if self.directory is None:
            yield self.deliveries().column("latency_us").to_numpy()
            return
        import pyarrow.parquet as pq

        with pq.ParquetFile(self.directory / "deliveries.parquet") as file:
            for group in range(file.num_row_groups):
                yield file.read_row_group(group, columns=["latency_us"]).column(0).to_numpy()

    def summary(self, prepared: Any) -> dict[str, Any]:
        from replicast.simulator.run import latency_summary

        totals = self.totals
        return {"kmax": self.config.kmax, "tier": "timing", "deployment": self.config.deployment,
                "simulated_s": (prepared.end - prepared.start) / 1e6, "wall_s": round(self.wall, 3),
                "delivered": totals.delivered, "per_app": dict(sorted(totals.per_app.items())),
                "latency_ms": latency_summary(totals, self.latency_columns()), "placement": self.config.placement}


def run_configs(prepared: Any, configs: list[tuple[int, str | None]], *, out: Any = None, keep_records: bool = False,
                window_us: int = WINDOW_US, on_window: Any = None) -> list[Sink]:
    """Time every ``(kmax, deployment)`` of ``configs`` over ``prepared``'s window, a window of
    ``window_us`` at a time: the content of a window is made once and timed for every configuration.
    With ``out``, each configuration's deliveries stream to ``out(kmax, deployment)/deliveries.parquet``.
    ``on_window(done_us, total_us)`` is called after each window."""
    sinks = []
    for k, deployment in configs:
        wall = time.perf_counter()
        config = deployed(prepared, k, deployment)
        sink = Sink(config, out(config.kmax, config.deployment) if out is not None else None, keep_records)
        sink.wall += time.perf_counter() - wall
        sinks.append(sink)
    pairs = sorted({pair for sink in sinks for pair in sink.config.pairs})
    try:
        for window in windows(prepared, window_us):
            links = window_links(prepared, pairs, window, LOOKAHEAD_US)     # read once for every configuration
            for sink in sinks:
                wall = time.perf_counter()
                sink.add(prepared.query, window, time_window(prepared, sink.config, window, links))
                sink.wall += time.perf_counter() - wall
            if on_window is not None:
                on_window(window.end - prepared.start, prepared.end - prepared.start)
    finally:
        for sink in sinks:
            sink.close()
    return sinks


def run_timing(prepared: Any, kmax: int, *, deployment: str | None = None, keep_records: bool = True,
               window_us: int = WINDOW_US) -> TimingResult:
    """Delivery times of ``prepared`` at degree ``kmax`` (in memory; see :func:`run_configs`)."""
    wall = time.perf_counter()
    (sink,) = run_configs(prepared, [(kmax, deployment)], keep_records=keep_records, window_us=window_us)
    sink.wall = time.perf_counter() - wall
    return TimingResult(kmax, sink.config.placement, sink.deliveries(), sink.outputs, sink.summary(prepared))


def _plus(t: np.ndarray, cost_us: float) -> np.ndarray:
    """``t`` plus a per-record CPU cost (µs, rounded as Processing.finish rounds it)."""
    if not cost_us:
        return t
    return np.where(t < NEVER, t + round(cost_us), NEVER)


# -- checking against the reference tier -----------------------------------------------------------

def arrivals(outputs: dict[str, list[Record]], table: pa.Table) -> dict[tuple[str, Record], list[int]]:
    """(application, record) → its sorted arrival times, from a deliveries table and the records in
    the table's row order per application (a reference run with ``keep_records``, or a timing run)."""
    got: dict[tuple[str, Record], list[int]] = {}
    position: dict[str, int] = {}
    for app, arrival in zip(table.column("app").to_pylist(), table.column("arrival").to_numpy().tolist()):
        i = position.get(app, 0)
        position[app] = i + 1
        got.setdefault((app, outputs[app][i]), []).append(arrival)
    return {key: sorted(value) for key, value in got.items()}


def differences(reference: Any, timing: TimingResult) -> tuple[np.ndarray, int]:
    """Per delivery of both tiers, timing − reference arrival (µs), and how many deliveries one tier
    has that the other has not (0 when both delivered the same records)."""
    expected = arrivals(reference.recorder.outputs, reference.recorder.deliveries())
    got = arrivals(timing.outputs, timing.deliveries)
    unmatched = sum(abs(len(got.get(key, [])) - len(expected.get(key, []))) for key in expected.keys() | got.keys())
    diff = [np.subtract(got[key][:n], expected[key][:n]) for key in expected.keys() & got.keys()
            for n in [min(len(got[key]), len(expected[key]))]]
    return (np.concatenate(diff) if diff else np.empty(0, np.int64)), unmatched
