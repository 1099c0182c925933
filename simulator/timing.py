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
   * an application's delivery time is its input row's first arrival (+ its CPU cost);
   * windows and sorters wait for punctuations (:mod:`simulator.timing_punctuation`, §IV-A/C/F): a
     time window closes, a sorter releases, at the first arrival of the punctuation covering it.

3. **Crashes** remove paths: a crashed server's replicas emit nothing from the crash on, and what is
   in flight to or from it then is lost (its connections drop, :meth:`Simulation.crash`).

What it does not model (``docs/simulator.md``, "The timing tier", has the measured differences):
the node's CPU as a queue (a record's cost is added, waiting behind other batches is not), FIFO
between messages of different operators or control messages on the same link, a peer time-out that
drops a connection in a long outage (the reference then replays after a redial), and batches
(every record is its own message).  It refuses what it cannot time: user-defined operators, seals
per key, ``outage = "drop"``, restarts, cuts, congestion, spikes, bandwidth, a ``[coordinator]`` and
engine modes other than replication.

The parts: :mod:`simulator.timing_content` (rows with lineage, a window at a time; source records
and keyed Join pairs over columns in :mod:`simulator.timing_sources` and :mod:`simulator.timing_join`),
:mod:`simulator.timing_links` (the network over arrays), :mod:`simulator.timing_punctuation`
(frontiers as step functions), :mod:`simulator.timing_sink` (deliveries and the comparison).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa

from replicast.engine.node import Mode
from replicast.operators.plan import plan
from replicast.operators.record import Record
from replicast.simulator.deploy import deploy
from replicast.simulator.timing_content import TIMED_KINDS, Rows, TimingUnsupported, Window, windows
from replicast.simulator.timing_links import NEVER, Links
from replicast.simulator.timing_punctuation import Steps, frontier, release, shifted
from replicast.simulator.timing_sink import DELIVERY_SCHEMA, Sink, arrivals, differences

__all__ = ["NEVER", "TIMED_KINDS", "DELIVERY_SCHEMA", "Links", "Rows", "Sink", "TimingUnsupported", "Window",
           "arrivals", "differences", "run_configs", "run_timing"]


# -- runs ---- -------------------------------------------------------------------------------------------

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
    #: records sent between servers so far and the sum of their one-way delays (µs), for §V-A's cost
    sent: list = field(default_factory=lambda: [0, 0])
    #: (operator, replica) -> its key among the replicas every configuration shares (time_window)
    signatures: dict = field(default_factory=dict)


def deployed(prepared: Any, kmax: int, deployment: str | None = None,
             placement: dict[str, list[str]] | None = None) -> Deployed:
    """Configuration ``kmax`` × ``deployment`` of ``prepared``, its replicas placed (or at
    ``placement``, the one another process placed for the same scenario)."""
    from replicast.simulator.run import replica_server

    scenario, query = prepared.scenario, prepared.query
    if deployment is not None and deployment != scenario.deployment:
        scenario = replace(scenario, deployment=deployment)
    check_supported(scenario, query)
    if placement is None:
        placement = deploy(scenario, query, prepared.sources, list(prepared.servers), kmax,
                           prepared.placement_network)
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


def punctuated(query: Any) -> set[str]:
    """The streams whose punctuations someone waits for: the inputs of aggregates and of ordered
    applications, and everything upstream of them (a frontier is the minimum over all inputs)."""
    wanted = {spec.input for spec in query.applications.values() if spec.ordered}
    wanted |= {i for spec in query.operators.values() if spec.kind == "aggregate" for i in spec.inputs}
    for name in reversed(list(query.operators)):          # plan order: consumers after producers
        if name in wanted:
            wanted.update(query.operators[name].inputs)
    return wanted


