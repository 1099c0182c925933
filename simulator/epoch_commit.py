"""When output becomes visible: replicast's sink replicas against a Flink-style epoch-commit sink,
in the simulator (docs/consume.md, "Cost"; FlameStream `001_…`, its latency-vs-checkpoint figure).

One simulated wide-area pipeline — a source, two entry replicas, two filter replicas, two sink
replicas and a checkpoint coordinator on servers 20–60 ms apart (:data:`RTT_MS`) — runs the same
records once.  From each record's delivery times at the two sinks:

* **replicast** (exactly once by output ids, docs/consume.md): a record is visible when its first
  copy reaches a sink — no barrier, no commit, so the checkpoint interval does not enter;
* **epoch commit** (Flink's two-phase-commit sink): the records published in checkpoint epoch
  ``(t_{e-1}, t_e]`` become visible when checkpoint ``e`` completes: its barrier, injected at the
  source at ``t_e``, reaches the (single, unreplicated) sink behind the epoch's records — the
  latency of sink 0's path at ``t_e`` — and the sink's pre-commit acknowledgement and the
  coordinator's commit notification make one round trip between the sink and the coordinator.

Visibility latency is visible − ts; :func:`compare` gives its p50/p99 per checkpoint interval.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass

import numpy as np

from replicast.engine.node import NodeOptions
from replicast.engine.query_file import parse_query
from replicast.operators.query import Query
from replicast.simulator.driver import Observer, Simulation
from replicast.simulator.network import FixedDelays

MS, S = 1_000, 1_000_000
NODES = ["src", "e1", "e2", "f1", "f2", "s1", "s2", "jm"]
#: Round-trip times (ms) between the servers; pairs not listed are 40 ms apart.
RTT_MS = {"src": {"e1": 20.0, "e2": 30.0}, "e1": {"f1": 20.0, "f2": 40.0}, "e2": {"f1": 40.0, "f2": 20.0},
          "f1": {"s1": 20.0, "s2": 50.0}, "f2": {"s1": 50.0, "s2": 20.0}, "s1": {"jm": 60.0}, "s2": {"jm": 60.0}}
PLACEMENT = {"cpu": ["e1", "e2"], "busy": ["f1", "f2"], "alerts": ["s1", "s2"]}
#: The pipeline: cpu -> filter busy -> application alerts (every record passes).
QUERY_TOML = """
[[streams]]
name = "cpu"
fields = { server = "str", load = "float" }

[[operators]]
name = "busy"
kind = "filter"
input = "cpu"
where = "load > 0.5"

[[applications]]
name = "alerts"
input = "busy"
"""


def query() -> Query:
    return parse_query(QUERY_TOML, "simulator.epoch_commit")


@dataclass(frozen=True)
class Visibility:
    """p50 and p99 of visible − ts (ms) for one sink design and checkpoint interval."""

    design: str
    interval_s: float | None
    p50_ms: float
    p99_ms: float
    records: int


class _Deliveries(Observer):
    def __init__(self):
        self.at: dict[tuple[str, int], int] = {}        # (sink node, ts) -> delivery time (µs)

    def delivered(self, node, event):
        for record in event.records:
            self.at.setdefault((node, record[0]), event.now)


def _rtt(a: str, b: str) -> float:
    return RTT_MS.get(a, {}).get(b) or RTT_MS.get(b, {}).get(a) or 40.0


def simulate(query: Query, seconds: float, every_ms: float = 20.0) -> tuple[list[int], dict[tuple[str, int], int]]:
    """Publish one record every ``every_ms`` for ``seconds`` (ts = publish time); the published ts
    and each sink's delivery times."""
    rtt = {a: {b: _rtt(a, b) for b in NODES if b != a} for a in NODES}
    observer = _Deliveries()
    options = NodeOptions(punctuation_us=20 * MS, heartbeat_us=100 * MS, peer_timeout_us=1000 * MS)
    sim = Simulation(query, PLACEMENT, FixedDelays(rtt, NODES), {n: i for i, n in enumerate(NODES)},
                     options=options, observer=observer)
    published = []
    start = S // 2
    for i in range(int(seconds * 1000 / every_ms)):
        ts = start + round(i * every_ms * MS)
        payload = json.dumps([{"ts": ts, "server": f"s{i % 7}", "load": 0.9}]).encode()
        sim.env.call_at(ts, sim.publish, "src", "cpu", payload)
        published.append(ts)
    for stream_ts in (start + round(seconds * S) + 50 * MS,):
        sim.env.call_at(stream_ts, sim.publish, "src", "cpu", json.dumps({"punctuation": stream_ts}).encode())
    sim.run(until=start + round(seconds * S) + 5 * S)
    return published, observer.at


def compare(intervals_s=(0.1, 1.0, 10.0), seconds: float = 60.0) -> list[Visibility]:
    published, at = simulate(query(), seconds)
    delivered = [ts for ts in published if (("s1", ts) in at or ("s2", ts) in at)]
    first = np.array([min(at.get(("s1", ts), 2**62), at.get(("s2", ts), 2**62)) - ts for ts in delivered]) / MS
    out = [Visibility("replicast", None, float(np.percentile(first, 50)), float(np.percentile(first, 99)), len(first))]
    on_s1 = [ts for ts in delivered if ("s1", ts) in at]
    commit_rtt_us = _rtt("s1", "jm") * MS
    for interval in intervals_s:
        step = round(interval * S)
        origin = published[0]
        latencies = []
        for ts in on_s1:
            boundary = origin + -(-(ts - origin) // step) * step if ts > origin else origin
            # the barrier follows the last record at or before the boundary on sink 0's path
            j = bisect.bisect_right(on_s1, boundary) - 1
            barrier_path = at[("s1", on_s1[j])] - on_s1[j] if j >= 0 else 0
            visible = max(boundary + barrier_path, at[("s1", ts)]) + commit_rtt_us
            latencies.append((visible - ts) / MS)
        values = np.array(latencies)
        out.append(Visibility("epoch commit", interval, float(np.percentile(values, 50)),
                              float(np.percentile(values, 99)), len(values)))
    return out
