"""``replicast dashboard --run``: a simulation's output and a cluster's output files, shown in
headless Chromium (docs/tracing.md)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from replicast.engine.cli import main
from replicast.experiments.ports import free_loopback_ports
from tests.integration.test_tracing_live import Page, chromium_dom

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests/simulator/data"


def shown(run: Path, tmp_path: Path) -> Page:
    port = free_loopback_ports(1)[0]
    server = subprocess.Popen([sys.executable, "-m", "replicast.engine.cli", "dashboard", "--run", str(run),
                               "--port", str(port)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "replicast dashboard: http://" in server.stdout.readline()
        return Page(chromium_dom(f"http://127.0.0.1:{port}/", 2000))
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(20)


def test_a_simulated_run_shows_its_latencies_paths_and_win_shares(tmp_path):
    out = tmp_path / "sim"
    assert main(["simulate", str(DATA / "chain.toml"), "--kmax", "2", "--duration-s", "120", "--out", str(out),
                 "--no-progress"]) == 0
    page = shown(out / "k2", tmp_path)
    assert page.ccdfs() and all(count > 0 for count in page.ccdfs().values())
    replicas = page.replicas()
    assert replicas and {a["data-state"] for a in replicas.values()} == {"recorded"}
    shares: dict = {}
    for tag, attrs in page.elements:
        if tag == "tr" and "data-share" in attrs:
            key = (attrs["data-replica"], attrs["data-port"])
            shares[key] = shares.get(key, 0.0) + float(attrs["data-share"])
    assert shares and all(total == pytest.approx(1.0) for total in shares.values())
    assert any(len([a for t, a in page.elements if t == "tr" and (a.get("data-replica"), a.get("data-port")) == key])
               == 2 for key in shares)                  # k = 2: both upstream replicas won some records


def test_output_files_of_a_cluster_show_each_applications_ccdf(tmp_path):
    base = 1_700_000_000_000_000
    lines = [{"app": "alerts", "ts": base + i, "server": "s", "arrival": base + i + 1000 * (i % 50 + 1)}
             for i in range(300)]
    (tmp_path / "alerts.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    page = shown(tmp_path, tmp_path)
    assert page.ccdfs() == {"alerts": 300}


def test_a_bad_output_file_is_one_line(tmp_path, capsys):
    (tmp_path / "alerts.jsonl").write_text('{"app": "alerts", "ts": 1}\n')
    assert main(["dashboard", "--run", str(tmp_path)]) == 2
    assert "alerts.jsonl:1: not an output line" in capsys.readouterr().err
