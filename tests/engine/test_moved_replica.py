"""A replica placed again under its own name on another node (engine/core/control.py rule 8).

A coordinator elected after the one that placed a replica knows only what runs (docs/placement.md):
when the lost replica's node was the old coordinator's, it revives the replica with the index that
is free — the lost one's — on another node.  The nodes at the other ends of its stream replicas
still name the dead node: upstream routes and downstream inputs must follow the new node on the
``ConnectStream`` that names it.  Before, they kept the dead node, the revived replica's requests
were stale at its senders, and it never received a record (seen live: a revived sink replica wrote
an empty file, tests/integration/test_sink_replicas_live.py)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from replicast.engine.core.configure import _peers, _streams, _where, placement_plan
from replicast.engine.core.states import ReplicaState
from replicast.engine.messages import ConnectStream, DeployReplica
from replicast.operators.plan import ReplicaId
from tests.engine.memnet import MemoryNetwork
from tests.engine.test_lifecycle import FIG1, assert_reference, fig1_messages, run_fig1, states
from tests.engine.test_liveness import own_nodes_placement


def place_again(net: MemoryNetwork, replica: ReplicaId, node: str) -> None:
    """What the new coordinator sends: deploy ``replica`` on ``node``, connect its stream replicas at both ends."""
    placement = {name: list(nodes) for name, nodes in net.placement.items()}
    placement[replica.name][replica.index] = node
    net.placement = placement
    physical = placement_plan(FIG1, placement)
    where = _where(physical, placement)
    messages: dict[str, list] = defaultdict(list)
    messages[node].append(DeployReplica(replica, _peers(placement, replica.name)))
    for s in _streams(physical, net.options.entry_modes):
        if replica in (s.source, s.target):
            for at in dict.fromkeys((where[s.source], where[s.target])):
                messages[at].append(ConnectStream(s, where[s.source], where[s.target]))
    net.control(dict(messages))


@pytest.mark.parametrize("kind", ["correlate", "load_trend", "hot"])
def test_a_replica_placed_again_under_its_name_elsewhere_is_fed_and_feeds_its_receivers(kind):
    """``kind#0``'s node dies for good; ``kind#0`` is placed again on a spare node; then ``kind#1``'s
    node dies for good: the moved replica carries the operator alone — its senders' routes and its
    receivers' inputs followed it — and the applications get exactly the reference."""
    place = own_nodes_placement()
    net = MemoryNetwork(FIG1, place, seed=5, spare=("spare",))
    n = len(fig1_messages())
    first, second = place[kind]
    replica = ReplicaId(kind, 0)
    run_fig1(net, {n // 4: lambda net: net.kill(first),
                   n // 3: lambda net: place_again(net, replica, "spare"),
                   2 * n // 3: lambda net: net.kill(second)})
    assert_reference(net)
    assert states(net, kind) == [ReplicaState.LIVE]
    moved = sum(core.counters["moved_streams"] for node, core in net.cores.items() if net.live(node))
    streams = [s for s in placement_plan(FIG1, net.placement).stream_replicas if replica in (s.source, s.target)]
    assert moved == len(streams), "every other end of the moved replica's stream replicas followed it"
    for s in streams:
        if s.target == replica:
            source = net.cores[place[s.source.name][s.source.index]]
            assert source.hosted[s.source].routes[s].node == "spare"
