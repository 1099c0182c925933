"""``replicast experiment table1``: the recorded node replays exactly, and the table has sane rows."""

from __future__ import annotations

import csv

import pytest

from replicast.engine.cli import main
from replicast.experiments import paper
from replicast.experiments.cpu_cost import OPERATORS, record_inputs, replay
from replicast.experiments.table1 import COLUMNS

#: Records each operator emits per input tuple of one input (1 ms steps): Union merges two inputs.
OUT_PER_STEP = {"union": 2, "filter": 1, "aggregate": 1, "join": 1}


@pytest.mark.parametrize("operator", sorted(OPERATORS))
def test_replay_is_the_recorded_node(operator):
    """The replayed core receives and emits exactly what the recorded one did, and the workload is
    the paper's: every input copy arrives from each of the k upstream replicas, one output per ms."""
    degree, seconds = 2, 0.3
    recording = record_inputs(operator, degree, seconds)
    replayed = replay(recording, warmup_us=-1)
    copies, out = replayed.copies_in, replayed.records_out
    assert (copies, out) == recording.counts
    steps = round(seconds * 1000)
    inputs = OPERATORS[operator][0]
    assert copies == degree * inputs * steps
    # An aggregate's last windows close with later punctuations; everything else is out at once.
    assert steps * OUT_PER_STEP[operator] - 10 <= out <= steps * OUT_PER_STEP[operator]
    assert recording.delivered == out          # the pass-through Filter and the application got it all
    assert replayed.batch_targets == {f"d{i}" for i in range(degree)}     # k downstream replicas
    assert replayed.cpu_ns > 0


def test_table1_csv(tmp_path):
    out = tmp_path / "exp"
    assert main(["experiment", "table1", "--seconds", "0.8", "--repeats", "1", "--operator", "join", "--operator",
                 "filter", "--out", str(out), "--no-progress"]) == 0
    with (out / "table1.csv").open() as file:
        rows = list(csv.DictReader(file))
    assert tuple(rows[0]) == COLUMNS
    assert [(r["operator"], int(r["degree"])) for r in rows] == [(op, k) for op in ("join", "filter") for k in (1, 2, 3, 4)]
    for r in rows:
        op, k = r["operator"], int(r["degree"])
        assert float(r["cpu_percent"]) > 0
        assert int(r["input_copies_per_s"]) == 1000 * k * OPERATORS[op][0]
        assert int(r["records_out_per_s"]) == 1000
        assert float(r["paper_cpu_percent"]) == paper.TABLE_I_CPU_PERCENT[op][k]
        assert float(r["paper_ratio_to_none"]) == paper.TABLE_I_RATIO_TO_NONE[op][k - 1]
    for op in ("join", "filter"):
        ratios = [float(r["ratio_to_degree1"]) for r in rows if r["operator"] == op]
        assert ratios[0] == 1.0
        assert ratios[3] > 1.2        # four copies of every input and four outputs cost more than one
    assert (out / "table1.png").stat().st_size > 10_000
