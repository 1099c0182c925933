"""``replicast place`` end to end on the shipped Seattle trace."""

import json

import pytest

from replicast.engine.cli import main

FAST = ["--frames", "100", "--rounds", "300"]


def place(tmp_path, *extra):
    out = tmp_path / "out"
    code = main(["place", "examples/fig1.toml", "--trace", "seattle", "--out", str(out), *FAST, *extra])
    return code, out


def test_min_cost_prints_saves_and_draws(tmp_path, capsys):
    code, out = place(tmp_path, "--servers", "30", "--kmax", "3")
    assert code == 0
    summary = json.loads((out / "deployment.json").read_text())
    assert summary["strategy"] == "min-cost" and summary["refined"] and len(summary["servers"]) == 30
    assert all(len(summary["placement"][op]) == 3 for op in ("load", "ping", "correlate", "hot"))
    assert len(summary["placement"]["alerts"]) == 1 == len(summary["baseline"]["placement"]["load"])
    assert summary["ratios"]["bandwidth"] > 1 and summary["ratios"]["cost"] > 1
    assert summary["cost"] == pytest.approx(sum(s["cost"] for s in summary["stream_replicas"]), rel=1e-3)
    assert (out / "deployment.png").stat().st_size > 10_000
    printed = capsys.readouterr().out
    assert "x kmax = 1" in printed and "correlate" in printed


def test_strategies_share_the_baseline_and_optimal_is_cheapest(tmp_path):
    costs = {}
    for strategy in ("min-cost", "random", "optimal"):
        code, out = place(tmp_path / strategy, "--servers", "10", "--kmax", "2", "--strategy", strategy, "--dmin-ms", "5")
        assert code == 0
        summary = json.loads((out / "deployment.json").read_text())
        costs[strategy] = summary["cost"]
        baseline = summary["baseline"]
    assert costs["optimal"] <= costs["min-cost"] <= costs["random"]
    assert baseline == json.loads((tmp_path / "min-cost" / "out" / "deployment.json").read_text())["baseline"]


def test_pins_are_checked(tmp_path, capsys):
    code, _ = place(tmp_path, "--servers", "5", "--pin", "alerts=nowhere")
    assert code == 2
    assert "server 'nowhere' is not among the 5 servers" in capsys.readouterr().err


def test_help(capsys):
    with pytest.raises(SystemExit) as done:
        main(["place", "--help"])
    assert done.value.code == 0
    assert "--strategy" in capsys.readouterr().out
