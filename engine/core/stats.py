"""Statistics of a node core: counters per replica and application, latencies (§V-B weights, §VI-B latency),
and the report a server sends its placement coordinator (§V: :func:`server_report`).

Both are functions of the tables they read (hosted replicas, inbound stream replicas, counters …),
never of the node core (docs/architecture.md, "The node core's modules")."""

from __future__ import annotations

from bisect import bisect_left
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Collection

from replicast.engine.core.states import InboundState, StamperRole
from replicast.operators.record import Record
from replicast.placement.reports import InputReport, ServerReport

if TYPE_CHECKING:
    from replicast.engine.core.hosted import Hosted, Inbound
    from replicast.operators.plan import ReplicaId, StreamReplica

_ts = itemgetter(0)

#: Counters every node core keeps (all start at 0; ``docs/node.md`` says what each counts).
COUNTERS = ("dead_letters", "unknown_streams", "malformed_batches", "protocol_errors", "gaps", "stale_batches",
            "stale_requests", "known_batches", "refused_control", "streams_cut", "snapshots_given",
            "snapshots_taken", "rebuilt_without_peer", "rejoins", "continued_streams", "failovers",
            "stale_stamps", "refused_ballots", "unanswered_ballots", "early_requests", "stray_reports", "determinants",
            "takeovers", "donors_behind", "vanished_streams", "peers_rebuilding",
            "snapshots_skipped", "moved_streams")


#: Bounds (µs) of the latency histogram's buckets: wide-area paths are tens to hundreds of ms (§VI).
LATENCY_BOUNDS_US = (1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000,
                     5_000_000, 10_000_000)


class Latency:
    """Delivered records' latency = arrival − ts (§VI-B), summarised: count, total, max, and a
    histogram (``buckets[i]``: records with latency in ``(LATENCY_BOUNDS_US[i-1], LATENCY_BOUNDS_US[i]]``,
    the last one beyond every bound) — the node's ``replicast_app_latency_seconds``.

    A batch costs one C-level sort of its timestamps (linear: they usually come in order), a sum,
    and a bisect per bucket boundary it spans — usually none.  (prometheus_client's
    ``Histogram.observe`` per record cost ~8 µs each and capped a node at ~400 k records/s.)"""

    __slots__ = ("count", "total", "max", "buckets")

    def __init__(self) -> None:
        self.count = self.total = self.max = 0
        self.buckets = [0] * (len(LATENCY_BOUNDS_US) + 1)

    def add(self, now: int, records: list[Record]) -> None:
        if not records:
            return
        stamps = sorted(map(_ts, records))
        n = len(stamps)
        self.total += now * n - sum(stamps)
        worst = now - stamps[0]
        if worst > self.max:
            self.max = worst
        self.count += n
        # latency <= bound  <=>  ts >= now - bound: the newest record has the smallest latency
        buckets, bounds = self.buckets, LATENCY_BOUNDS_US
        first = bisect_left(bounds, now - stamps[-1])
        last = bisect_left(bounds, worst)
        if first == last:
            buckets[first] += n
            return
        below = 0                                      # records in buckets first … i-1
        for i in range(first, last):
            within = n - bisect_left(stamps, now - bounds[i])          # latency <= bounds[i]
            buckets[i] += within - below
            below = within
        buckets[last] += n - below


