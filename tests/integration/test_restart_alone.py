"""One node of the Fig. 1 cluster killed with SIGKILL and started again as docs/deploy.md says, nothing
else — with the placement of the cluster file, and with ``[coordinator]`` (``placement = "min-cost"``:
the coordinator deployed the operators, so the restarted node's own configuration does not have
them).  Every application must receive exactly ``replay``'s reference and close.

With the coordinator this lost 12,450 of 19,123 alerts and ``alerts`` never closed: the restarted
node did not answer its receivers' ``Resume`` for the replicas it no longer hosted, and they followed
them for ever (docs/lifecycle.md, "Inputs that vanish").  Then, with that fixed, ``alerts`` got 1,016
records and nothing closed: the coordinator dropped what the restarted server no longer ran from its
view but sent nothing, so its entry points' routes were never connected again.  The coordinator now
deploys and connects again what a live server's report lacks (docs/placement.md, "A server that
restarted").  Then, with one entry replica per stream, windows over the restarted server's downtime
were declared lost (its entry points knew their streams only from their first punctuation); the
entry points are now pinned to two servers each, and the restarted ones join from their live peer."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import aiomqtt
import pytest

from replicast.engine.query_file import load_query
from replicast.operators.record import CLOSED
from tests.integration.helpers import (ROOT, assert_fig1_reference, close_streams_and_collect, cluster,
                                       collect_outputs, fig1_cluster_toml, free_ports, kill, make_cluster_module,
                                       mosquitto, publish_fig1_round)

PUNCTUATION_MS = 100
TICK_S = 0.1
KILL_AT, RESTART_AT, LAST_TICK = 15, 25, 90


def deployed(run_dir) -> dict[str, str]:
    """replica -> node, from the coordinator's placement decisions in the nodes' logs."""
    out = {}
    for path in sorted(run_dir.glob("*.log")):
        for line in path.read_text().splitlines():
            if line.startswith("{"):
                entry = json.loads(line)
                if entry.get("event") == "placement_decision" and entry.get("decision") == "deploy":
                    out[entry["target"]] = entry["nodes"][0]
    return out


async def drive(broker_port: int, servers: list[str], actions) -> tuple[dict, dict]:
    published = {f"{kind}_{s}": [] for s in servers for kind in ("cpu", "ping")}
    arrivals: dict[str, list] = {}
    closed: set[str] = set()

    def on_items(app: str, items: list[dict]) -> None:
        arrivals.setdefault(app, []).extend(i for i in items if "ts" in i)
        closed.update(app for i in items if i.get("punctuation") == CLOSED)
    async with aiomqtt.Client("127.0.0.1", broker_port, identifier="test-sub") as sub, \
            aiomqtt.Client("127.0.0.1", broker_port, identifier="test-pub") as pub:
        await sub.subscribe("replicast/out/#", qos=1)
        collector = asyncio.create_task(collect_outputs(sub, on_items, applications=3))
        for tick in range(LAST_TICK):
            actions(tick)
            await publish_fig1_round(pub, servers, tick, published)
            await asyncio.sleep(TICK_S)
        await close_streams_and_collect(pub, published, collector, closed, arrivals)
    return published, arrivals


@pytest.mark.parametrize("coordinator", [False, True], ids=["placement", "coordinator"])
def test_one_node_killed_and_restarted_nothing_else(tmp_path, coordinator):
    """With the coordinator the entry points are pinned to two servers each (examples/
    cluster-fig1-placement.toml), as the cluster file without it places them: the sources never
    stop, the live peer carries the victim's streams, and its restarted entry points join from it."""
    make = make_cluster_module()
    query = load_query(ROOT / "examples/cluster-fig1-query.toml")
    with mosquitto(tmp_path) as broker_port:
        ports = free_ports(14)
        cluster_file = tmp_path / "cluster.toml"
        cluster_file.write_text(fig1_cluster_toml(tmp_path, broker_port, ports, punctuation_ms=PUNCTUATION_MS,
                                                  min_cost=coordinator))
        run_dir = tmp_path / "run"
        restarted = None
        with cluster(cluster_file, run_dir) as processes:
            if coordinator:
                where = deployed(run_dir)
                # a server hosting a Join replica (the applications' node is not replicated)
                victim = next((where[r] for r in ("correlate#0", "correlate#1") if where.get(r, "app") != "app"), None)
                assert victim is not None, where
            else:
                victim = make.placement()["correlate"][0]

            def actions(tick: int) -> None:
                nonlocal restarted
                if tick == KILL_AT:
                    kill(processes[victim])
                elif tick == RESTART_AT:           # docs/deploy.md: the same command, the same state directory
                    out = open(tmp_path / "restarted.log", "w")
                    restarted = subprocess.Popen([sys.executable, "-m", "replicast.engine.cli", "node", "--config",
                                                  str(cluster_file), "--name", victim, "--log-json",
                                                  "--state-dir", str(run_dir / "state")],
                                                 cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
            try:
                published, arrivals = asyncio.run(drive(broker_port, make.SERVERS, actions))
            finally:
                if restarted is not None:
                    restarted.terminate()
                    restarted.wait(10)
    assert_fig1_reference(query, published, arrivals, PUNCTUATION_MS)
