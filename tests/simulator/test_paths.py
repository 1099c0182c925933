"""The ``path`` column of deliveries.parquet: the replicas each record came through on the way that
delivered it first (engine.messages rule 5), checked against the plan, the trace and the faults."""

from pathlib import Path

import pytest

from replicast.simulator.run import Prepared, run
from replicast.simulator.scenario import Fault, load_scenario

DATA = Path(__file__).parent / "data"


def hops(path: str) -> list[tuple[str, int, str]]:
    """``name#i@node > …`` → ``[(name, i, node), …]``."""
    out = []
    for hop in path.split(" > "):
        replica, _, node = hop.partition("@")
        name, _, index = replica.partition("#")
        out.append((name, int(index), node))
    return out


@pytest.mark.parametrize("outage", ["hold", "drop"])
def test_paths_follow_the_plan_and_replay_through_the_trace(outage):
    """Chain query (records reach the application unchanged), no processing cost: every path runs
    entry point → load → busy → watch over replicas where the placement put them, and sending the
    record along its path through the trace's delays gives exactly its arrival (FIFO aside).  With
    dropped connections (the application's server cut off for a minute), what reaches it afterwards
    is replayed from the output logs, and those batches keep their paths: later, never faster."""
    scenario = load_scenario(DATA / "chain.toml")
    scenario.processing_us = {}
    scenario.outage = outage
    if outage == "drop":
        scenario.faults = [Fault("cut", ("seattle-6", other), 100_000_000, 160_000_000)
                           for other in scenario.servers if other != "seattle-6"]
    prepared = Prepared(scenario)
    result = run(prepared, 3, keep_records=True)
    table = result.recorder.deliveries()
    trace, servers, origin = prepared.trace, prepared.servers, prepared.origin
    home = {s.stream: s.server for s in prepared.sources}
    records = result.recorder.outputs["watch"]
    exact = late = 0
    for record, arrival, path in zip(records, table.column("arrival").to_pylist(), table.column("path").to_pylist()):
        chain = hops(path)
        stream = f"cpu_{list(servers).index(record[1])}"
        assert [name for name, _, _ in chain] == [stream, "load", "busy", "watch"]
        assert all(result.placement[name][index] == node for name, index, node in chain)
        t, at = record[0], home[stream]                  # published at ts from the source's server
        for _, _, node in chain:
            delay = 0 if node == at else trace.one_way_us(servers[at], servers[node], t - origin)
            if delay is None:
                break                                    # an outage held it: not replayable hop by hop
            t, at = t + delay, node
        else:
            assert arrival >= t                          # never faster than its own path allows
            exact += arrival == t
            late += arrival > t
    if outage == "hold":
        assert exact > 1000 and late <= 0.01 * (exact + late)
    else:                                                # a minute's records waited for the redial
        assert exact > 1000 and late >= 50


def test_no_record_made_after_a_crash_goes_through_the_crashed_replica():
    scenario = load_scenario(DATA / "fig1-faults.toml")
    prepared = Prepared(scenario)
    result = run(prepared, 3)
    table = result.recorder.deliveries()
    crash = prepared.start + 20_000_000                  # crash = "correlate#0", at_s = 20
    crashed = f"correlate#0@{result.placement['correlate'][0]}"
    through = [crashed in path.split(" > ") for path in table.column("path").to_pylist()]
    made = table.column("ts").to_pylist()
    assert any(hit for hit, ts in zip(through, made) if ts < crash)      # it did carry records before
    assert not any(hit for hit, ts in zip(through, made) if ts > crash)
