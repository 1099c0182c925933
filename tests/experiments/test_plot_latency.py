"""``replicast plot latency`` on real files: a tiny simulation (``replicast simulate``) and a tiny live
cluster (``replicast cluster up``) whose application writes FileSink JSON lines while two
``mosquitto_sub`` processes capture its MQTT output (``-F %J`` and ``-F '%U %t %p'``)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from pathlib import Path

import aiomqtt
import numpy as np
import pyarrow.parquet as pq
import pytest

from replicast.engine.cli import main
from replicast.experiments.latency import draw
from replicast.experiments.runs import load_runs
from replicast.operators.record import CLOSED
from tests.integration.helpers import cluster, free_ports, two_node_cluster, wait_for

DATA = Path(__file__).resolve().parents[1] / "simulator" / "data"
RECORDS = 24


@pytest.fixture(scope="module")
def simulated(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sim") / "chain"
    assert main(["simulate", str(DATA / "chain.toml"), "--kmax", "1", "--kmax", "2", "--duration-s", "60",
                 "--out", str(out), "--jobs", "1", "--no-progress"]) == 0
    return out


async def publish(broker_port: int, captures: list[Path]) -> list[dict]:
    async with aiomqtt.Client("127.0.0.1", broker_port, identifier="plot-pub") as pub:
        # Both captures are subscribed once each has seen a probe (a bare punctuation: no record).
        def subscribed():
            return all(c.exists() and c.read_text().strip() for c in captures)
        deadline = time.monotonic() + 20
        while not subscribed():
            assert time.monotonic() < deadline, "mosquitto_sub did not subscribe"
            await pub.publish("replicast/out/probe", json.dumps([{"punctuation": 0}]), qos=1)
            await asyncio.sleep(0.2)
        records = []
        for i in range(RECORDS):
            record = {"ts": time.time_ns() // 1000, "server": f"s{i}", "load": 0.9 if i % 4 else 0.1}
            records.append(record)
            await pub.publish("replicast/in/cpu", json.dumps(record), qos=1)
            await asyncio.sleep(0.02)
        await pub.publish("replicast/in/cpu", json.dumps({"punctuation": CLOSED}), qos=1)
    return records


@pytest.fixture(scope="module")
def live(tmp_path_factory) -> dict:
    if shutil.which("mosquitto_sub") is None:
        pytest.skip("mosquitto_sub is not installed (.ci/run installs mosquitto-clients)")
    directory = tmp_path_factory.mktemp("live")
    ports, broker_port = free_ports(4), free_ports(1)[0]
    path = two_node_cluster(directory, secret="plot-test-secret", ports=ports, broker_port=broker_port,
                            placement='cpu = ["a"]\nbusy = ["a"]\nalerts = ["b"]',
                            extra='[outputs.alerts]\nfile = "out/alerts.jsonl"\n')
    captures = {"%J": directory / "capture-J.jsonl", "%U %t %p": directory / "capture-U.txt"}
    with cluster(path, directory / "run"):
        subs = [subprocess.Popen(["mosquitto_sub", "-h", "127.0.0.1", "-p", str(broker_port), "-q", "1",
                                  "-t", "replicast/out/#", "-F", fmt], stdout=out.open("w"))
                for fmt, out in captures.items()]
        try:
            published = asyncio.run(publish(broker_port, list(captures.values())))
            expected = sum(r["load"] > 0.5 for r in published)
            out = directory / "out" / "alerts.jsonl"
            wait_for(lambda: out.exists() and len(out.read_text().splitlines()) == expected, 30, "the alerts")
            # the end of the stream (mosquitto_sub -F %J writes CLOSED as a double: look for the key)
            wait_for(lambda: all(any("replicast/out/alerts" in l and "punctuation" in l
                                     for l in c.read_text().splitlines()) for c in captures.values()),
                     30, "the captures to see the end of the stream")
        finally:
            for sub in subs:
                sub.terminate()
                sub.wait(10)
    return {"file": out, "captures": list(captures.values()), "published": published, "expected": expected}


def test_simulated_runs_are_read_with_their_summary_labels(simulated):
    runs = load_runs(simulated)
    summary = json.loads((simulated / "summary.json").read_text())
    assert [r.label for r in runs] == [f"chain kmax = {s['kmax']} ({s['bandwidth_ratio']:.2f}x, {s['cost_ratio']:.2f}x)"
                                       for s in summary["runs"]]
    for run, k in zip(runs, (1, 2)):
        table = pq.read_table(simulated / f"k{k}" / "deliveries.parquet")
        assert np.array_equal(run.latency_us, table.column("latency_us").to_numpy())
        assert len(run.latency_us) == summary["runs"][k - 1]["delivered"] > 0
    # one k<K>/ directory, or its deliveries.parquet, is the same run
    assert load_runs(simulated / "k2")[0].label == runs[1].label
    assert np.array_equal(load_runs(simulated / "k2" / "deliveries.parquet")[0].latency_us, runs[1].latency_us)


def test_live_outputs_give_latency_from_the_delivery_time(live):
    sink = load_runs(live["file"])[0]
    lines = [json.loads(l) for l in live["file"].read_text().splitlines()]
    assert sink.label == "alerts" and len(sink.latency_us) == live["expected"] > 0
    assert np.array_equal(sink.latency_us, [l["arrival"] - l["ts"] for l in lines])
    assert (sink.latency_us > 0).all() and (sink.latency_us < 5_000_000).all()
    by_ts = dict(zip((l["ts"] for l in lines), sink.arrival_us))
    for capture in live["captures"]:
        run = load_runs(capture)[0]
        assert len(run.latency_us) == live["expected"]
        ts = run.arrival_us - run.latency_us
        assert set(ts.tolist()) == set(by_ts)
        # the capture receives each record after the node delivered it (same clock, one MQTT hop)
        delay = run.arrival_us - np.array([by_ts[t] for t in ts.tolist()])
        assert (delay > -2_000).all() and (delay < 2_000_000).all(), delay


def test_the_curves_are_matplotlibs_ecdf_of_each_run(simulated, live):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runs = [*load_runs(simulated), *load_runs(live["file"]), *load_runs(live["captures"][0])]
    for kind in ("ccdf", "cdf"):
        fig, ax = plt.subplots()
        lines = draw(ax, runs, kind)
        for line, run in zip(lines, runs):
            n = len(run.latency_us)
            # Axes.ecdf: (sorted values + the last, 1 … 0) drawn steps-pre for the CCDF,
            # (the first + sorted values, 0 … 1) drawn steps-post for the CDF
            x = line.get_xdata()[:-1] if kind == "ccdf" else line.get_xdata()[1:]
            assert np.allclose(x, np.sort(run.latency_us) / 1e6)
            p = np.arange(1, n + 1) / n
            assert np.allclose(line.get_ydata()[1:], 1 - p if kind == "ccdf" else p)
            assert line.get_label() == run.label
        plt.close(fig)
    fig, ax = plt.subplots()
    points = draw(ax, runs, "over-time")
    assert [len(p.get_xdata()) for p in points] == [len(r.latency_us) for r in runs]
    plt.close(fig)


@pytest.mark.parametrize("kind", ["--ccdf", "--cdf", "--over-time"])
def test_the_command_overlays_a_simulation_and_a_live_cluster(simulated, live, tmp_path, capsys, kind):
    png = tmp_path / "latency.png"
    assert main(["plot", "latency", str(simulated), str(live["file"]), *map(str, live["captures"]), kind,
                 "--out", str(png), "--label", "sim k1"]) == 0
    out = capsys.readouterr().out
    assert png.stat().st_size > 10_000
    assert out.count(" records, latency p50 ") == 5 and out.startswith("sim k1: ") and "\nalerts: " in out


def test_bad_inputs_are_one_line_errors(tmp_path, capsys):
    replay_output = tmp_path / "replayed.jsonl"
    replay_output.write_text('{"app": "alerts", "ts": 1, "server": "a"}\n')
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text('{"ts": 1, "arrival": 5}\nnot json\n')
    (tmp_path / "empty").mkdir()
    for path, message in ((replay_output, "replayed.jsonl:1: a record without \"arrival\""),
                          (garbage, "garbage.jsonl:2: neither JSON nor"),
                          (tmp_path / "missing", "missing: no such file or directory"),
                          (tmp_path / "empty", "no deliveries.parquet, summary.json or *.jsonl here")):
        assert main(["plot", "latency", str(path), "--out", str(tmp_path / "x.png")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
