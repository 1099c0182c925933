"""docs/lifecycle.md in the simulator: restart faults for every operator kind, then the peers die for good;
replicas added and removed mid-stream.  The restarted (or added) replicas join through the same node
core as on TCP (snapshots, epochs, stream heads) and every application receives exactly the
reference (§III replication transparency)."""

from collections import Counter
from pathlib import Path

import pytest

from replicast.engine.replay import replay
from replicast.simulator.run import Prepared, run
from replicast.simulator.scenario import Fault, load_scenario

DATA = Path(__file__).parent / "data"
S = 1_000_000


def run_with(faults: list[Fault]):
    scenario = load_scenario(DATA / "fig1-faults.toml")
    scenario.faults = faults
    prepared = Prepared(scenario)
    result = run(prepared, 3, keep_records=True)
    assert result.summary["completed"]
    reference = replay(prepared.query, result.inputs, replicas=1, punctuation_us=round(scenario.punctuation_ms * 1000))
    for app, records in reference.outputs.items():
        got = Counter(result.recorder.outputs[app])
        assert got == Counter(records), (f"{app}: wrong {list(got - Counter(records))[:3]}, "
                                         f"missing {list(Counter(records) - got)[:3]}")
    return result


@pytest.mark.parametrize("operator", ["load", "correlate", "hot", "rtt_by_dst", "load_trend"])
def test_a_restarted_replica_of_each_kind_outlives_its_peers(operator):
    """Union, Join, Filter, time-window and count-window aggregates: crash the server of replica 0,
    restart it, then crash the servers of replicas 1 and 2 for good."""
    result = run_with([Fault("crash", (f"{operator}#0",), 4 * S), Fault("restart", (f"{operator}#0",), 7 * S),
                       Fault("crash", (f"{operator}#1",), 30 * S), Fault("crash", (f"{operator}#2",), 30 * S)])
    assert result.summary["lifecycle"]["snapshots_taken"] >= 1


def test_replicas_added_and_removed_mid_stream():
    """A replica of the Join added on a server that hosted nothing, the originals removed or crashed:
    the added one carries the operator alone."""
    result = run_with([Fault("add", ("correlate", "seattle-7"), 10 * S), Fault("remove", ("correlate#0",), 20 * S),
                       Fault("remove", ("correlate#1",), 25 * S), Fault("crash", ("correlate#2",), 30 * S)])
    assert result.summary["lifecycle"]["snapshots_taken"] >= 1 and not result.summary["lifecycle"]["rebuilt_without_peer"]
    assert result.summary["placement"]["correlate"] == [None, None, "seattle-3", "seattle-7"]
