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
import pyarrow.compute as pc

from replicast.engine.core.modes import Mode
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


@dataclass
class Rows:
    """The rows of one logical stream (a source stream, an operator's or an application's output)."""

    records: list[Record]           # the rows' content, as the reference run makes them
    ts: np.ndarray                  # int64 µs
    parents: tuple[np.ndarray, ...]  # per input port (Join: left, right; Union: see port), row numbers
    port: np.ndarray | None = None   # Union: which input each row came from


# -- 1. content with lineage ----------------------------------------------------------------------

def source_rows(prepared: Any, begin: int, end: int) -> tuple[dict[str, Rows], dict[str, np.ndarray], dict[str, str]]:
    """Every source stream's records in ``[begin, end)`` (ts order), when each was published, and
    the server of each stream's source."""
    trace, servers, origin = prepared.trace, prepared.servers, prepared.origin

    def rtt(a: str, b: str, t: int) -> float | None:
        return trace.latency_ms(servers[a], servers[b], max(0, t - origin))

    rows: dict[str, Rows] = {}
    published: dict[str, np.ndarray] = {}
    homes: dict[str, str] = {}
    for source in prepared.sources:
        if not source.stamped:
            raise TimingUnsupported(f"{prepared.scenario.path}: the timing tier needs source-stamped streams "
                                    f"(entry_mode = \"source\"), got entry-stamped {source.stream!r}")
        schema = prepared.query.streams[source.stream].schema
        records, sent = [], []
        for when, items in messages(source, prepared.start, end, rtt, begin=begin, close=False):
            made = reference_records(schema, items, when, f"source {source.stream}")
            records.extend(made)
            sent.extend([when] * len(made))
        rows[source.stream] = Rows(records, np.array([r[0] for r in records], np.int64), ())
        published[source.stream] = np.array(sent, np.int64)
        homes[source.stream] = source.server
    return rows, published, homes


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
        port = np.concatenate([np.full(len(rows.records), p, np.int32) for p, rows in enumerate(inputs)]
                              or [np.empty(0, np.int32)])
        row = np.concatenate([np.arange(len(rows.records)) for rows in inputs] or [np.empty(0, np.int64)])
        return Rows(records, np.array([r[0] for r in records], np.int64), (row,), port)
    operator = query.new_operator(name)
    if spec.kind == "filter":
        out = operator.on_batch(0, _tagged(inputs[0].records))
        return Rows([r[:-1] for r in out], np.array([r[0] for r in out], np.int64),
                    (np.array([r[-1] for r in out], np.int64),))
    if spec.kind == "map":          # a new record per input: one call per record keeps the lineage
        records, parent = [], []
        for i, record in enumerate(inputs[0].records):
            made = operator.on_batch(0, [record])
            records.extend(made)
            parent.extend([i] * len(made))
        return Rows(records, np.array([r[0] for r in records], np.int64), (np.array(parent, np.int64),))
    # Join: every left row buffered, then every right row probes them: each pair once (Alg. 2).
    width = len(query.schemas[spec.inputs[0]].names) + 1        # ts, left fields (then the tag)
    pairs = operator.on_batch(0, _tagged(inputs[0].records))
    pairs += operator.on_batch(1, _tagged(inputs[1].records))
    records = [(p[0], *p[1:width], *p[width + 1:-1]) for p in pairs]
    left = np.array([p[width] for p in pairs], np.int64)
    right = np.array([p[-1] for p in pairs], np.int64)
    return Rows(records, np.array([r[0] for r in records], np.int64), (left, right))


# -- 2. the network over arrays --------------------------------------------------------------------

