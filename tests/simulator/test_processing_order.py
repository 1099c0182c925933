"""A node takes each link's items in order even when their CPU costs differ (simulator/driver.py).

With the CPU modelled (``[processing_us]``, on by default), a batch that arrives while the node is
busy waits for it.  A batch of no work arriving the moment the CPU frees must still go behind the
batches already waiting: run at once, it overtook one it follows on its link, the receiver saw a
Batch skipping offsets (a protocol error), dropped the connection, and a replica's stream was lost
until the redial.  Seals per key at kmax 3 on the Seattle trace met that tie (a relay's aggregate
replica sending a punctuation and then an output to the application, 470 s into the trace), and the
windows it closed waited ~95 ms for the direct path (benchmarks/key_sealing.py, "held")."""

from collections import Counter

from replicast.engine.replay import replay
from replicast.examples.make_keyed_seal import PRODUCERS_10, query_text, scenario_text
from replicast.simulator.run import Prepared, run
from replicast.simulator.scenario import load_scenario


def test_no_batch_overtakes_one_waiting_for_the_cpu(tmp_path):
    (tmp_path / "q.toml").write_text(query_text(10, sealed=True))
    (tmp_path / "sim.toml").write_text(scenario_text("q.toml", PRODUCERS_10, 20, seed=1, start_s=470, kmax=3))
    prepared = Prepared(load_scenario(tmp_path / "sim.toml"))
    result = run(prepared, 3, keep_records=True)
    lifecycle = result.summary["lifecycle"]
    assert lifecycle["protocol_errors"] == 0 and lifecycle["streams_cut"] == 0, lifecycle
    reference = replay(prepared.query, result.inputs, replicas=1).outputs["per_server"]
    assert Counter(result.recorder.outputs["per_server"]) == Counter(reference)