def time_window(prepared: Any, config: Deployed, window: "Window", links: Links) -> dict[str, np.ndarray]:
    """Per application, the arrival time of each row of its input in ``window`` (NEVER: not delivered)."""
    query, placement, physical, cost, crashes = (prepared.query, config.placement, config.physical, config.cost,
                                                 config.crashes)
    rows = window.rows
    waits = punctuated(query)
    emitted: dict[str, list[np.ndarray]] = {}  # name -> per replica, the emission time of each row
    marks: dict[str, list[Steps]] = {}         # name -> per replica, the punctuations it forwards
    tally = config.sent                        # records sent between servers, Σ one-way delay (µs)
    hops = Hops(links, tally)
    firsts: dict[tuple, tuple[np.ndarray, list]] = {}   # ready()'s answers without punctuations

    def alive(server: str, t: np.ndarray) -> np.ndarray:
        crash = crashes.get(server)
        return t if crash is None else np.where(t >= crash, NEVER, t)

    def hop(a: str, b: str, sent: np.ndarray, marked: np.ndarray | None = None,
            key: tuple | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Arrivals of rows sent at ``sent`` and punctuations at ``marked``, FIFO with each other
        (``key`` names the sending replica: its rows' summary and arrivals are reused)."""
        if marked is None:
            marked = np.empty(0, np.int64)
        if a == b:
            return sent, marked
        arrival = hops.rows(key, a, b, sent) if key is not None and not len(marked) else None
        if arrival is None:
            arrival = links.arrive(a, b, np.concatenate((sent, marked)) if len(marked) else sent, tally, len(sent))
        for server in (a, b):          # in flight when either end crashed: lost with the connection
            crash = crashes.get(server)
            if crash is not None:
                arrival = np.where(arrival >= crash, NEVER, arrival)
        return arrival[:len(sent)], arrival[len(sent):]

    def ready(name: str, index: int, port: int, upstream: str) -> tuple[np.ndarray, list[Steps]]:
        """When replica ``name#index`` has each row of its input ``port`` (first copy, before its CPU
        cost), and the punctuations arriving from each upstream replica."""
        target = placement[name][index]
        times, steps = emitted[upstream], marks.get(upstream)
        sources = config.upstreams.get((physical.replicas[name][index], port), ())
        if steps is None:          # the same first arrivals for every replica on this server reading them
            memo = (upstream, target, tuple(source.index for source in sources))
            found = firsts.get(memo)
            if found is not None:
                hops.repeat(found[1])
                return found[0], []
            before = list(tally)
        best, fresh, copies = None, False, []
        for source in sources:
            marked = steps[source.index] if steps is not None else None
            sent = times[source.index]       # a source's own rows, unchanged: the same in every configuration
            sender = ("published", upstream) if sent is window.published.get(upstream) else (upstream, source.index)
            at, mark_at = hop(placement[upstream][source.index], target, sent,
                              None if marked is None else marked[0], sender)
            if best is None:
                best = at                    # may be another replica's own array: never written to
            elif fresh:
                np.minimum(best, at, out=best)
            else:
                best, fresh = np.minimum(best, at), True
            if marked is not None:
                copies.append((mark_at, marked[1]))
        if steps is None:
            firsts[memo] = (best, [tally[0] - before[0], tally[1] - before[1]])
        return best, copies

    def sources_only(name: str, index: int) -> tuple | None:
        """A key for replica ``name#index`` when it reads only source streams' own rows (the same in
        every configuration: a Union of entry replicas at their sources' servers) and waits for no
        punctuation: its times are then the same in every configuration that has a replica on its
        server reading the same upstream servers (kept in ``links.shared_replicas``)."""
        known = config.signatures.get((name, index), ())
        if known != ():
            return known
        key: tuple | None = (name, placement[name][index])
        if name in waits:
            key = None
        for port, upstream in enumerate(query.operators[name].inputs):
            sources = config.upstreams.get((physical.replicas[name][index], port), ())
            if key is None or any(emitted[upstream][s.index] is not window.published.get(upstream) for s in sources):
                key = None
                break
            key += (tuple(placement[upstream][s.index] for s in sources),)
        config.signatures[(name, index)] = key
        return key

    for stream in query.streams:
        times = []
        sent, values = window.punctuations[stream]
        steps = []
        for e, server in enumerate(placement[stream]):
            at, mark_at = hop(window.homes[stream], server, window.published[stream],
                              sent if stream in waits else None, ("published", stream))
            times.append(alive(server, _plus(at, cost[stream])))
            steps.append(shifted((mark_at, values), round(cost[stream]), crashes.get(server)))
        emitted[stream] = times
        if stream in waits:
            marks[stream] = steps
    for name, spec in query.operators.items():
        out = rows[name]
        times = []
        steps = []
        for r, server in enumerate(placement[name]):
            shared = sources_only(name, r) if spec.kind == "union" and not crashes else None
            if shared is not None:         # the same in every configuration with a replica here
                found = links.shared_replicas.get(shared)
                if found is not None:
                    hops.repeat(found[1])
                    times.append(found[0])
                    continue
                before = list(tally)
            ports = [ready(name, r, p, upstream) for p, upstream in enumerate(spec.inputs)]
            if name in waits or spec.kind == "aggregate":
                steps.append(shifted(frontier([copies for _, copies in ports]), round(cost[name]),
                                     crashes.get(server)))
            if spec.kind == "union":       # each row is its port's row: one gather over the ports' times
                at = _plus(np.concatenate([at for at, _ in ports])[out.stacked()], cost[name])
            elif spec.kind == "join":
                at = _plus(np.maximum(ports[0][0][out.parents[0]], ports[1][0][out.parents[1]]), cost[name])
            elif spec.kind == "aggregate":     # a window closes at the first frontier >= its end - 1
                ordered = getattr(query.new_operator(name), "order_sensitive", False)
                at = release(steps[-1], out.ts if ordered else out.ts - 1)
            else:                          # a Filter that passed every row reads its input's times as they are
                at = _plus(ports[0][0] if out.whole else ports[0][0][out.parents[0]], cost[name])
            times.append(alive(server, at))
            if shared is not None:
                links.shared_replicas[shared] = (times[-1], [tally[0] - before[0], tally[1] - before[1]])
        emitted[name] = times
        if name in waits:
            marks[name] = steps
    arrivals = {}
    for app, spec in query.applications.items():
        at, copies = ready(app, 0, 0, spec.input)
        if spec.ordered:       # the application's sorter releases a row at the first punctuation >= its ts
            at = np.maximum(at, release(frontier([copies]), rows[spec.input].ts))
        arrivals[app] = alive(placement[app][0], _plus(at, cost[app]))
    return arrivals


class Hops:
    """One configuration's hops over one window: a replica's rows are summarised once
    (:class:`~simulator.timing_links.Sends`) for every link they take (replicas emitting the very
    same array, as Filters on one server do, share it).  Rows of a source stream
    (``("published", stream)``) are the same in every configuration: their summaries and arrivals
    are kept for the window in ``links.shared_*``."""

    def __init__(self, links: Links, tally: list):
        self.links, self.tally = links, tally
        self.summaries: dict[Any, Any] = {}

    def rows(self, key: tuple, a: str, b: str, sent: np.ndarray) -> np.ndarray | None:
        """Arrivals at ``b`` of the rows ``key`` sends from ``a`` at ``sent`` (before crashes), with
        their cost in the tally; None where :meth:`Links.arrive` must do it."""
        shared = key[0] == "published"
        if not shared:       # replicas that emit the very same times (Filters on one server) share them
            key = id(sent)
        summaries = self.links.shared_summaries if shared else self.summaries
        found = self.links.shared_arrivals.get((key, a, b)) if shared else None
        if found is None:
            summary = summaries.get(key)
            if summary is None:
                summary = summaries[key] = self.links.sends(sent)   # holds ``sent``: its id stays its own
            part = [0, 0]
            found = (self.links.send(self.links.column[(a, b)], summary, part), part)
            if shared:
                self.links.shared_arrivals[(key, a, b)] = found
        arrival, part = found
        if arrival is not None:
            self.repeat(part)
        return arrival

    def repeat(self, part: list) -> None:
        """Count again records sent and their delays (a memoised hop is still a hop: §V-A's cost)."""
        self.tally[0] += part[0]
        self.tally[1] += part[1]


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
    if getattr(scenario, "clocks", None):
        raise TimingUnsupported(f"{where}: [clocks.{next(iter(scenario.clocks))}]: the timing tier runs every server "
                                f"on the true time; per-server clocks need the reference tier")
    if scenario.coordinator is not None:
        raise TimingUnsupported(f"{where}: a [coordinator] changes replicas during the run; use the reference tier")
    for i, fault in enumerate(scenario.faults, start=1):
        if fault.kind != "crash":
            raise TimingUnsupported(f"{where}: [[faults]] #{i} is a {fault.kind!r}; the timing tier models crashes "
                                    f"only")
    for name, spec in query.operators.items():
        if spec.kind not in TIMED_KINDS:
            raise TimingUnsupported(f"{query.source}: operator {name!r} is a {spec.kind}; the timing tier times "
                                    f"{', '.join(TIMED_KINDS)}; use the reference tier")


#: Default window: a simulated hour (memory holds one hour's rows and delays whatever the run's
#: length: ~0.7 GB for 100 servers and ten configurations).
WINDOW_US = 3_600_000_000
#: How far past a window the trace is read at once (a held link's recovery beyond it is looked up).
LOOKAHEAD_US = 600_000_000


def run_configs(prepared: Any, configs: list[tuple[int, str | None] | Deployed], *, out: Any = None,
                keep_records: bool = False,
                window_us: int = WINDOW_US, on_window: Any = None, keep: bool = True,
                thresholds_us: tuple[int, ...] = ()) -> list[Sink]:
    """Time every ``(kmax, deployment)`` of ``configs`` over ``prepared``'s window, a window of
    ``window_us`` at a time: the content of a window is made once and timed for every configuration.
    A config may be a :class:`Deployed` made already (by another process: :func:`deployed` of the
    same scenario and network), so a share of a sweep does not place its replicas again.
    With ``out``, each configuration's deliveries stream to ``out(kmax, deployment)/deliveries.parquet``.
    ``on_window(done_us, total_us)`` is called after each window."""
    sinks = []
    for item in configs:
        wall = time.perf_counter()
        config = item if isinstance(item, Deployed) else deployed(prepared, *item)
        sink = Sink(config, out(config.kmax, config.deployment) if out is not None else None, keep_records, keep,
                    thresholds_us)
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
    cost = round(cost_us)
    if not cost:
        return t
    return np.where(t < NEVER, t + cost, NEVER)
