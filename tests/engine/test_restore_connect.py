"""A coordinator's ``restore`` after a crash-restart (docs/placement.md, "A server that restarted"):
the replica it had placed on the restarted node is deployed there again and its stream replicas are
connected again at both ends.  A receiver that meanwhile marked the stream replica VANISHED (the
restarted node said it did not host it) must ask for it again on that ``ConnectStream``
(engine/core/control.py rule 7): its first request expired at the sender long before."""

from __future__ import annotations

from replicast.engine.core.configure import placement_plan
from replicast.engine.core.states import InboundState
from replicast.engine.messages import ConnectStream, DeployReplica
from replicast.engine.node import NodeOptions
from replicast.operators.plan import ReplicaId
from tests.engine.memnet import MemoryNetwork
from tests.engine.test_lifecycle import FIG1, assert_reference, fig1_messages, run_fig1
from tests.engine.test_liveness import node_of, own_nodes_placement, stream_between


def test_a_vanished_stream_replica_is_followed_again_once_its_replica_is_restored():
    place = own_nodes_placement()
    net = MemoryNetwork(FIG1, place, seed=3, options=NodeOptions(join_timeout_us=300_000))
    n = len(fig1_messages())
    replica = ReplicaId("correlate", 0)
    crashed, peer = node_of(place, replica), node_of(place, ReplicaId("correlate", 1))
    out = stream_between(place, "correlate", "hot", 0, 0)
    receiver = node_of(place, out.target)
    seen = {}

    def crash_restart_without_it(net):
        net.run()
        net.kill(crashed)
        net.placement["correlate"] = [None, peer]    # the node's configuration does not place it
        net.restart(crashed)

    def restore(net):
        net.run()
        seen["before"] = net.cores[receiver].inbound[out].state
        net.placement["correlate"] = [crashed, peer]
        messages = {crashed: [DeployReplica(replica, (crashed, peer))]}
        for stream in placement_plan(FIG1, place).stream_replicas:
            if replica in (stream.source, stream.target):
                ends = (node_of(place, stream.source), node_of(place, stream.target))
                for node in dict.fromkeys(ends):
                    messages.setdefault(node, []).append(ConnectStream(stream, *ends))
        net.control(messages)

    run_fig1(net, {n // 4: crash_restart_without_it, n // 2: restore}, tick_us=20_000)
    assert seen["before"] is InboundState.VANISHED
    assert net.cores[receiver].inbound[out].state is InboundState.FOLLOWING
    assert net.cores[crashed].hosted[replica].routes[out].state.name == "ACTIVE"
    assert_reference(net)
