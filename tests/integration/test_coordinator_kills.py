"""The Done-when of replica management on real TCP (docs/placement.md, "A server that restarted"): the
live Fig. 1 cluster with the coordinator on (``placement = "min-cost"``, entry points pinned to two
servers each, as ``examples/cluster-fig1-placement.toml``), and each node in turn, after a GC round
has happened (checked in the coordinator's log), is killed with SIGKILL, restarted as docs/deploy.md
says, and — once the coordinator has restored what it ran there — killed with SIGKILL for good.
Every application must receive exactly ``replay``'s reference and close.

``app`` is the coordinator (the smallest name) and runs the three applications, pinned there with one
replica each: killing it loses applications with no live replica, beyond what any placement promises
(the hunt's rule: every operator keeps one live replica; docs/lifecycle.md, "No live peer").  Its
run therefore pins every application to ``app`` and ``n1`` (two sink replicas, as ``make_cluster_fig1.py
--sink-replicas 2``) and counts each published record once by its output id, as ``replicast consume``
does (docs/consume.md): the coordinator's crash, restart and crash for good are then tested like
every other node's.

One run per node (the two kills in one run), about two minutes each: the sweep is marked slow, and CI
runs three nodes of it (``VICTIMS``); ``REPLICAST_KILL_SWEEP=all`` runs every node.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import aiomqtt
import pytest

from replicast.engine.query_file import load_query
from replicast.operators.record import CLOSED
from tests.integration.helpers import (ROOT, assert_fig1_reference, close_streams_and_collect, cluster,
                                       collect_outputs, fig1_cluster_toml, free_ports, kill, make_cluster_module,
                                       mosquitto, publish_fig1_round)

PUNCTUATION_MS = 100
TICK_S = 0.1
#: The first GC round comes ``gc_period_s`` (30 s) after the coordinator deployed; a run gives up on it
#: (a failed precondition, not a pass) after this many seconds of publishing.
GC_WAIT_S = 90
RESTART_AFTER_S = 10
#: After the restart the coordinator restores what the node ran (its report trusted after ``settle_s`` =
#: 10 s); the kill for good comes ``REJOIN_S`` after the first restore decision (the replicas deployed
#: again join from their peers).  ``app`` restarts as the coordinator: nothing to restore there.
RESTORE_WAIT_S = 60
REJOIN_S = 20
TAIL_S = 15


def decisions(run_dir) -> list[dict]:
    """Every ``placement_decision`` the nodes logged, in file order."""
    out = []
    for path in sorted(run_dir.glob("*.log")):
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:       # a line still being written
                    continue
                if entry.get("event") == "placement_decision":
                    out.append(entry)
    return out


class Plan:
    """What the run does to ``victim``, step by step, driven by the clock and the coordinators' logs."""

    def __init__(self, run_dir, cluster_file, victim: str, processes: dict, for_good: bool):
        self.run_dir, self.cluster_file, self.victim, self.processes = run_dir, cluster_file, victim, processes
        self.for_good = for_good
        self.step = "wait-gc"
        self.since = time.monotonic()
        self.restarted: subprocess.Popen | None = None
        self.gc_before_kill = self.restores = self.gc_after_restart = 0
        self.gc_seen = 0
        self.restored_at: float | None = None

    def _count(self, reason: str) -> int:
        return sum(1 for d in decisions(self.run_dir) if d.get("reason") == reason)

    def tick(self) -> bool:
        """One step; True once the plan is over (the tail may start)."""
        now = time.monotonic()
        waited = now - self.since
        if self.step == "wait-gc":
            gc = self._count("gc")
            if gc:
                self.gc_before_kill = gc
                kill(self.processes[self.victim])
                self.step, self.since = "down", now
            elif waited > GC_WAIT_S:
                raise AssertionError(f"no GC round within {GC_WAIT_S} s: {decisions(self.run_dir)[-5:]}")
        elif self.step == "down" and waited >= RESTART_AFTER_S:
            self.gc_seen = self._count("gc")
            out = open(self.run_dir / f"{self.victim}-restarted.log", "w")   # docs/deploy.md: same command, same state
            self.restarted = subprocess.Popen([sys.executable, "-m", "replicast.engine.cli", "node", "--config",
                                               str(self.cluster_file), "--name", self.victim, "--log-json",
                                               "--state-dir", str(self.run_dir / "state")],
                                              cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
            self.step, self.since = "restarted", now
        elif self.step == "restarted":
            self.restores = self._count("restore")
            if self.restores and self.restored_at is None:
                self.restored_at = now
            if self.restored_at is not None and now - self.restored_at >= REJOIN_S or (
                    self.victim == "app" and waited >= REJOIN_S):
                self.gc_after_restart = self._count("gc") - self.gc_seen
                if not self.for_good:
                    return True
                self.restarted.kill()                               # SIGKILL, for good
                self.restarted.wait(10)
                self.step = "gone"
                return True
            if waited > RESTORE_WAIT_S:
                raise AssertionError(f"{self.victim} restarted {waited:.0f} s ago and no restore decision yet; "
                                     f"{decisions(self.run_dir)[-5:]}")
        return self.step == "gone"

    def stop(self) -> None:
        if self.restarted is not None and self.restarted.poll() is None:
            self.restarted.terminate()
            self.restarted.wait(10)


async def drive(broker_port: int, servers: list[str], plan: Plan, sink_replicas: int) -> tuple[dict, dict]:
    published = {f"{kind}_{s}": [] for s in servers for kind in ("cpu", "ping")}
    arrivals: dict[str, list] = {}
    closed: set[str] = set()
    seen: set[str] = set()

    def on_items(app: str, items: list[dict]) -> None:
        records = [i for i in items if "ts" in i]
        if sink_replicas > 1:          # each record once by its output id (docs/consume.md)
            records = [i for i in records if i["@id"] not in seen and not seen.add(i["@id"])]
        arrivals.setdefault(app, []).extend(records)
        closed.update(app for i in items if i.get("punctuation") == CLOSED)
    async with aiomqtt.Client("127.0.0.1", broker_port, identifier="test-sub") as sub, \
            aiomqtt.Client("127.0.0.1", broker_port, identifier="test-pub") as pub:
        await sub.subscribe("replicast/out/#", qos=1)
        collector = asyncio.create_task(collect_outputs(sub, on_items, applications=3))
        tick, tail = 0, None
        while tail is None or tick < tail:
            if tail is None and tick % 10 == 0 and plan.tick():
                tail = tick + round(TAIL_S / TICK_S)
            await publish_fig1_round(pub, servers, tick, published)
            await asyncio.sleep(TICK_S)
            tick += 1
        await close_streams_and_collect(pub, published, collector, closed, arrivals)
    return published, arrivals


def two_sinks(text: str, applications, out_dir) -> str:
    """The cluster file with every application pinned to ``app`` and ``n1``, one output file per node."""
    for app in applications:
        pin, pins = f'{app} = "app"', f'{app} = ["app", "n1"]'
        out, outs = f'file = "{out_dir}/{app}.jsonl"', f'file = "{out_dir}/{app}-{{node}}.jsonl"'
        assert pin in text and out in text, app
        text = text.replace(pin, pins).replace(out, outs)
    return text


#: Every node of the cluster file; CI kills three of them (the coordinator with the sinks, and two of the
#: six source servers, which also host operators) to keep the suite near 15 minutes on two cores; the whole sweep is
#: ``REPLICAST_KILL_SWEEP=all python3 -m pytest tests/integration/test_coordinator_kills.py``.
ALL_VICTIMS = ["app", "n1", "n2", "n3", "n4", "n5", "n6"]
VICTIMS = ALL_VICTIMS if os.environ.get("REPLICAST_KILL_SWEEP") == "all" else ["app", "n1", "n4"]


@pytest.mark.slow
@pytest.mark.parametrize("victim", VICTIMS)
def test_each_node_killed_and_restarted_then_killed_for_good_with_the_coordinator(tmp_path, victim):
    make = make_cluster_module()
    query = load_query(ROOT / "examples/cluster-fig1-query.toml")
    with mosquitto(tmp_path) as broker_port:
        ports = free_ports(14)
        cluster_file = tmp_path / "cluster.toml"
        text = fig1_cluster_toml(tmp_path, broker_port, ports, punctuation_ms=PUNCTUATION_MS, min_cost=True)
        sink_replicas = 2 if victim == "app" else 1
        if sink_replicas > 1:
            text = two_sinks(text, make.APPLICATIONS, tmp_path / "out")
        cluster_file.write_text(text)
        run_dir = tmp_path / "run"
        with cluster(cluster_file, run_dir) as processes:
            plan = Plan(run_dir, cluster_file, victim, processes, for_good=True)
            try:
                published, arrivals = asyncio.run(drive(broker_port, make.SERVERS, plan, sink_replicas))
            finally:
                plan.stop()
    print(f"{victim}: GC decisions before the kill {plan.gc_before_kill}, restore decisions {plan.restores}, "
          f"GC decisions after the restart {plan.gc_after_restart}, killed for good: {plan.step == 'gone'}; "
          f"records { {a: len(r) for a, r in arrivals.items()} }")
    assert plan.gc_before_kill > 0
    assert_fig1_reference(query, published, arrivals, PUNCTUATION_MS)
