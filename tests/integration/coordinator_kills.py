"""Kill -9 of each node in turn on the live Fig. 1 cluster with the coordinator on, compared with the replay.

The cluster of ``examples/cluster-fig1-placement.toml`` (``placement = "min-cost"``, kmax = kmin = 2,
GC every 30 s, entry points pinned to two servers each), on loopback with a private mosquitto and
the test publishing the sources.  After the first GC round (seen in the coordinators' logs) one node,
the *victim*, is killed with SIGKILL, and then, by :class:`Mode`:

* ``for-good``: it stays down; the run goes on for :data:`FOR_GOOD_RUN_S` (another GC round, taken
  without it) before the tail;
* ``restart``: it restarts after :data:`RESTART_AFTER_S` as docs/deploy.md says (same command, same
  state directory) and runs on, :data:`REJOIN_S` after the coordinator restored what it ran there;
* ``restart-then-for-good``: as ``restart``, then SIGKILLed again, for good (the CI test's run).

Then every stream is closed, and each application's output is compared with ``replay``'s one-copy
reference of what was published: exact, or how many records are missing, duplicated or wrong, and
whether every application closed (docs/placement.md, "Kill -9 of each node in turn").

``app`` is the coordinator (the smallest name) and runs the three applications: killing it loses
applications with one replica, beyond what any placement promises (docs/lifecycle.md, "No live
peer"), so its runs pin every application to ``app`` and ``n1`` (two sink replicas) and count each
published record once by its output id, as ``replicast consume`` does (docs/consume.md).

The whole sweep, every node × {for good, restart} (about 2–3 minutes a run), is a command; CI runs a
few nodes of the combined mode (``tests/integration/test_coordinator_kills.py``)::

    nice python3 -m tests.integration.coordinator_kills                     # 7 nodes × 2 modes
    python3 -m tests.integration.coordinator_kills --nodes n2 --modes restart --keep /tmp/kill-n2
"""

from __future__ import annotations

import argparse
import asyncio
import enum
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiomqtt

from replicast.engine.query_file import load_query
from replicast.engine.replay import replay
from replicast.operators.record import CLOSED
from tests.integration.helpers import (ROOT, close_streams_and_collect, cluster, collect_outputs,
                                       fig1_cluster_toml, free_ports, kill, make_cluster_module, mosquitto,
                                       publish_fig1_round)

PUNCTUATION_MS = 100
TICK_S = 0.1
#: The first GC round comes ``gc_period_s`` (30 s) after the coordinator deployed; a run gives up on it
#: (a failed precondition, not a pass) after this many seconds of publishing.
GC_WAIT_S = 90
RESTART_AFTER_S = 10
#: After the restart the coordinator restores what the node ran (its report trusted after ``settle_s`` =
#: 10 s); the run goes on ``REJOIN_S`` after the first restore decision (the replicas deployed again join
#: from their peers).  ``app`` restarts as the coordinator: nothing to restore there.
RESTORE_WAIT_S = 60
REJOIN_S = 20
#: A node killed for good: the run goes on this long (past the next GC round, ``gc_period_s`` = 30 s).
FOR_GOOD_RUN_S = 35
TAIL_S = 15
#: Every node of the cluster file.
ALL_NODES = ("app", "n1", "n2", "n3", "n4", "n5", "n6")


class Mode(enum.Enum):
    """What happens to the victim after its first SIGKILL."""

    FOR_GOOD = "for-good"
    RESTART = "restart"
    RESTART_THEN_FOR_GOOD = "restart-then-for-good"


class Step(enum.Enum):
    """Where a run's plan stands."""

    WAIT_GC = "wait-gc"          # publishing; the victim is killed at the first GC decision
    DOWN = "down"                # killed; waiting to restart it (or, for good, to end the run)
    RESTARTED = "restarted"      # restarted; waiting for the restore decision and the rejoin
    OVER = "over"                # the plan is done: the tail runs, then every stream closes


