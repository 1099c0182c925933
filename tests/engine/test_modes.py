"""Engine modes on the in-memory network (engine/core/modes.py): every mode gives the reference output
under random interleavings and a crash; the failover model's standbys carry nothing and keep little;
a port switches only once the failure detector fires; cluster files name the mode."""

from __future__ import annotations

import pytest

from replicast.engine.cluster_config import ClusterConfigError, load_cluster
from replicast.engine.core.modes import MODES, Mode, preference, shape
from replicast.engine.messages import Batch, Standby
from replicast.engine.node import NodeOptions
from replicast.operators.plan import ReplicaId, StreamReplica
from tests.engine.memnet import MemoryNetwork
from tests.engine.test_config_errors import cluster
from replicast.operators.record import CLOSED
from tests.engine.test_lifecycle import fig1_messages
from tests.engine.test_node import NODES, QUERY, STREAMS, assert_same, placement, publish_all

HEARTBEAT_US, TIMEOUT_US = 250_000, 1_000_000
MAX_STEPS = 100_000          # messages per heartbeat interval: far above what these runs exchange


def options(mode: str) -> NodeOptions:
    return NodeOptions(mode=Mode(mode), heartbeat_us=HEARTBEAT_US, peer_timeout_us=TIMEOUT_US,
                       join_timeout_us=TIMEOUT_US)


