"""One simulation run: a scenario at one ``kmax``, from trace to recorded outputs.

Assembly only: servers are chosen from the trace, the deployment from :mod:`simulator.deploy`,
sources from :mod:`simulator.sources`, faults are scheduled on the :class:`~simulator.driver.Simulation`;
the node cores do the stream processing.
"""

from __future__ import annotations

import gc
import time
from collections import Counter
from contextlib import contextmanager
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from replicast.engine.event_file import read_events
from replicast.engine.node import Mode, NodeOptions, shape
from replicast.engine.query_file import load_query
from replicast.operators.plan import ReplicaId
from replicast.operators.query import Query
from replicast.operators.record import Record
from replicast.simulator.deploy import deploy
from replicast.simulator.driver import Simulation
from replicast.simulator.latency import quantiles
from replicast.simulator.network import Processing
from replicast.simulator.recorder import Recorder
from replicast.simulator.scenario import Scenario, ScenarioError
from replicast.simulator.segments import Segment
from replicast.simulator.sources import Source, messages, payload, reference_records
from replicast.simulator.trace_queries import TraceCollector
from replicast.traces.store import TraceStore

QUANTILES = (0.5, 0.9, 0.99, 0.999)


@dataclass
class RunResult:
    kmax: int
    placement: dict[str, list[str]]
    recorder: Recorder
    inputs: dict[str, list[Record]]
    summary: dict[str, Any] = field(default_factory=dict)
    trace: list[dict[str, Any]] = field(default_factory=list)    # trace queries' answers (simulator.trace_queries)


class Prepared:
    """The parts of a scenario shared by its runs (trace, servers, query, sources)."""

    def __init__(self, scenario: Scenario, trace: Any = None):
        self.scenario = scenario
        self.trace = trace if trace is not None else TraceStore.open(scenario.trace)
        self.servers = choose_servers(self.trace, scenario)
        self.query: Query = load_query(scenario.query_path)
        self.sources = build_sources(scenario, self.query, self.servers)
        events = [s for s in self.sources if s.kind == "events"]
        first = min((s.records[0][0] for s in events if s.records), default=None)
        self.start = round(scenario.start_s * 1e6) if first is None else first
        self.origin = 0 if first is None else first - round(scenario.start_s * 1e6)
        length = scenario.duration_s * 1e6 if scenario.duration_s else self.trace.duration_us - scenario.start_s * 1e6
        if length <= 0:
            raise ScenarioError(f"{scenario.path}: start_s {scenario.start_s} is past the trace's end "
                                f"({self.trace.duration_us / 1e6:.0f} s)")
        self.end = self.start + round(length)
        self._network = None

    def placement_network(self):
        """The servers' :class:`placement.model.Network` over the run's window (min-cost deployment)."""
        if self._network is None:
            from replicast.simulator.coordinator import trace_network
            self._network = trace_network(self.trace, self.servers, self.start, self.end, self.origin,
                                          self.scenario.seed)
        return self._network


def choose_servers(trace: Any, scenario: Scenario) -> dict[str, int]:
    """Server name → trace node index: the names given, or the ``n`` most reliable nodes (§VI-A)."""
    index = {name: i for i, name in enumerate(trace.nodes)}
    if isinstance(scenario.servers, tuple):
        missing = [s for s in scenario.servers if s not in index]
        if missing:
            raise ScenarioError(f"{scenario.path}: servers {missing} are not nodes of trace {scenario.trace!r} "
                                f"(e.g. {', '.join(trace.nodes[:3])})")
        return {s: index[s] for s in scenario.servers}
    if scenario.servers > trace.n_nodes:
        raise ScenarioError(f"{scenario.path}: servers = {scenario.servers} but trace {scenario.trace!r} has "
                            f"{trace.n_nodes} nodes")
    return {trace.nodes[i]: i for i in trace.reliable_nodes(scenario.servers)}