#: The step after ``DOWN`` and after ``RESTARTED``, by mode.
NEXT_STEP = {
    (Mode.FOR_GOOD, Step.DOWN): Step.OVER,
    (Mode.RESTART, Step.DOWN): Step.RESTARTED,
    (Mode.RESTART, Step.RESTARTED): Step.OVER,
    (Mode.RESTART_THEN_FOR_GOOD, Step.DOWN): Step.RESTARTED,
    (Mode.RESTART_THEN_FOR_GOOD, Step.RESTARTED): Step.OVER,
}


def decisions(run_dir: Path) -> list[dict]:
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

    def __init__(self, run_dir: Path, cluster_file: Path, victim: str, processes: dict, mode: Mode):
        self.run_dir, self.cluster_file, self.victim, self.processes = run_dir, cluster_file, victim, processes
        self.mode = mode
        self.step = Step.WAIT_GC
        self.since = time.monotonic()
        self.restarted: subprocess.Popen | None = None
        self.gc_before_kill = self.restores = self.gc_after_kill = 0
        self.restored_at: float | None = None

    def _count(self, reason: str) -> int:
        return sum(1 for d in decisions(self.run_dir) if d.get("reason") == reason)

    def _advance(self, now: float) -> None:
        self.step, self.since = NEXT_STEP[self.mode, self.step], now
        if self.step is Step.OVER:
            self.gc_after_kill = self._count("gc") - self.gc_before_kill

    def tick(self) -> bool:
        """One step; True once the plan is over (the tail may start)."""
        now = time.monotonic()
        waited = now - self.since
        if self.step is Step.WAIT_GC:
            gc = self._count("gc")
            if gc:
                self.gc_before_kill = gc
                kill(self.processes[self.victim])
                self.step, self.since = Step.DOWN, now
            elif waited > GC_WAIT_S:
                raise AssertionError(f"no GC round within {GC_WAIT_S} s: {decisions(self.run_dir)[-5:]}")
        elif self.step is Step.DOWN and self.mode is Mode.FOR_GOOD:
            if waited >= FOR_GOOD_RUN_S:
                self._advance(now)
        elif self.step is Step.DOWN and waited >= RESTART_AFTER_S:
            self._restart()
            self._advance(now)
        elif self.step is Step.RESTARTED:
            self.restores = self._count("restore")
            if self.restores and self.restored_at is None:
                self.restored_at = now
            if self.restored_at is not None and now - self.restored_at >= REJOIN_S or (
                    self.victim == "app" and waited >= REJOIN_S):
                if self.mode is Mode.RESTART_THEN_FOR_GOOD:
                    self.restarted.kill()                               # SIGKILL, for good
                    self.restarted.wait(10)
                self._advance(now)
            elif waited > RESTORE_WAIT_S:
                raise AssertionError(f"{self.victim} restarted {waited:.0f} s ago and no restore decision yet; "
                                     f"{decisions(self.run_dir)[-5:]}")
        return self.step is Step.OVER

    def _restart(self) -> None:
        out = open(self.run_dir / f"{self.victim}-restarted.log", "w")   # docs/deploy.md: same command, same state
        self.restarted = subprocess.Popen([sys.executable, "-m", "replicast.engine.cli", "node", "--config",
                                           str(self.cluster_file), "--name", self.victim, "--log-json",
                                           "--state-dir", str(self.run_dir / "state")],
                                          cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        out.close()                                                     # the child holds its own copy

    def stop(self) -> None:
        if self.restarted is not None and self.restarted.poll() is None:
            self.restarted.terminate()
            self.restarted.wait(10)


@dataclass
class Delivery:
    """What the clients received, by application."""

    published: dict[str, list[dict]]
    arrivals: dict[str, list[dict]] = field(default_factory=dict)
    closed: set[str] = field(default_factory=set)


async def drive(broker_port: int, servers: list[str], plan: Plan, sink_replicas: int) -> Delivery:
    """Publish the Fig. 1 sources, ticking ``plan``, until its tail is over; then close every stream."""
    delivery = Delivery({f"{kind}_{s}": [] for s in servers for kind in ("cpu", "ping")})
    seen: set[str] = set()

    def on_items(app: str, items: list[dict]) -> None:
        records = [i for i in items if "ts" in i]
        if sink_replicas > 1:          # each record once by its output id (docs/consume.md)
            records = [i for i in records if i["@id"] not in seen and not seen.add(i["@id"])]
        delivery.arrivals.setdefault(app, []).extend(records)
        delivery.closed.update(app for i in items if i.get("punctuation") == CLOSED)
    async with aiomqtt.Client("127.0.0.1", broker_port, identifier="test-sub") as sub, \
            aiomqtt.Client("127.0.0.1", broker_port, identifier="test-pub") as pub:
        await sub.subscribe("replicast/out/#", qos=1)
        collector = asyncio.create_task(collect_outputs(sub, on_items, applications=3))
        tick, tail = 0, None
        while tail is None or tick < tail:
            if tail is None and tick % 10 == 0 and plan.tick():
                tail = tick + round(TAIL_S / TICK_S)
            await publish_fig1_round(pub, servers, tick, delivery.published)
            await asyncio.sleep(TICK_S)
            tick += 1
        try:
            await close_streams_and_collect(pub, delivery.published, collector, delivery.closed, delivery.arrivals)
        except AssertionError:         # some application never closed: ``delivery.closed`` says which
            pass
    return delivery


def two_sinks(text: str, applications, out_dir: Path) -> str:
    """The cluster file with every application pinned to ``app`` and ``n1``, one output file per node."""
    for app in applications:
        pin, pins = f'{app} = "app"', f'{app} = ["app", "n1"]'
        out, outs = f'file = "{out_dir}/{app}.jsonl"', f'file = "{out_dir}/{app}-{{node}}.jsonl"'
        assert pin in text and out in text, app
        text = text.replace(pin, pins).replace(out, outs)
    return text


@dataclass(frozen=True)
class Difference:
    """One application's output against the reference: records missing, duplicated (a reference record
    received more often than the reference has it), wrong (not in the reference), and order (judged
    only where the same records arrived: otherwise the counts say more)."""

    received: int
    reference: int
    missing: int
    duplicated: int
    wrong: int
    in_order: bool

    @property
    def exact(self) -> bool:
        return not (self.missing or self.duplicated or self.wrong) and self.in_order


def reference_outputs(query, published: dict[str, list[dict]]) -> dict[str, list[tuple]]:
    """``replay``'s one-copy output of what was ``published``, by application (tuples, ``ts`` first)."""
    streams = {name: [(r["ts"], *[v for k, v in r.items() if k != "ts"]) for r in records]
               for name, records in published.items()}
    return replay(query, streams, replicas=1, punctuation_us=round(PUNCTUATION_MS * 1000)).outputs


def differences(query, delivery: Delivery) -> dict[str, Difference]:
    """Each application's :class:`Difference` from the reference of what was published."""
    reference = reference_outputs(query, delivery.published)
    out = {}
    for app, spec in query.applications.items():
        names = query.schemas[spec.input].names
        got = [(i["ts"], *[i[n] for n in names]) for i in delivery.arrivals.get(app, [])]
        want = Counter(reference[app])
        extra = Counter(got) - want
        duplicated = sum(n for record, n in extra.items() if record in want)
        out[app] = Difference(received=len(got), reference=len(reference[app]),
                              missing=sum((want - Counter(got)).values()), duplicated=duplicated,
                              wrong=sum(extra.values()) - duplicated,
                              in_order=not spec.ordered or Counter(got) != want or got == reference[app])
    return out


@dataclass
class Outcome:
    """One run: the victim, the mode, what the coordinator decided, and what the applications received."""

    victim: str
    mode: Mode
    seconds: float
    gc_before_kill: int = 0
    restores: int = 0
    gc_after_kill: int = 0
    differences: dict[str, Difference] = field(default_factory=dict)
    closed: set[str] = field(default_factory=set)
    error: str | None = None                 # a failed precondition (no GC round, no restore): no verdict

    @property
    def exact(self) -> bool:
        return (self.error is None and bool(self.differences) and self.closed >= set(self.differences)
                and all(d.exact for d in self.differences.values()))

    def verdict(self) -> str:
        """``exact``, or what went wrong: ``missing N``, ``duplicated N``, ``wrong N``, order, closing."""
        if self.error is not None:
            return f"error: {self.error.splitlines()[0][:120]}"
        words = [f"{what} {sum(getattr(d, what) for d in self.differences.values())}"
                 for what in ("missing", "duplicated", "wrong")
                 if any(getattr(d, what) for d in self.differences.values())]
        words += [f"{app} out of order" for app, d in self.differences.items() if not d.in_order]
        if unclosed := sorted(set(self.differences) - self.closed):
            words.append("never closed: " + ", ".join(unclosed))
        return "; ".join(words) or "exact"


def run_one(directory: Path, victim: str, mode: Mode) -> Outcome:
    """One run of the live cluster in ``directory`` with ``victim`` killed as ``mode`` says."""
    started = time.monotonic()
    make = make_cluster_module()
    query = load_query(ROOT / "examples/cluster-fig1-query.toml")
    outcome = Outcome(victim, mode, 0.0)
    with mosquitto(directory) as broker_port:
        ports = free_ports(14)
        cluster_file = directory / "cluster.toml"
        text = fig1_cluster_toml(directory, broker_port, ports, punctuation_ms=PUNCTUATION_MS, min_cost=True)
        sink_replicas = 2 if victim == "app" else 1
        if sink_replicas > 1:
            text = two_sinks(text, make.APPLICATIONS, directory / "out")
        cluster_file.write_text(text)
        run_dir = directory / "run"
        with cluster(cluster_file, run_dir) as processes:
            plan = Plan(run_dir, cluster_file, victim, processes, mode)
            try:
                delivery = asyncio.run(drive(broker_port, make.SERVERS, plan, sink_replicas))
            except AssertionError as error:
                outcome.error = str(error)
                delivery = None
            finally:
                plan.stop()
    outcome.gc_before_kill, outcome.restores, outcome.gc_after_kill = plan.gc_before_kill, plan.restores, plan.gc_after_kill
    if delivery is not None:
        outcome.differences = differences(query, delivery)
        outcome.closed = set(delivery.closed)
    outcome.seconds = time.monotonic() - started
    return outcome


def describe(outcome: Outcome) -> str:
    """One table row: node, mode, verdict, time, the coordinator's decisions, records by application."""
    records = ", ".join(f"{app} {d.received}/{d.reference}" for app, d in outcome.differences.items())
    return (f"| {outcome.victim} | {outcome.mode.value} | {outcome.verdict()} | {outcome.seconds:.0f} s | "
            f"{outcome.gc_before_kill} / {outcome.restores} / {outcome.gc_after_kill} | {records} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tests.integration.coordinator_kills", description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", nargs="+", default=list(ALL_NODES), choices=ALL_NODES, metavar="NODE",
                        help=f"the victims, one run each per mode (default: all of {', '.join(ALL_NODES)})")
    parser.add_argument("--modes", nargs="+", default=[Mode.FOR_GOOD.value, Mode.RESTART.value],
                        choices=[m.value for m in Mode], help="default: for-good restart")
    parser.add_argument("--keep", type=Path, help="keep each run's files (logs, state, outputs) under this folder")
    args = parser.parse_args(argv)
    print("| node | mode | outcome | time | GC before kill / restores / GC after | records received/reference |")
    print("|---|---|---|---|---|---|", flush=True)
    failures = 0
    for victim in args.nodes:
        for mode in map(Mode, args.modes):
            with tempfile.TemporaryDirectory(prefix=f"kills-{victim}-{mode.value}-") as scratch:
                directory = Path(scratch)
                if args.keep is not None:
                    directory = args.keep / f"{victim}-{mode.value}"
                    directory.mkdir(parents=True, exist_ok=True)
                outcome = run_one(directory, victim, mode)
            failures += not outcome.exact
            print(describe(outcome), flush=True)
    print(f"{failures} of {len(args.nodes) * len(args.modes)} runs did not deliver exactly the reference")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
