"""``replicast explain`` as a user runs it (engine/explain_cli.py; docs/explain.md)."""

import json

import pytest

from replicast.engine.cli import main
from replicast.examples import example_path


def test_fig1_prints_every_operator_label_and_coordination_and_draws_them(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert main(["explain", str(example_path("fig1.toml")), "--kmax", "2", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    for line in ("load_trend   operator    k=2  OW_{server}", "sort at punctuation",
                 "correlate    operator    k=2  OW_{dst,server,window}", "seal at punctuation",
                 "cpu_a -> load[0]: Seal_ts, Rep", "load_trend: Seal_ts  OW_{server}  (p, sorted at punctuation",
                 "verdict: every application receives the same records"):
        assert line in text
    assert (tmp_path / "explain.png").stat().st_size > 10_000
    report = json.loads((tmp_path / "explain.json").read_text())
    assert report["agrees"] and report["nodes"]["rtt_by_dst"]["annotation"] == "OW_{dst,window}"


def test_a_non_deterministic_user_operator_is_flagged_with_its_remedy_and_verify_confirms_it(tmp_path, capsys):
    query = str(example_path("explain-user-operators.toml"))
    assert main(["explain", query, "--kmax", "2", "--no-plot", "--out", str(tmp_path), "--verify", "5"]) == 0
    text = capsys.readouterr().out
    assert "latest lets replicas disagree (Inst): the interleaving of its 2 inputs is arrival order" in text
    assert "remedy: one order across all inputs: engine mode \"deterministic\"" in text
    assert "seal per key server would also do" in text and "not yet implemented by the engine" in text
    assert "-> CONFIRMED" in text
    assert "lookups Inst" in text


def test_a_query_it_cannot_analyse_is_one_line_naming_the_operator(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('[[streams]]\nname = "cpu"\nfields = { server = "str", load = "float" }\n\n'
                   '[[operators]]\nname = "odd"\nkind = "python"\ninput = "cpu"\n'
                   'class = "replicast.examples.user_operators:Rises"\nfields = { server = "str", load = "float" }\n'
                   'label = "OW"\ngate = ["site"]\n\n[[applications]]\nname = "out"\ninput = "odd"\n')
    assert main(["explain", str(bad), "--no-plot", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("replicast explain: error: ") and "operator 'odd' (gate)" in err and "'site'" in err
    assert "\n" not in err
