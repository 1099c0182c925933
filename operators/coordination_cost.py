"""What each coordination costs in waiting, estimated from one-way delays (docs/explain.md).

The model, stated once:

* every source sends from the server that hosts its first entry replica; a record and the
  punctuation after it travel together, and a replica hears of each source first along its fastest
  path of stream replicas (replication: the first copy wins, §IV-B) — :func:`first_arrivals`;
* an operator that waits for *whole-stream* punctuations (a window closing, a sorter releasing)
  acts for a record of source ``s`` only once the slowest of the sources behind it has punctuated,
  so the record waits ``max_s' A(s') − A(s)`` beyond its own path, at the replica that finishes
  first (its copy is the one the application keeps);
* sealing per key would release a key's partition once *its* producers have sealed it: when each
  key comes from one source (e.g. one per host, the case ``seal`` declares), that extra wait is 0;
* both also wait for the punctuation itself: up to one punctuation interval, the same for both,
  which the estimate reports apart;
* entry stamping holds a stamped segment until every entry replica of the stream holds it: one
  round trip to the farthest one (docs/node.md, engine/core/stamper.py rule 2).

CPU time, queueing and jitter are left out: these are lower bounds on what the trace's delays force.
Pure: delays come in as a matrix (anything indexable ``[a][b]``), hosts as server indices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from replicast.operators.coordination import Analysis, Coordination
from replicast.operators.plan import ReplicaId, StreamReplica


@dataclass(frozen=True)
class Wait:
    """One coordinated node's waiting, per source behind it (ms)."""

    name: str
    coordination: Coordination
    slowest: str                         # the source whose punctuation closes its partitions
    extra_ms: Mapping[str, float]        # source -> wait beyond its own path (whole-stream punctuations)
    keyed_ms: Mapping[str, float] | None  # the same with sealing per key (None: not applicable)


def sources_behind(analysis: Analysis, name: str) -> list[str]:
    """The source streams upstream of ``name``, in query order."""
    query = analysis.query
    found: set[str] = set()
    todo = [name]
    while todo:
        node = todo.pop()
        for upstream in query.inputs_of(node):
            if upstream in query.streams:
                found.add(upstream)
            else:
                todo.append(upstream)
    return [s for s in query.streams if s in found]


def first_arrivals(analysis: Analysis, hosts: Mapping[ReplicaId, int], latency_ms: Any,
                   streams: Iterable[StreamReplica]) -> dict[ReplicaId, dict[str, float]]:
    """For each replica, the earliest time (ms after it is sent) it hears of each source behind it."""
    query = analysis.query
    incoming: dict[ReplicaId, list[StreamReplica]] = {}
    for s in streams:
        incoming.setdefault(s.target, []).append(s)
    arrivals: dict[ReplicaId, dict[str, float]] = {}
    for stream in query.streams:
        replicas = sorted(r for r in hosts if r.name == stream)
        origin = hosts[replicas[0]]
        for replica in replicas:
            arrivals[replica] = {stream: float(latency_ms[origin][hosts[replica]])}
    for name in (*query.operators, *query.applications):
        for replica in sorted(r for r in hosts if r.name == name):
            best: dict[str, float] = {}
            for s in incoming.get(replica, ()):
                link = float(latency_ms[hosts[s.source]][hosts[replica]])
                for source, at in arrivals.get(s.source, {}).items():
                    if at + link < best.get(source, float("inf")):
                        best[source] = at + link
            arrivals[replica] = best
    return arrivals


def waits(analysis: Analysis, arrivals: Mapping[ReplicaId, Mapping[str, float]]) -> list[Wait]:
    """The waiting of every node whose coordination holds output back (see the module docstring).

    A window waits for the frontier of all its inputs (§IV-A); a sorter only for its own port's
    punctuation (§IV-C).  The figures are cumulative: how much later than its own fastest path a
    source's record leaves this node, waits upstream of it included.
    """
    query = analysis.query
    out = []
    for report in analysis.nodes.values():
        if not report.holds_output:
            continue
        replicas = [arrivals[r] for r in arrivals if r.name == report.name and arrivals[r]]
        if query.coordination.sorts(report.name):           # per port: a sorter waits for its own port
            groups = [_behind(analysis, upstream) for upstream in query.inputs_of(report.name)]
        else:
            groups = [sources_behind(analysis, report.name)]
        sources = [s for group in groups for s in group]
        if not replicas or not sources:
            continue
        own = {s: min(at.get(s, float("inf")) for at in replicas) for s in sources}
        extra = {}
        for group in groups:
            done = min(max(at.get(s, float("inf")) for s in group) for at in replicas)
            extra.update({s: round(max(extra.get(s, 0.0), done - own[s]), 3) for s in group})
        slowest = max(sources, key=lambda s: own[s])
        keyed = {s: 0.0 for s in sources} if report.key_seal is not None else None
        out.append(Wait(report.name, report.coordination, slowest, extra, keyed))
    return out


def _behind(analysis: Analysis, name: str) -> list[str]:
    return [name] if name in analysis.query.streams else sources_behind(analysis, name)


def stamping_ms(analysis: Analysis, hosts: Mapping[ReplicaId, int], latency_ms: Any,
                entry_streams: Iterable[str]) -> dict[str, float]:
    """Entry stamping's wait per stream: a round trip from the stamper to its farthest peer."""
    out = {}
    for stream in entry_streams:
        replicas = sorted(r for r in hosts if r.name == stream)
        first = hosts[replicas[0]]
        out[stream] = round(max((float(latency_ms[first][hosts[r]]) + float(latency_ms[hosts[r]][first])
                                 for r in replicas[1:]), default=0.0), 3)
    return out
