"""What the coordinator decides, as plain values: one decision per node control message.

Each decision maps one-to-one onto a node control message, sent to the nodes in its :attr:`nodes`;
the engine builds that message (:func:`engine.decision_messages.control_message`), so placement
never imports the engine (``tests/test_layering.py``):

====================  =====================================================  =========================
decision              message                                                sent to
====================  =====================================================  =========================
:class:`Deploy`       ``DeployReplica(replica, peers)``                      ``server``
:class:`Remove`       ``RemoveReplica(replica)``                             ``server``
:class:`Connect`      ``ConnectStream(stream, source_server, target_server)``  both ends
:class:`Disconnect`   ``DisconnectStream(stream)``                           both ends
====================  =====================================================  =========================

Servers are names here (the deployment's indices resolved).  ``peers`` lists the server of every
replica of the same logical node by index, ``""`` where an index is not deployed.  ``reason`` says
which algorithm asked (``initial``, ``gc``, ``revival``), for logs.
"""

from __future__ import annotations

from dataclasses import dataclass

from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.placement.model import Deployment


@dataclass(frozen=True)
class _OnServer:
    replica: ReplicaId
    server: str

    @property
    def nodes(self) -> tuple[str, ...]:
        return (self.server,)

    @property
    def target(self) -> str:
        """What the decision is about, for logs and summaries: ``name#index``."""
        return str(self.replica)


@dataclass(frozen=True)
class Deploy(_OnServer):
    peers: tuple[str, ...] = ()
    reason: str = ""


@dataclass(frozen=True)
class Remove(_OnServer):
    reason: str = ""


@dataclass(frozen=True)
class _OnStream:
    stream: StreamReplica
    source_server: str
    target_server: str
    reason: str = ""

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.source_server, self.target_server)))

    @property
    def target(self) -> str:
        """What the decision is about, for logs and summaries: ``source>target`` (replicas)."""
        return f"{self.stream.source}>{self.stream.target}"


@dataclass(frozen=True)
class Connect(_OnStream):
    """Stream replica ``stream`` runs from ``source_server`` to ``target_server``."""


@dataclass(frozen=True)
class Disconnect(_OnStream):
    """Stream replica ``stream`` stops."""


Decision = Deploy | Remove | Connect | Disconnect


def changes(before: Deployment, after: Deployment, servers: tuple[str, ...], reason: str) -> list[Decision]:
    """The decisions that turn ``before`` into ``after``, in an order nodes can apply one by one:
    disconnect, remove, deploy, connect (a stream's ends exist whenever it is connected)."""
    out: list[Decision] = []
    for s in sorted(before.streams - after.streams, key=_order):
        out.append(Disconnect(s, servers[before.hosts[s.source]], servers[before.hosts[s.target]], reason))
    for r in sorted(set(before.hosts) - set(after.hosts)):
        out.append(Remove(r, servers[before.hosts[r]], reason))
    moved = sorted(r for r in set(after.hosts) & set(before.hosts) if after.hosts[r] != before.hosts[r])
    if moved:
        raise ValueError(f"replicas {', '.join(map(str, moved))} changed server; remove and deploy a new index instead")
    for r in sorted(set(after.hosts) - set(before.hosts)):
        out.append(Deploy(r, servers[after.hosts[r]], _peers(after, r.name, servers), reason))
    for s in sorted(after.streams - before.streams, key=_order):
        out.append(Connect(s, servers[after.hosts[s.source]], servers[after.hosts[s.target]], reason))
    return out


def _peers(deployment: Deployment, name: str, servers: tuple[str, ...]) -> tuple[str, ...]:
    replicas = deployment.replicas_of(name)
    by_index = {r.index: servers[deployment.hosts[r]] for r in replicas}
    return tuple(by_index.get(i, "") for i in range(max(by_index) + 1)) if by_index else ()


def _order(stream: StreamReplica) -> tuple:
    return stream.source, stream.target, stream.port
