"""Placement in simulations on the shipped Seattle trace (§V, docs/placement.md): min-cost against random
deployment, garbage collection during a run, and revival through a cut link.  The coordinator runs on
the elected server; its reports and decisions cross the simulated network like every other message."""

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from replicast.engine.core.modes import Mode
from replicast.engine.replay import replay
from replicast.simulator.coordinator import parse_coordinator
from replicast.simulator.run import Prepared, run
from replicast.simulator.scenario import Fault, ScenarioError, load_scenario

DATA = Path(__file__).parent / "data"
S = 1_000_000


def equals_reference(prepared, result) -> bool:
    reference = replay(prepared.query, result.inputs, replicas=1,
                       punctuation_us=round(prepared.scenario.punctuation_ms * 1000)).outputs
    return all(Counter(records) == Counter(result.recorder.outputs[app]) for app, records in reference.items())


def test_min_cost_beats_random_at_equal_kmax():
    """Fig. 4's comparison: at kmax = 2 on 16 Seattle servers, Alg. 5 deploys for a lower network
    cost and a lower p99 latency than a random deployment under the same constraints."""
    prepared = Prepared(load_scenario(DATA / "placement.toml"))
    mincost = run(prepared, 2).summary
    rand = run(prepared, 2, deployment="random").summary
    assert mincost["delivered"] == rand["delivered"] > 2000
    assert mincost["network_cost"] < 0.7 * rand["network_cost"], (mincost["network_cost"], rand["network_cost"])
    assert mincost["latency_ms"]["p99"] < rand["latency_ms"]["p99"], (mincost["latency_ms"], rand["latency_ms"])
    # Entry points stay at their sources, applications where the scenario puts them.
    assert mincost["placement"]["cpu_a"] == ["seattle-2"] and mincost["placement"]["alerts"] == ["seattle-27"]
    assert all(len(set(mincost["placement"][op])) == 2 for op in prepared.query.operators)


def test_garbage_collection_during_a_run_lowers_the_cost_and_changes_no_output():
    scenario = load_scenario(DATA / "placement.toml")
    scenario.coordinator = parse_coordinator({"report_ms": 2000, "utility_period_s": 10, "gc_period_s": 30,
                                              "theta": 0, "kmin": 1, "settle_s": 10}, "test")
    prepared = Prepared(scenario)
    adaptive = run(prepared, 2, keep_records=True)
    static = run(prepared, 2, coordinator=False).summary
    assert equals_reference(prepared, adaptive)
    summary = adaptive.summary
    decisions = summary["coordinator"]["decisions"]
    assert decisions.get("gc:disconnect", 0) >= 4 and not any(k.startswith("revival") for k in decisions)
    assert summary["network_cost"] < 0.6 * static["network_cost"], (summary["network_cost"], static["network_cost"])
    # Before the first round (30 s) both cost the same; after it the collected run costs less in every bucket.
    before, after = summary["cost_over_time"][0], summary["cost_over_time"][1:-1]
    assert before == static["cost_over_time"][0]
    assert all(a[1] < b[1] for a, b in zip(after, static["cost_over_time"][1:-1]))
    (coordinator,) = summary["coordinator"]["coordinators"].values()
    assert coordinator["core"]["adopted"] == 1 and coordinator["core"]["gc_groups"] >= 1


def test_a_cut_link_makes_revival_bring_back_a_collected_stream_replica():
    """GC at kmin = kmax = 2 takes two of the four stream replicas between f and g; cutting the link
    that carries the only input left to one g replica makes its input late, and the coordinator
    revives a collected stream replica from the other f replica (§V-C).  Output stays exact."""
    scenario = load_scenario(DATA / "revival.toml")
    quiet = run(Prepared(scenario), 2).summary
    collected = {what for _, kind, reason, what, _ in quiet["coordinator"]["timeline"] if (kind, reason) == ("disconnect", "gc")}
    assert len(collected) == 2 and all(s.startswith("f#") and ">g#" in s for s in collected)
    placement = quiet["placement"]
    left = sorted({f"f#{i}>g#1" for i in (0, 1)} - collected)[0]          # g#1's only input now
    source, target = placement["f"][int(left[2])], placement["g"][1]
    scenario.faults.append(Fault("cut", (source, target), 60 * S, 140 * S))
    prepared = Prepared(scenario)
    result = run(prepared, 2, keep_records=True)
    timeline = result.summary["coordinator"]["timeline"]
    revived = [(t, what) for t, kind, reason, what, _ in timeline if (kind, reason) == ("connect", "revival")]
    assert revived and revived[0][1] in collected and revived[0][1].endswith(">g#1")
    assert 60 + 10 <= revived[0][0] <= 60 + 10 + 2 * 5 + 2 * 2 + 1         # threshold + two checks + reports
    # The revived stream replica is g#1's only timely input while the cut lasts: GC leaves it alone.
    assert not [t for t, kind, reason, what, _ in timeline
                if (kind, reason, what) == ("disconnect", "gc", revived[0][1]) and revived[0][0] < t < 140]
    assert equals_reference(prepared, result)