def advance(net: MemoryNetwork, us: int) -> None:
    """Let ``us`` pass in heartbeat steps, delivering everything in between (live peers stay heard)."""
    for _ in range(us // HEARTBEAT_US):
        net.tick(HEARTBEAT_US)
        assert net.run(MAX_STEPS) < MAX_STEPS, "a message storm (a replica rejoining over and over?)"


class Recording(MemoryNetwork):
    """Remembers every message sent, by (source node, destination node)."""

    def __init__(self, *args, **kwargs):
        self.sent = []
        super().__init__(*args, **kwargs)

    def flush(self) -> None:
        for name, core in self.cores.items():
            if name not in self.dead:
                outbox = core.messages_to_send()
                self.sent.extend((name, dst, message) for dst, message in outbox)
                core.outbox = outbox      # still to be sent by the base class
        super().flush()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", [0, 1])
def test_every_mode_equals_the_reference(mode, seed):
    place = placement(2, NODES)
    net = MemoryNetwork(QUERY, place, seed=seed, options=options(mode))
    publish_all(net, place)
    assert_same(net)


@pytest.mark.parametrize("mode", [m for m in MODES if m != "none"])
def test_every_replicated_mode_survives_a_crash(mode):
    place = placement(2, NODES)
    net = MemoryNetwork(QUERY, place, seed=3, options=options(mode))
    publish_all(net, place, kill="n2")
    advance(net, 2 * TIMEOUT_US)       # the failover modes switch once the detector fires
    assert_same(net)


@pytest.mark.parametrize("mode", [m for m in MODES if m != "none"])
def test_every_replicated_mode_takes_a_restarted_node_back(mode):
    """Kill a node mid-stream, let the detector fire, restart it (its replicas join from live peers'
    snapshots), then at once kill the donors' node: what the donors held but had not emitted yet
    (input awaiting punctuations) now lives only in the joined replicas.  The output is still the reference."""
    place = placement(2, NODES)
    net = MemoryNetwork(QUERY, place, seed=4, options=options(mode))
    items = [(stream, item) for _, stream, item in fig1_messages()] + [(s, {"punctuation": CLOSED}) for s in STREAMS]
    for i, (stream, item) in enumerate(items):
        if i == len(items) // 2:
            net.kill("n2")
            advance(net, 2 * TIMEOUT_US)
            net.restart("n2")
            advance(net, 2 * TIMEOUT_US)
            net.kill("n3")
            advance(net, 2 * TIMEOUT_US)
        for node in place[stream]:
            if node not in net.dead:
                net.publish(node, stream, [item])
        net.run(3)
    net.run()
    advance(net, 2 * TIMEOUT_US)
    assert sum(core.counters["snapshots_taken"] for core in net.cores.values()) > 0
    assert_same(net)


def operator_inputs(net: MemoryNetwork) -> dict:
    """Watch every operator replica: replica -> the records its operator takes, in order."""
    seen = {}
    for core in net.cores.values():
        for replica, hosted in core.hosted.items():
            if hosted.kind == "operator":
                operator, steps = hosted.logic.operator, seen.setdefault(replica, [])

                def on_batch(port, records, steps=steps, take=operator.on_batch):
                    steps.extend((port, r) for r in records)
                    return take(port, records)
                operator.on_batch = on_batch
    return seen


@pytest.mark.parametrize("mode, identical", [("deterministic", True), ("synchronization", True),
                                             ("failover", False)])
@pytest.mark.pure_python        # watches each operator through its instance's on_batch
def test_peer_replicas_process_one_order(mode, identical):
    """Deterministic replicas sort their input; a process pair's backup takes its primary's steps."""
    place = placement(2, NODES)
    net = MemoryNetwork(QUERY, place, seed=0, options=options(mode))
    seen = operator_inputs(net)
    publish_all(net, place)
    assert_same(net)
    same = {name: seen[ReplicaId(name, 0)] == seen[ReplicaId(name, 1)] for name in QUERY.operators}
    assert all(len(seen[ReplicaId(name, 0)]) > 20 for name in QUERY.operators)
    assert all(same.values()) if identical else not all(same.values()), same
    determinants = sum(core.counters["determinants"] for core in net.cores.values())
    assert (determinants > 100) == (mode == "synchronization")


def test_a_backup_takes_over_only_when_the_detector_fires():
    place = placement(2, ["n1", "n2", "n3", "n4"])
    net = MemoryNetwork(QUERY, place, seed=0, options=options("synchronization"))
    advance(net, HEARTBEAT_US)
    primary, backup = place["correlate"]
    assert net.cores[primary].pairs.pairs[ReplicaId("correlate", 0)].role.value == "primary"
    assert net.cores[backup].pairs.pairs[ReplicaId("correlate", 1)].role.value == "backup"
    net.kill(primary)
    advance(net, TIMEOUT_US)
    assert net.cores[backup].counters["takeovers"] == 0
    advance(net, 2 * HEARTBEAT_US)
    assert net.cores[backup].counters["takeovers"] >= 1
    assert net.cores[backup].pairs.pairs[ReplicaId("correlate", 1)].role.value == "solo"
    net.restart(primary)                 # it joins from its old backup, which now leads the pair
    advance(net, 2 * TIMEOUT_US)
    assert net.cores[backup].pairs.pairs[ReplicaId("correlate", 1)].role.value == "primary"
    assert net.cores[primary].pairs.pairs[ReplicaId("correlate", 0)].role.value == "backup"


def test_standbys_carry_no_data_and_keep_little():
    place = placement(2, NODES)
    net = Recording(QUERY, place, seed=0, options=options("failover"))
    publish_all(net, place)
    net.tick(net.options.heartbeat_us)      # acks left waiting for other traffic go on their own (links.py)
    net.run()
    assert_same(net)
    followed, standing_by = set(), set()
    for core in net.cores.values():
        for stream, inbound in core.inbound.items():
            (standing_by if inbound.state.value == "standby" else followed).add(stream)
    assert standing_by and followed
    batches = {m.stream for _, _, m in net.sent if isinstance(m, Batch) and m.records}
    assert batches and not batches & standing_by                 # standbys never carried a record
    assert any(isinstance(m, Standby) and m.punctuation > 0 for _, _, m in net.sent)
    retained = [len(h.log) for core in net.cores.values() for h in core.hosted.values()]
    assert max(retained) <= 1        # standby logs trimmed as the ports' punctuations advanced


def test_a_port_switches_only_when_the_detector_fires():
    place = placement(2, ["n1", "n2", "n3", "n4"])
    net = MemoryNetwork(QUERY, place, seed=0, options=options("failover"))
    advance(net, HEARTBEAT_US)
    # The load Union's replica 0 follows cpu_b#0 on another node; kill that node.
    core = net.cores[place["load"][0]]
    [(stream, inbound)] = [(s, i) for s, i in core.inbound.items() if s.target == ReplicaId("load", 0)
                           and s.source.name == "cpu_b" and i.state.value == "following"]
    assert stream.source.index == 0 and inbound.node != core.name
    net.kill(inbound.node)                 # it was last heard now
    advance(net, TIMEOUT_US)
    assert core.counters["failovers"] == 0 and core.inbound[stream].state.value == "following"
    advance(net, 2 * HEARTBEAT_US)
    assert core.counters["failovers"] >= 1 and core.inbound[stream].state.value == "standby"
    assert core.inbound[StreamReplica(ReplicaId("cpu_b", 1), stream.target, stream.port)].state.value == "following"


def test_shape_keeps_the_first_replicas_and_their_indexes():
    place = {"a": ["n1", "n2", "n3"], "b": [None, "n2", "n3"], "app": ["n4"]}
    assert shape(Mode.NONE, place, ["app"]) == {"a": ["n1", None, None], "b": [None, "n2", None], "app": ["n4"]}
    assert shape(Mode.REPLICATION, place) is place
    assert preference(0, [0, 1, 2]) == [0, 1, 2] and preference(4, [0, 2, 5]) == [2, 5, 0]


def test_the_cluster_file_names_the_mode(tmp_path):
    assert load_cluster(cluster(tmp_path)).options().mode is Mode.REPLICATION
    assert load_cluster(cluster(tmp_path, top='mode = "failover"')).options().mode is Mode.FAILOVER
    with pytest.raises(ClusterConfigError) as error:
        load_cluster(cluster(tmp_path, top='mode = "fast"'))
    assert str(error.value) == f"{tmp_path / 'cluster.toml'}: 'mode' must be one of {', '.join(MODES)}, got 'fast'"
    assert MODES[:3] == ("replication", "none", "failover")
