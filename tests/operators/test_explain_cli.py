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
    assert "seal per key server would also do" in text and "the engine seals per key built-in aggregates, and user operators that declare" in text
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


def test_without_matplotlib_the_text_still_comes_and_the_picture_is_one_warning(tmp_path, capsys, monkeypatch, caplog):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.partition(".")[0] == "matplotlib":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    monkeypatch.setattr("replicast.engine.extras.extras", lambda: {"plot": frozenset({"matplotlib"})})
    assert main(["explain", str(example_path("fig1.toml")), "--out", str(tmp_path)]) == 0
    assert "verdict: every application receives the same records" in capsys.readouterr().out
    assert not (tmp_path / "explain.png").exists()
    assert "no picture: needs matplotlib, which the 'plot' extra installs" in caplog.text


def test_the_trace_estimate_names_the_slowest_source_and_what_sealing_per_key_saves(tmp_path, capsys):
    pytest.importorskip("numpy")
    query = str(example_path("explain-user-operators.toml"))
    assert main(["explain", query, "--kmax", "2", "--no-plot", "--out", str(tmp_path), "--trace", "seattle",
                 "--servers", "8", "--frames", "50", "--rounds", "200"]) == 0
    text = capsys.readouterr().out
    assert "waiting on seattle (8 servers, min-cost deployment, kmax = 2" in text
    costs = json.loads((tmp_path / "explain.json").read_text())["costs"]
    waits = {w["name"]: w for w in costs["waits"]}
    assert set(waits) == {"rises", "latest", "peaks", "load_by_server", "peak_load"}   # not the join-free CR ones
    keyed = waits["load_by_server"]
    assert keyed["keyed_ms"] == {"cpu_east": 0.0, "cpu_west": 0.0}
    assert keyed["extra_ms"][keyed["slowest"]] == 0.0 and max(keyed["extra_ms"].values()) >= 0.0
    assert waits["peaks"]["keyed_ms"] is None                      # gate {window}: no key to seal on