def statistics(hosted: "dict[ReplicaId, Hosted]", inbound: "dict[StreamReplica, Inbound]",
               lost_input: Collection["ReplicaId"], latencies: dict[str, Latency], rtt_us: dict[str, int],
               counters: dict[str, int]) -> dict[str, Any]:
    """Counters per replica and application (plain data, for reports and metrics); ``lost_input``:
    the rebuilt replicas that lost input and still ask their peers (docs/lifecycle.md)."""
    replicas = {}
    for replica, h in hosted.items():
        filters = h.logic.filters if h.logic is not None else []
        inputs = {i.index: f"{s.source}@{i.epoch}" for s, i in inbound.items()
                  if s.target == replica and i.index is not None}
        replicas[str(replica)] = {
            "kind": h.kind.value, "state": h.state.value, "epoch": h.epoch,
            "records_in": h.records_in, "records_out": h.records_out,
            "duplicates": sum(f.duplicates + f.below_punctuation for f in filters),
            "late_for_seal": h.logic.late_for_seal if h.logic is not None else 0,
            "weights": [f.weights() for f in filters],
            "inputs": [[inputs.get(i, "") for i in range(f.k)] for f in filters],
            "retained": len(h.log), "late": h.entry.late if h.entry else 0,
            "carried": h.entry.carried if h.entry else 0,
            "accepted": h.entry.accepted if h.entry else 0, "malformed": h.entry.malformed if h.entry else 0,
            "stamping": h.stamp is not None and h.stamp.role is StamperRole.STAMPING,
            # rebuilt after losing input, no live peer's snapshot yet (docs/lifecycle.md: asking again)
            "lost_input": replica in lost_input,
            "vanished_inputs": sum(1 for s, i in inbound.items()
                                   if s.target == replica and i.state is InboundState.VANISHED)}
    latency = {app: {"count": l.count, "mean_us": l.total // l.count if l.count else None, "max_us": l.max,
                     "total_us": l.total, "buckets": list(l.buckets)}
               for app, l in latencies.items()}
    return {"replicas": replicas, "latency": latency, "rtt_us": dict(rtt_us), **counters}


def rank_weights(dedup) -> list[float]:
    """§V-B: each stream replica's Σ 1/rank over the copies it delivered."""
    return dedup.weights()


def win_weights(dedup) -> list[float]:
    """Win share's weight: how many copies each stream replica delivered first (rank 1)."""
    return [float(counts[0]) for counts in dedup.rank_counts]


def server_report(name: str, hosted: "dict[ReplicaId, Hosted]", inbound: "dict[StreamReplica, Inbound]",
                  rtt_us: dict[str, int], punctuation_us: int, now: int, load: float = 0.0,
                  capacity: float = 1.0, utility: str = "rank") -> ServerReport:
    """What this server tells the placement coordinator at ``now`` (:mod:`placement.reports`).

    * ``inputs``: every stream replica into a hosted replica, with its duplicate filter's §V-B
      weight (or its wins, with ``NodeOptions.utility = "win-share"``; the filter's index of that stream replica, ``statistics()["replicas"][…]["inputs"]``)
      and its delay (§V-C): how far the newest punctuation received on it lags ``now``, less one
      punctuation interval (a source punctuates once per interval, so a stream on time lags by its
      latency plus up to one interval).  A stream replica that has carried no punctuation yet is as
      late as the time since it was connected here, less one interval.  Never negative.
    * ``routes``: the stream replicas the hosted replicas send on (the coordinator reconnects
      those a restarted node lost, docs/placement.md);
    * ``rtt_ms``: the heartbeat round trips; ``records_out`` per hosted replica (the coordinator
      turns them into rates); ``load``/``capacity``: what the driver measured (the core has no clock
      of its own to measure CPU with).

    Built only when a report is due (every few seconds), never on the data path.
    """
    signal = win_weights if utility == "win-share" else rank_weights
    weights = {replica: [signal(f) for f in h.logic.filters]
               for replica, h in hosted.items() if h.logic is not None}
    interval = punctuation_us
    inputs = {}
    for stream, port_input in inbound.items():
        per_port = weights.get(stream.target)
        weight = 0.0
        if per_port is not None and port_input.index is not None and stream.port < len(per_port) \
                and port_input.index < len(per_port[stream.port]):
            weight = float(per_port[stream.port][port_input.index])
        heard = port_input.punctuation if port_input.punctuation is not None else port_input.since
        inputs[stream] = InputReport(weight, max(0, now - heard - interval))
    routes = tuple(stream for h in hosted.values() for stream in h.routes)
    return ServerReport(name, {peer: us / 1000.0 for peer, us in rtt_us.items()}, float(load),
                        float(capacity), tuple(hosted), {r: h.records_out for r, h in hosted.items()},
                        inputs, routes)