class Links:
    """One-way delays of the links among the run's servers, frame by frame, as int64 arrays."""

    def __init__(self, trace: Any, servers: dict[str, int], origin: int, first: int, last: int):
        self.interval = trace.interval_us
        self.origin = origin
        self.last_frame = trace.n_frames - 1
        self.first = first                  # frames [first, last] are loaded
        self.names = list(servers)
        self.index = {name: i for i, name in enumerate(self.names)}
        nodes = np.array([servers[n] for n in self.names], np.intp)
        count = last - first + 1
        delays = np.empty((count, len(nodes), len(nodes)), np.int64)
        for f in range(first, last + 1):
            rtt = trace.frame(f)[nodes[:, None], nodes].astype(np.float64)
            # round(rtt * 500) as TraceStore.one_way_us and Network._frame_delays; -1 = outage
            delays[f - first] = np.where(np.isnan(rtt), -1, np.rint(np.nan_to_num(rtt) * 500.0)).astype(np.int64)
        self.delays = delays
        # Hold mode: for each frame, the first frame at or after it in which the pair is measured.
        valid = delays >= 0
        ahead = np.where(valid, np.arange(count)[:, None, None], count)
        self.recovers = np.minimum.accumulate(ahead[::-1], axis=0)[::-1]   # == count: never again

    def frames(self, t: np.ndarray) -> np.ndarray:
        frame = np.clip((t - self.origin) // self.interval, 0, self.last_frame)
        return np.clip(frame - self.first, 0, len(self.delays) - 1)

    def arrive(self, a: str, b: str, sent: np.ndarray) -> np.ndarray:
        """Arrival at ``b`` of messages leaving ``a`` at ``sent`` (NEVER: not sent), FIFO on the link."""
        i, j = self.index[a], self.index[b]
        live = sent < NEVER
        t = np.where(live, sent, self.origin)
        frame = self.frames(t)
        delay = self.delays[frame, i, j]
        held = delay < 0
        arrival = t + delay
        if held.any():
            recover = self.recovers[frame[held], i, j]
            never = recover >= len(self.delays)
            recover = np.minimum(recover, len(self.delays) - 1)
            until = self.origin + (recover + self.first) * self.interval
            back = until + self.delays[recover, i, j]
            arrival[held] = np.where(never, NEVER, back)
        arrival[~live] = NEVER
        return fifo(sent, arrival)


def fifo(sent: np.ndarray, arrival: np.ndarray) -> np.ndarray:
    """Rule 2 of :mod:`simulator.network`: no message overtakes one sent earlier on its link."""
    if len(sent) < 2:
        return arrival
    order = np.argsort(sent, kind="stable")
    ordered = arrival[order]
    finite = ordered < NEVER
    running = np.maximum.accumulate(np.where(finite, ordered, -1))
    out = np.empty_like(arrival)
    out[order] = np.where(finite, running, NEVER)
    return out


# -- 3. one run --------------------------------------------------------------------------------------

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


def run_timing(prepared: Any, kmax: int, *, deployment: str | None = None) -> TimingResult:
    """Delivery times of ``prepared`` at degree ``kmax``; see the module docstring."""
    from replicast.simulator.run import replica_server

    wall = time.perf_counter()
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

    limit = prepared.end + round(scenario.drain_s * 1e6)
    interval, origin = prepared.trace.interval_us, prepared.origin
    first = max(0, (prepared.start - origin) // interval)
    last = min(prepared.trace.n_frames - 1, max(first, (limit - origin) // interval + 1))
    links = Links(prepared.trace, prepared.servers, origin, first, last)

    rows, published, homes = source_rows(prepared, prepared.start, prepared.end)
    emitted: dict[str, np.ndarray] = {}        # name -> [rows, replicas] emission times

    def server_of(name: str, index: int) -> str:
        return placement[name][index]

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
        target = server_of(name, index)
        times = emitted[upstream]
        best = np.full(times.shape[0], NEVER, np.int64)
        for source in physical.upstreams(physical.replicas[name][index], port):
            best = np.minimum(best, hop(server_of(upstream, source.index), target, times[:, source.index]))
        return alive(target, _plus(best, cost[name]))

    for stream in query.streams:
        home = homes[stream]
        times = np.empty((len(rows[stream].records), len(placement[stream])), np.int64)
        for e, server in enumerate(placement[stream]):
            times[:, e] = alive(server, _plus(hop(home, server, published[stream]), cost[stream]))
        emitted[stream] = times

    for name, spec in query.operators.items():
        inputs = [rows[i] for i in spec.inputs]
        out = rows[name] = operator_rows(query, name, inputs)
        times = np.empty((len(out.records), len(placement[name])), np.int64)
        for r in range(len(placement[name])):
            ports = [ready(name, r, p, upstream) for p, upstream in enumerate(spec.inputs)]
            if spec.kind == "union":
                stacked = np.full(len(out.records), NEVER, np.int64)
                for p, at in enumerate(ports):
                    mine = out.port == p
                    stacked[mine] = at[out.parents[0][mine]]
                times[:, r] = stacked
            elif spec.kind == "join":
                times[:, r] = np.maximum(ports[0][out.parents[0]], ports[1][out.parents[1]])
            else:
                times[:, r] = ports[0][out.parents[0]]
        emitted[name] = times

    apps, ts_col, arrival_col, outputs = [], [], [], {}
    for app, spec in query.applications.items():
        feed = rows[spec.input]
        arrival = ready(app, 0, 0, spec.input)
        got = arrival < NEVER
        outputs[app] = [r for r, ok in zip(feed.records, got) if ok]
        apps.append(np.full(int(got.sum()), app, object))
        ts_col.append(feed.ts[got])
        arrival_col.append(arrival[got])
    ts = np.concatenate(ts_col) if ts_col else np.empty(0, np.int64)
    arrival = np.concatenate(arrival_col) if arrival_col else np.empty(0, np.int64)
    table = pa.table({"app": pa.array(np.concatenate(apps) if apps else [], pa.string()).dictionary_encode(),
                      "ts": pa.array(ts), "arrival": pa.array(arrival), "latency_us": pa.array(arrival - ts)})
    wall = time.perf_counter() - wall
    summary = _summary(kmax, scenario, prepared, table, wall, placement)
    return TimingResult(kmax, placement, table, outputs, summary)


def _plus(t: np.ndarray, cost_us: float) -> np.ndarray:
    """``t`` plus a per-record CPU cost (µs, rounded as Processing.finish rounds it)."""
    if not cost_us:
        return t
    return np.where(t < NEVER, t + round(cost_us), NEVER)


def _summary(kmax: int, scenario: Any, prepared: Any, table: pa.Table, wall: float,
             placement: dict[str, list[str]]) -> dict[str, Any]:
    latency = table.column("latency_us").to_numpy()
    per_app = {row["values"]: row["counts"] for row in pc.value_counts(table.column("app")).to_pylist()}
    quantiles = {}
    if len(latency):
        for q in (0.5, 0.9, 0.99, 0.999):
            quantiles[f"p{q * 100:g}"] = round(float(np.quantile(latency, q, method="inverted_cdf")) / 1000.0, 3)
        quantiles["mean"] = round(float(latency.mean()) / 1000.0, 3)
        quantiles["max"] = round(float(latency.max()) / 1000.0, 3)
    return {"kmax": kmax, "tier": "timing", "deployment": scenario.deployment,
            "simulated_s": (prepared.end - prepared.start) / 1e6, "wall_s": round(wall, 3),
            "delivered": int(len(latency)), "per_app": per_app, "latency_ms": quantiles, "placement": placement}



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
