"""What servers report to the coordinator (plain data, the coordinator core's only input).

The coordinator's state is soft (§II-B, DESIGN.md §7): everything it knows comes from these reports,
so a newly elected coordinator rebuilds its view from the next round of them.  A node core builds
its report with :func:`engine.core.stats.server_report` and sends it as a ``Report`` message:

* ``rtt_ms``: ``statistics()["rtt_us"]`` (heartbeat round trips) in ms;
* ``hosted``: the replicas it hosts; ``records_out``: their cumulative ``records_out`` (the
  coordinator differentiates them into rates, §V-A);
* ``inputs``: for every stream replica into a hosted replica, its cumulative arrival-rank weight
  (its port's duplicate filter's weight at that stream replica's index) and ``delay_us``, how far
  the newest punctuation received on it lags the node's clock, less one punctuation interval (§V-C);
* ``load``/``capacity``: CPU in use and available, in cores;
* ``routes``: the stream replicas its hosted replicas send on (their routes): what the coordinator
  connected at this end.  A node restarted after a crash has lost the routes the coordinator had
  connected (its own configuration has only its entry points), and only its report can say so — its
  receivers still list those stream replicas as inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from replicast.operators.plan import ReplicaId, StreamReplica


@dataclass(frozen=True)
class InputReport:
    """One stream replica into a hosted replica: cumulative weight ``w(S)`` and current delay."""

    weight: float = 0.0
    delay_us: int = 0


@dataclass(frozen=True)
class ServerReport:
    server: str
    rtt_ms: Mapping[str, float] = field(default_factory=dict)
    load: float = 0.0
    capacity: float = 1.0
    hosted: tuple[ReplicaId, ...] = ()
    records_out: Mapping[ReplicaId, int] = field(default_factory=dict)
    inputs: Mapping[StreamReplica, InputReport] = field(default_factory=dict)
    routes: tuple[StreamReplica, ...] = ()
