"""The physical replica graph: k replicas, all-to-all stream replicas, sorters only where needed."""

from pathlib import Path

from replicast.engine.query_file import load_query
from replicast.operators.plan import ReplicaId, plan

FIG1 = Path(__file__).resolve().parents[2] / "examples" / "fig1.toml"


def test_every_upstream_replica_feeds_every_downstream_replica():
    physical = plan(load_query(FIG1), 3)
    join = ReplicaId("correlate", 1)
    assert physical.upstreams(join, 0) == [ReplicaId("load", i) for i in range(3)]
    assert physical.upstreams(join, 1) == [ReplicaId("ping", i) for i in range(3)]
    assert len(physical.upstreams(ReplicaId("alerts", 0), 0)) == 3      # apps are fed by all replicas
    assert len(physical.replicas["cpu_a"]) == 3                          # k entry points per source
    # stream replicas: each edge u→v carries k_u · k_v copies
    edges = sum(len(load_query(FIG1).inputs_of(n)) for n in (*load_query(FIG1).operators,))
    apps = len(load_query(FIG1).applications)
    assert len(physical.stream_replicas) == edges * 9 + apps * 3


def test_sorters_only_in_front_of_order_sensitive_operators_and_ordered_apps():
    physical = plan(load_query(FIG1), 2)
    assert physical.sorts_input("load_trend")          # count windows
    assert physical.sorts_input("alerts")              # ordered = true
    assert not physical.sorts_input("correlate")
    assert not physical.sorts_input("rtt_stats")


def test_degree_may_differ_per_operator():
    physical = plan(load_query(FIG1), {"correlate": 4, "load": 2})
    assert len(physical.replicas["correlate"]) == 4
    assert len(physical.replicas["ping"]) == 1
    assert len(physical.upstreams(ReplicaId("correlate", 0), 0)) == 2