def test_revival_redeploys_collected_operator_replicas_which_join_mid_stream_exactly():
    """GC at kmin = 1 takes f and g down to one replica each; cutting the link between the two left
    makes every input of the g replica and of the application late, and no collected stream replica
    can help (their senders are gone): revival redeploys the collected f and g replicas (§V-C), they
    join mid-stream from their peers' snapshots, and the application's output is exact."""
    scenario = load_scenario(DATA / "revival.toml")
    scenario.coordinator = replace(scenario.coordinator, kmin=1)
    quiet = run(Prepared(replace(scenario, duration_s=45)), 2).summary
    removed = {what for _, kind, reason, what, _ in quiet["coordinator"]["timeline"] if (kind, reason) == ("remove", "gc")}
    assert sorted(r[0] for r in removed) == ["f", "g"], removed
    (f,) = {0, 1} - {int(r[2]) for r in removed if r[0] == "f"}
    (g,) = {0, 1} - {int(r[2]) for r in removed if r[0] == "g"}
    scenario.faults.append(Fault("cut", (quiet["placement"]["f"][f], quiet["placement"]["g"][g]), 60 * S, 140 * S))
    prepared = Prepared(scenario)
    result = run(prepared, 2, keep_records=True)
    timeline = result.summary["coordinator"]["timeline"]
    revived = [(t, what) for t, kind, reason, what, _ in timeline if (kind, reason) == ("deploy", "revival")]
    assert {what for _, what in revived} == removed, timeline
    assert all(60 + 10 <= t <= 60 + 10 + 2 * 5 + 2 * 2 + 1 for t, _ in revived)     # threshold + checks + reports
    assert result.summary["lifecycle"]["snapshots_taken"] >= 2                     # joined, not started empty
    assert equals_reference(prepared, result)


def test_coordinator_settings_are_checked(tmp_path):
    with pytest.raises(ScenarioError, match=r"\[coordinator\]: 'kmin' must be an integer >= 1"):
        parse_coordinator({"kmin": 0}, "x: [coordinator]")
    with pytest.raises(ScenarioError, match="unknown key"):
        parse_coordinator({"gc_every": 3}, "x: [coordinator]")
    scenario = replace(load_scenario(DATA / "revival.toml"), mode=Mode.NONE)
    with pytest.raises(ScenarioError, match=r"\[coordinator\] needs mode \"replication\".*got 'none'"):
        run(Prepared(scenario), 2)


def test_a_crashed_coordinator_is_replaced_by_the_next_server_which_adopts_what_runs():
    """The coordinator is the live server with the smallest name: seattle-0, a spare, crashes before
    its first garbage collection; seattle-10 takes over, rebuilds the deployment from the reports
    (adopts it rather than deploying again) and collects from there."""
    scenario = load_scenario(DATA / "revival.toml")
    scenario.servers = ("seattle-0", *scenario.servers)
    scenario.faults.append(Fault("crash", ("seattle-0",), 20 * S))
    prepared = Prepared(scenario)
    result = run(prepared, 2, keep_records=True)
    summary = result.summary["coordinator"]
    assert set(summary["coordinators"]) == {"seattle-10"}
    successor = summary["coordinators"]["seattle-10"]
    assert successor["core"]["adopted"] == 1 and successor["elections"] == 1 and successor["deployed"]
    gc = [(t, node) for t, kind, reason, _, node in summary["timeline"] if reason == "gc"]
    # Its first round: the crash, settle_s (seattle-0 never reports again), then gc_period_s.
    assert gc and all(node == "seattle-10" and t >= 20 + 10 + 30 for t, node in gc)
    assert equals_reference(prepared, result)


def test_the_example_scenario_and_cluster_file_load():
    from replicast.engine.cluster_config import load_cluster

    root = DATA.parents[2] / "examples"
    scenario = load_scenario(root / "sim-fig1-placement.toml")
    assert scenario.deployment == "min-cost" and scenario.coordinator.kmin == 2
    config = load_cluster(root / "cluster-fig1-placement.toml")
    assert config.min_cost and config.placement["cpu_n3"] == ["n3", "n4"] and config.coordinator.kmax == 2
