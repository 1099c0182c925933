"""``replicast trace ...`` as a user runs it (through engine.cli.main, the console script)."""

import pytest

from replicast.engine.cli import main
from replicast.traces.store import TraceStore

pytestmark = [
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
    pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
]


@pytest.mark.parametrize("command", ["list", "build", "ingest", "summary", "synth", "compare", "resample", "geo", "plot"])
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["trace", command, "--help"])
    assert exit_info.value.code == 0 and "usage: replicast trace " + command in capsys.readouterr().out


def test_list_shows_seattle(capsys):
    assert main(["trace", "list"]) == 0
    out = capsys.readouterr().out
    assert "seattle" in out and "688" in out and "10s (assumed)" in out


def test_synth_writes_a_replayable_trace_and_plot_draws_it(tmp_path, capsys):
    out = tmp_path / "syn"
    assert main(["-q", "trace", "synth", "--nodes", "6", "--duration", "2min", "--interval", "10s",
                 "--seed", "3", "--out", str(out)]) == 0
    store = TraceStore.open(out)
    assert (store.n_nodes, store.n_frames) == (6, 12) and store.meta.source.endswith("--seed 3")
    assert store.latency_ms(0, 1, 0) is None or store.latency_ms(0, 1, 0) > 0
    capsys.readouterr()
    assert main(["-q", "trace", "compare", str(out), str(out)]) == 0
    assert capsys.readouterr().out.count("+0.0%") == 5  # a trace against itself
    png = tmp_path / "p.png"
    assert main(["-q", "trace", "plot", str(out), "--out", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_user_errors_are_one_line_and_exit_2(tmp_path, capsys):
    assert main(["trace", "plot", "no-such-trace"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("replicast trace: error: 'no-such-trace' is neither a known trace") and "\n" not in err
    assert main(["trace", "synth", "--nodes", "5", "--duration", "ten", "--out", str(tmp_path / "x")]) == 2
    assert "duration 'ten'" in capsys.readouterr().err


@pytest.mark.spark
def test_csv_ingests_with_one_command_and_summarises(spark, tmp_path, capsys):
    csv = tmp_path / "theirs.csv"
    csv.write_text("src,dst,rtt_ms\n" + "".join(f"h{a},h{b},{10 + a + b + k}\n"
                                               for k in range(4) for a in range(3) for b in range(3) if a != b))
    out = tmp_path / "theirs"
    assert main(["-q", "trace", "ingest", str(csv), "--out", str(out), "--interval", "1s"]) == 0
    store = TraceStore.open(out)
    assert store.nodes == ["h0", "h1", "h2"] and store.n_frames == 4 and store.latency_ms(2, 1, 3_000_000) == 16.0
    capsys.readouterr()
    assert main(["-q", "trace", "summary", str(out), "--out", str(tmp_path / "sum")]) == 0
    printed = capsys.readouterr().out
    assert "3 nodes, 4 frames" in printed and "outage_rate" in printed
    assert (tmp_path / "sum" / "pairs.csv").read_text().count("\n") == 7  # header + 6 pairs
    bad = tmp_path / "bad.csv"
    bad.write_text("src,dst,rtt_ms\na,b,1\na,b,-1\n")
    assert main(["-q", "trace", "ingest", str(bad), "--out", str(tmp_path / "b")]) == 2
    assert f"{bad}:3: rtt_ms -1 is negative" in capsys.readouterr().err
    latin = tmp_path / "latin1.csv"                    # once a traceback (UnicodeDecodeError), before
    latin.write_bytes(b"src,dst,rtt_ms\na,b,1\nz\xfcrich,b,2\n")
    assert main(["-q", "trace", "ingest", str(latin), "--out", str(tmp_path / "c")]) == 2
    assert f"{latin}:3: byte b'\\xfc' at column 2 is not UTF-8; expected UTF-8 text" in capsys.readouterr().err