def build_sources(scenario: Scenario, query: Query, servers: dict[str, int]) -> list[Source]:
    names = list(servers)
    sources: list[Source] = []
    for spec in scenario.sources:
        where = f"{scenario.path}: source {spec.stream!r}"
        on = names if spec.servers == "all" else list(spec.servers)
        for server in on:
            if server not in servers:
                raise ScenarioError(f"{where}: server {server!r} is not one of the scenario's servers")
            stream = spec.stream.format(i=names.index(server), server=server)
            if stream not in query.streams:
                raise ScenarioError(f"{where}: stream {stream!r} is not in the query "
                                    f"({', '.join(list(query.streams)[:6])}…)")
            source = Source(stream, server, spec.kind, round(spec.period_ms * 1000), round(scenario.punctuation_ms * 1000),
                            stamped=scenario.entry_mode == "source", peers=[s for s in names if s != server],
                            seed=scenario.seed, names=query.streams[stream].schema.names,
                            seal=query.streams[stream].seal)
            if spec.kind == "events":
                source.records = read_events(spec.events, query)[stream]
            sources.append(source)
    fed = Counter(s.stream for s in sources)
    unfed = [s for s in query.streams if s not in fed]
    if unfed:
        raise ScenarioError(f"{scenario.path}: no source feeds stream(s) {', '.join(unfed)}")
    twice = [s for s, n in fed.items() if n > 1 and scenario.entry_mode == "source"]
    if twice:
        raise ScenarioError(f"{scenario.path}: streams {twice} have several source-stamped sources; their "
                            f"punctuations would contradict each other (give each server its own stream)")
    return sources


def run(prepared: Prepared, kmax: int, *, keep_records: bool = False, progress: bool = False,
        desc: str = "", on_progress: Callable[[int, int], None] | None = None, segment: Segment | None = None,
        sink: Path | None = None, deployment: str | None = None, coordinator: bool = True,
        trace_queries: Sequence[tuple[str, str]] = ()) -> RunResult:
    """Simulate ``prepared`` at degree ``kmax``; see the module docstring.

    ``progress`` shows a tqdm bar in simulated seconds.  ``on_progress(done_s, total_s)``, if given,
    is called after each of the ~200 slices of the event loop and once at the end with
    ``done_s == total_s``; it may raise to abort the run (``replicast simulate`` forwards it from
    worker processes to the parent's bars and stops the other runs this way after an error).
    ``segment`` runs one time segment of the run (:mod:`simulator.segments`); ``sink`` streams
    the deliveries and bandwidth tables to Parquet files in that directory as they are made
    (:class:`~simulator.recorder.Recorder`); ``deployment`` replaces the scenario's kind;
    ``coordinator = False`` runs a scenario with a ``[coordinator]`` table without it (the static
    deployment it starts from, for comparison).  ``trace_queries`` (``(id, text)``) are evaluated at
    every node's core over the run (:mod:`simulator.trace_queries`), their answers in ``result.trace``.
    """
    scenario, query = prepared.scenario, prepared.query
    if deployment is not None and deployment != scenario.deployment:
        scenario = replace(scenario, deployment=deployment)
    placement = deploy(scenario, query, prepared.sources, list(prepared.servers), kmax, prepared.placement_network)
    options = NodeOptions(punctuation_us=round(scenario.punctuation_ms * 1000),
                          heartbeat_us=round(scenario.heartbeat_ms * 1000),
                          peer_timeout_us=round(scenario.peer_timeout_ms * 1000),
                          entry_modes={s: scenario.entry_mode for s in query.streams},
                          join_timeout_us=round(scenario.join_timeout_ms * 1000),
                          retention_items=scenario.retention_items, mode=scenario.mode,
                          utility=scenario.coordinator.utility if scenario.coordinator is not None else "rank")
    begin = prepared.start if segment is None else segment.warm
    end = prepared.end if segment is None else segment.stop
    closes = end >= prepared.end                  # this run ends as the whole run does
    processing = Processing(scenario.processing_us)
    coordination = None
    if scenario.coordinator is not None and coordinator:
        if scenario.mode is not Mode.REPLICATION:      # §V's utilities come from every replica feeding every one
            raise ScenarioError(f"{scenario.path}: [coordinator] needs mode \"replication\" (garbage collection "
                                f"and revival change the replicated deployment), got {scenario.mode.value!r}")
        from replicast.simulator.coordinator import node_setups, workload
        servers = list(prepared.servers)
        pins = {name: placement[name][0] for name in (*query.streams, *query.applications)}
        coordination = node_setups(scenario.coordinator, servers, workload(query, prepared.sources, servers, pins),
                                   kmax, scenario.alpha, scenario.dmin_ms, scenario.seed)
    sim = Simulation(query, placement, prepared.trace, prepared.servers, options=options, start_us=begin,
                     outage=scenario.outage, processing=processing, origin_us=prepared.origin,
                     bandwidth_bps=scenario.bandwidth_mbps * 1e6 if scenario.bandwidth_mbps else None,
                     coordination=coordination, clocks=_clocks(scenario, prepared.servers))
    done = sim.env.event()
    keep = None
    if segment is not None:       # the first and last segments also keep what lies before / after the run
        keep = (segment.begin if segment.index else -2**62, segment.end if segment.index < segment.count - 1 else 2**62)
    recorder = Recorder(list(query.applications), sim.network, round(scenario.bucket_s * 1e6), keep_records, done,
                        sink=sink, keep=keep)
    sim.observer = recorder
    inputs: dict[str, list[Record]] = {s: [] for s in query.streams}
    for source in prepared.sources:
        _start_source(sim, prepared, source, inputs if keep_records else None, begin, end, closes)
    _schedule_faults(sim, scenario, placement, processing, prepared.start)
    limit = prepared.end + round(scenario.drain_s * 1e6) if closes else end
    traced = TraceCollector(sim, trace_queries) if trace_queries else None
    wall = time.perf_counter()
    with _young_objects_collected_rarely():
        _run(sim, done, limit, progress, desc or f"kmax={kmax}", on_progress)
    wall = time.perf_counter() - wall
    recorder.close()
    result = RunResult(kmax, shape(scenario.mode, placement, query.applications), recorder, inputs)
    if traced is not None:
        result.trace = traced.answers()
    seconds = (prepared.end - prepared.start if segment is None else segment.end - segment.begin) / 1e6
    result.summary = summarise(result, sim, prepared, wall, completed=done.triggered or not closes, begin=begin,
                               seconds=seconds)
    if segment is not None:
        result.summary["segment"] = {"index": segment.index, "count": segment.count, "begin_us": segment.begin,
                                     "end_us": segment.end, "warm_us": segment.warm, "stop_us": segment.stop}
    if deployment is not None:
        result.summary["deployment"] = scenario.deployment
    if coordination is not None:
        result.summary["coordinator"] = coordinator_summary(sim, recorder, begin)
    return result


