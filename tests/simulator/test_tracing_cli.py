"""``replicast simulate --trace-query``: trace queries answered over each simulated run, written next to
its outputs (simulator/trace_queries.py; docs/tracing.md)."""

import json
from pathlib import Path

import pyarrow.parquet as pq

from replicast.engine.cli import main

DATA = Path(__file__).parent / "data"
DELIVER = "From d In Deliver GroupBy d.app Select d.app, COUNT, MAX(d.latency_us) Sample 1/1"
SHARE = ('From a In Arrival Where a.outcome = "pass" GroupBy a.replica, a.port, a.upstream '
         "Select a.replica, a.port, a.upstream, COUNT, SHARE Sample 1/1")


def test_simulate_answers_trace_queries_per_run(tmp_path, capsys):
    out = tmp_path / "run"
    (tmp_path / "share.query").write_text(SHARE + "\n")
    # two kmax values: run in worker processes, so the queries travel to them
    code = main(["simulate", str(DATA / "chain.toml"), "--kmax", "1", "--kmax", "2", "--duration-s", "30",
                 "--out", str(out), "--no-progress", "--trace-query", DELIVER,
                 "--trace-query", str(tmp_path / "share.query")])
    assert code == 0, capsys.readouterr().err
    assert "trace-queries.json" in capsys.readouterr().out
    for k in (1, 2):
        summary = json.loads((out / f"k{k}" / "summary.json").read_text())
        answers = {a["id"]: a for a in json.loads((out / f"k{k}" / "trace-queries.json").read_text())}
        assert answers["q1"]["query"] == DELIVER and answers["q2"]["query"] == SHARE    # the file's text
        # every delivered record is one Deliver event at Sample 1/1, its latency the recorded one
        delivered = answers["q1"]["rows"]
        assert sum(row["COUNT"] for row in delivered) == summary["delivered"] > 0
        recorded = pq.read_table(out / f"k{k}" / "deliveries.parquet").to_pandas()
        assert {row["app"]: row["MAX(latency_us)"] for row in delivered} == \
            {app: int(v) for app, v in recorded.groupby("app").latency_us.max().items()}
        shares: dict = {}
        for row in answers["q2"]["rows"]:
            shares.setdefault((row["replica"], row["port"]), []).append(row["SHARE"])
        assert shares and all(abs(sum(v) - 1) < 1e-9 for v in shares.values())
        assert any(len(v) == 2 for v in shares.values()) == (k == 2)    # k = 2: two upstream replicas win


def test_a_bad_trace_query_is_one_line_before_any_run(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["simulate", str(DATA / "chain.toml"), "--kmax", "1", "--out", str(out), "--no-progress",
                 "--trace-query", "From a In Arrival Select a.colour"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "colour" in err[0]
    assert not (out / "k1").exists()
