"""``replicast simulate`` as a user runs it."""

import json
from pathlib import Path

import pyarrow.parquet as pq

from replicast.engine.cli import main

DATA = Path(__file__).parent / "data"


def test_simulate_writes_outputs_and_checks_reference(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["simulate", str(DATA / "chain.toml"), "--kmax", "1", "--kmax", "2", "--duration-s", "120",
                 "--out", str(out), "--check", "--no-progress"])
    assert code == 0
    text = capsys.readouterr().out
    assert "kmax=2: OK" in text
    summary = json.loads((out / "summary.json").read_text())
    runs = {r["kmax"]: r for r in summary["runs"]}
    assert runs[2]["bandwidth_ratio"] > 1 and runs[2]["cost_ratio"] > 1
    deliveries = pq.read_table(out / "k2" / "deliveries.parquet")
    assert deliveries.num_rows == runs[2]["delivered"] > 0
    assert set(deliveries.column_names) == {"app", "ts", "arrival", "latency_us", "path"}
    assert (out / "latency.png").stat().st_size > 10_000
    bandwidth = pq.read_table(out / "k2" / "bandwidth.parquet").to_pandas()
    assert bandwidth[bandwidth.stream != "control"].records.sum() == runs[2]["records_sent"]


def test_simulate_user_errors_exit_2(tmp_path, capsys):
    assert main(["simulate", str(tmp_path / "missing.toml")]) == 2
    assert "cannot read scenario" in capsys.readouterr().err
    assert main(["simulate", str(DATA / "chain.toml"), "--kmax", "9", "--out", str(tmp_path)]) == 2
    assert "kmax = 9 needs at least 9 servers" in capsys.readouterr().err


def test_simulate_with_a_coordinator_writes_cost_over_time_next_to_the_static_run(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["simulate", str(DATA / "revival.toml"), "--out", str(out), "--check", "--no-progress"])
    assert code == 0
    text = capsys.readouterr().out
    assert "kmax=2: OK" in text and "coordinator: 2 gc disconnect" in text
    (run,) = json.loads((out / "summary.json").read_text())["runs"]
    static = run["static"]
    assert run["coordinator"]["decisions"] == {"gc:disconnect": 2}
    assert run["network_cost"] < static["network_cost"] and run["delivered"] == static["delivered"]
    assert len(run["cost_over_time"]) == len(static["cost_over_time"]) >= 15
    assert pq.read_table(out / "k2" / "static" / "deliveries.parquet").num_rows == static["delivered"]
    assert (out / "cost.png").stat().st_size > 10_000
    assert main(["simulate", str(DATA / "revival.toml"), "--segments", "2", "--out", str(tmp_path / "s")]) == 2
    assert "[coordinator] runs whole" in capsys.readouterr().err