def coordinator_summary(sim: Simulation, recorder: Recorder, begin: int) -> dict[str, Any]:
    """What the placement coordinator did: its decisions by reason and kind, when, and its counters."""
    decisions = Counter(f"{reason}:{kind}" for _, kind, reason, _, _ in recorder.decisions)
    coordinators = {name: node.core.coordination.statistics() for name, node in sim.nodes.items()
                    if node.alive and node.core.coordination.coordinator is not None}
    return {"decisions": dict(sorted(decisions.items())),
            "timeline": [[round((t - begin) / 1e6, 3), kind, reason, what, node]
                         for t, kind, reason, what, node in recorder.decisions],
            "coordinators": coordinators}


@contextmanager
def _young_objects_collected_rarely():
    """The event loop allocates a few containers per message and reference counting frees them at
    once; with the cyclic collector's default young threshold (700 allocations) it still ran ~150
    collections per 300 simulated s of sim-fig1, each older pass walking the trace and the nodes
    setup built. Those are frozen (never walked) and young objects collected every 50,000
    allocations for the run, then the settings put back: 8–13 % of the reference tier's CPU natively
    built (docs/simulator.md, "CPU against cd9ce3d")."""
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


def _run(sim: Simulation, done, limit: int, progress: bool, desc: str,
         on_progress: Callable[[int, int], None] | None) -> None:
    from tqdm import tqdm

    env = sim.env
    begin, total = env.now, round((limit - env.now) / 1e6)
    step = max(1, (limit - env.now) // 200)
    with tqdm(total=total, desc=desc, unit="sim s", disable=not progress, leave=True) as bar:
        shown = env.now
        while not done.triggered and env.now < limit:
            env.run(until=min(limit, env.now + step))
            bar.update(round((env.now - shown) / 1e6))
            shown = env.now - (env.now - shown) % 1_000_000
            if on_progress is not None:
                on_progress(min(total, round((env.now - begin) / 1e6)), total)
        if done.triggered:
            bar.update(bar.total - bar.n)          # the drain allowance was not needed
    if on_progress is not None:
        on_progress(total, total)


def _start_source(sim: Simulation, prepared: Prepared, source: Source, inputs: dict | None, begin: int, end: int,
                  closes: bool) -> None:
    trace, servers = prepared.trace, prepared.servers
    origin = prepared.origin

    def rtt(a: str, b: str, t: int) -> float | None:
        return trace.latency_ms(servers[a], servers[b], max(0, t - origin))

    items = messages(source, prepared.start, end, rtt, begin=begin, close=closes)
    schema = prepared.query.streams[source.stream].schema

    def fire(event=None, message=None) -> None:
        when, batch = message
        if inputs is not None and source.stamped:
            inputs[source.stream].extend(reference_records(schema, batch, when, f"source {source.stream}"))
        sim.publish(source.server, source.stream, payload(batch))
        following = next(items, None)
        if following is not None:
            sim.env.timeout(following[0] - sim.env.now).callbacks.append(lambda e: fire(e, following))

    first = next(items, None)
    if first is not None:
        sim.env.timeout(max(0, first[0] - sim.env.now)).callbacks.append(lambda e: fire(e, first))


def replica_server(placement: dict[str, list[str]], target: str, where: str) -> str:
    """A fault target: a server name, or ``name#index`` for the server hosting that replica."""
    if "#" not in target:
        return target
    name, _, index = target.partition("#")
    servers = placement.get(name)
    if servers is None or not index.isdigit() or int(index) >= len(servers) or not servers[int(index)]:
        raise ScenarioError(f"{where}: {target!r} is not a deployed replica (deployed: "
                            f"{', '.join(f'{n}#0..{len(s) - 1}' for n, s in list(placement.items())[:4])}…)")
    return servers[int(index)]


def _schedule_faults(sim: Simulation, scenario: Scenario, placement, processing: Processing, start: int) -> None:
    env = sim.env

    def at(t: int, action) -> None:
        env.timeout(max(0, start + t - env.now)).callbacks.append(lambda event: action())

    for i, fault in enumerate(scenario.faults, start=1):
        where = f"{scenario.path}: [[faults]] #{i}"
        if fault.kind in ("add", "remove") and scenario.mode is not Mode.REPLICATION:
            raise ScenarioError(f"{where}: '{fault.kind}' changes the placement mid-stream, which only mode "
                                f"\"replication\" does (this scenario's mode is {scenario.mode.value!r})")
        if fault.kind == "add":
            name, server = fault.target
            if name not in sim.placement or server not in sim.network.servers:
                raise ScenarioError(f"{where}: cannot add a replica of {name!r} on {server!r}: "
                                    f"{'not in the query' if name not in sim.placement else 'not a server'}")
            at(fault.from_us, lambda n=name, s=server: sim.add_replica(n, s))
            continue
        if fault.kind == "remove":
            replica_server(placement, fault.target[0], where)
            name, _, index = fault.target[0].partition("#")
            at(fault.from_us, lambda r=ReplicaId(name, int(index)): sim.remove_replica(r))
            continue
        targets = [replica_server(placement, t, where) for t in fault.target]
        unknown = [t for t in targets if t not in sim.network.servers]
        if unknown:
            raise ScenarioError(f"{where}: {unknown[0]!r} is not a server of this scenario")
        t1, t2 = start + fault.from_us, start + (fault.to_us or 0)
        if fault.kind == "crash":
            at(fault.from_us, lambda s=targets[0]: sim.crash(s))
        elif fault.kind == "restart":
            at(fault.from_us, lambda s=targets[0]: sim.restart(s))
        elif fault.kind == "cut":
            sim.network.cut(targets[0], targets[1], t1, t2)
            if scenario.outage == "drop" and frozenset(targets) in sim.pairs:
                at(fault.from_us, lambda a=targets[0], b=targets[1]: sim.drop_connection(a, b))
        elif fault.kind == "congest":
            sim.network.congest(targets[0], targets[1], t1, t2, round(fault.value * 1000))
        else:
            processing.spike(targets[0], t1, t2, fault.value)
            sim.processing = processing


def summarise(result: RunResult, sim: Simulation, prepared: Prepared, wall: float, completed: bool,
              begin: int | None = None, seconds: float | None = None) -> dict[str, Any]:
    """The run's ``summary.json`` from the recorder's totals (the recorder is closed); ``seconds``
    is the time the network cost is averaged over (default: the run's)."""
    recorder = result.recorder
    totals = recorder.totals
    seconds = seconds or (prepared.end - prepared.start) / 1e6
    begin = prepared.start if begin is None else begin
    return {
        "kmax": result.kmax,
        "mode": prepared.scenario.mode.value,
        "completed": completed,
        "simulated_s": (sim.env.now - begin) / 1e6,
        "wall_s": round(wall, 3),
        "hops": sim.network.hops,
        "messages": sim.network.messages,
        "hops_per_s": round(sim.network.hops / wall) if wall else None,
        "delivered": totals.delivered,
        "per_app": dict(sorted(totals.per_app.items())),
        "latency_ms": latency_summary(totals, _latency_columns(recorder)),
        "records_sent": int(totals.data[0]),
        "bytes_sent": int(totals.data[1] + totals.control_bytes),
        "data_bytes_sent": int(totals.data[1]),
        "network_cost": round(float(totals.data[2]) * prepared.scenario.bucket_s / seconds, 3),
        "cost_over_time": [[round((t - begin) / 1e6, 3), round(cost, 3)] for t, cost in sorted(totals.cost_by_bucket.items())],
        "dead_letters": recorder.dead_letters,
        "dead_letter_reasons": dict(recorder.dead_letter_reasons.most_common()),
        "lifecycle": lifecycle_counts(sim),
        "placement": sim.placement,              # at the end of the run (replicas added or removed by faults)
    }


#: Node counters summed over a run's nodes in summary.json (docs/lifecycle.md says what each counts).
LIFECYCLE_COUNTERS = ("snapshots_given", "snapshots_taken", "continued_streams", "rebuilt_without_peer", "rejoins",
                      "streams_cut", "gaps", "protocol_errors", "failovers", "determinants", "takeovers")


def lifecycle_counts(sim: Simulation) -> dict[str, int]:
    """Joins, rebuilds and cut-offs over every node core of the run (restarted ones included)."""
    totals = dict.fromkeys(LIFECYCLE_COUNTERS, 0)
    for node in sim.all_cores():
        for key in LIFECYCLE_COUNTERS:
            totals[key] += node.counters[key]
    return totals


def _latency_columns(recorder: Recorder):
    """The kept latencies in chunks: from the sink's file a row group at a time, or in memory."""
    if recorder.sink is None:
        yield recorder.deliveries().column("latency_us").to_numpy()
        return
    with pq.ParquetFile(recorder.sink / "deliveries.parquet") as file:
        for group in range(file.num_row_groups):
            yield file.read_row_group(group, columns=["latency_us"]).column(0).to_numpy()


def latency_summary(totals: Any, columns) -> dict[str, float | None]:
    """Mean, quantiles and max in ms of the latencies ``totals`` counted (``columns``: the same
    latencies, read once more for the exact quantiles)."""
    n = totals.histogram.total
    if not n:
        return {"mean": None, **{f"p{q * 100:g}": None for q in QUANTILES}, "max": None}
    values = quantiles(totals.histogram, columns, QUANTILES)
    return {"mean": round(totals.latency_sum / n / 1000.0, 3),
            **{f"p{q * 100:g}": round(v / 1000.0, 3) for q, v in zip(QUANTILES, values)},
            "max": round(totals.latency_max / 1000.0, 3)}


def _clocks(scenario: Scenario, servers) -> dict:
    """The scenario's ``[clocks]``, every one naming a server of the run."""
    unknown = sorted(set(scenario.clocks) - set(servers))
    if unknown:
        raise ScenarioError(f"{scenario.path}: [clocks] names {unknown}, which are not servers of the run "
                            f"(servers: {sorted(servers)})")
    return scenario.clocks
