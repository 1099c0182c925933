"""Issue 10 acceptance on real processes: the Fig. 1 cluster (6 servers, k = 2, applications on
'app'); n3 is SIGKILLed, started again with ``replicast node``, and once it reports ready (every
replica live: joined from its peers' snapshots) its peer n6 is SIGKILLed for good.  n3's Join,
count-window aggregate and entry points are then the only replicas of their operators — every
application must still receive exactly `replay`'s reference of what was published."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import aiomqtt

from replicast.engine.query_file import load_query
from replicast.operators.record import CLOSED
from tests.integration.helpers import (ROOT, assert_fig1_reference, cluster, collect_outputs, fig1_cluster_toml,
                                       free_ports, kill, make_cluster_module, metric, mosquitto,
                                       publish_fig1_round)

PUNCTUATION_MS = 100
TICK_S = 0.1
KILL_AT, RESTART_AT, LAST_TICK = 12, 20, 90
RESTARTED, PEER = "n3", "n6"        # n3 hosts correlate#0 (a Join) and load_trend#1 (count windows); n6 their peers
# Restarted with the state directory `cluster up` gave it, the node knows it rejoins a running cluster.


async def drive(broker_port: int, servers: list[str], actions) -> tuple[dict, dict, dict]:
    """Publish rounds of cpu/ping records + punctuations until ``actions`` says stop; collect outputs."""
    published = {f"{kind}_{s}": [] for s in servers for kind in ("cpu", "ping")}
    arrivals: dict[str, list] = {}
    log: dict = {}
    async with aiomqtt.Client("127.0.0.1", broker_port, identifier="test-sub") as sub, \
            aiomqtt.Client("127.0.0.1", broker_port, identifier="test-pub") as pub:
        await sub.subscribe("replicast/out/#", qos=1)

        collector = asyncio.create_task(collect_outputs(
            sub, lambda app, items: arrivals.setdefault(app, []).extend(i for i in items if "ts" in i), applications=3))
        tick = 0
        while actions(tick, log):
            await publish_fig1_round(pub, servers, tick, published)
            await asyncio.sleep(TICK_S)
            tick += 1
        for stream in published:
            await pub.publish(f"replicast/in/{stream}", json.dumps({"punctuation": CLOSED}), qos=1)
        await asyncio.wait_for(collector, 90)
    return published, arrivals, log


def test_restart_then_kill_the_peer_for_good(tmp_path):
    make = make_cluster_module()
    query = load_query(ROOT / "examples/cluster-fig1-query.toml")
    assert "correlate" in make.placement() and make.placement()["correlate"] == [RESTARTED, PEER]
    with mosquitto(tmp_path) as broker_port:
        ports = free_ports(14)
        metrics_port = dict(zip(["app", *make.SERVERS], ports[7:]))
        cluster_file = tmp_path / "cluster.toml"
        cluster_file.write_text(fig1_cluster_toml(tmp_path, broker_port, ports, punctuation_ms=PUNCTUATION_MS))
        restarted = None
        with cluster(cluster_file, tmp_path / "run") as processes:
            def actions(tick: int, log: dict) -> bool:
                nonlocal restarted
                if tick == KILL_AT:
                    kill(processes[RESTARTED])
                elif tick == RESTART_AT:
                    out = open(tmp_path / "restarted.log", "w")
                    restarted = subprocess.Popen([sys.executable, "-m", "replicast.engine.cli", "node", "--config",
                                                  str(cluster_file), "--name", RESTARTED, "--log-json",
                                                  "--state-dir", str(tmp_path / "run" / "state")],
                                                 cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
                elif tick > RESTART_AT and "peer_killed" not in log:
                    try:
                        ready = metric(metrics_port[RESTARTED], "replicast_ready") == 1
                    except OSError:
                        ready = False
                    if ready:
                        log["ready_after_s"] = (tick - RESTART_AT) * TICK_S
                        kill(processes[PEER])
                        log["peer_killed"] = tick
                    elif tick >= LAST_TICK:
                        raise AssertionError(f"{RESTARTED} never became ready: "
                                             + (tmp_path / "restarted.log").read_text()[-3000:])
                return "peer_killed" not in log or tick < log["peer_killed"] + 25
            try:
                published, arrivals, log = asyncio.run(drive(broker_port, make.SERVERS, actions))
                lines = [json.loads(line) for line in (tmp_path / "restarted.log").read_text().splitlines()
                         if line.startswith("{")]
                states = {line["replica"]: line["state"] for line in lines if line.get("event") == "replica_state"}
                how = {line["replica"]: line["message"] for line in lines if line.get("event") == "replica_state"}
                dead_letters = [line["message"] for line in lines if line.get("event") == "dead_letter"]
            finally:
                if restarted is not None:
                    restarted.terminate()
                    restarted.wait(10)
    print(f"{RESTARTED} ready {log['ready_after_s']:.1f} s after its start; states {states}")
    assert states["correlate#0"] == "live" and states["load_trend#1"] == "live"
    assert "snapshot" in how["correlate#0"] and "snapshot" in how["load_trend#1"], how
    assert dead_letters == [], dead_letters         # what its donors took before it joined is not "late"
    assert_fig1_reference(query, published, arrivals, PUNCTUATION_MS)
