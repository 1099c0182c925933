"""kill -9 each node of the Fig. 1 cluster with two sink replicas in turn, and bound the pause the
consumer sees (docs/consume.md, "The pause around a kill").

    python3 -m tests.integration.fig1_kills                          # every node, a private mosquitto
    python3 -m tests.integration.fig1_kills --nodes n2 app --broker embedded --rounds 3

One cluster, the *killed* one, runs examples/make_cluster_fig1.py's cluster with two sink replicas
per application (as examples/cluster-fig1-eo.toml), with ``replicast consume APP`` for each
application as its own process; its nodes are SIGKILLed one after the other, each restarted with
the command ``cluster up`` recorded (docs/deploy.md, "Restarting a node").  A second cluster, its
*twin*, runs the same file on its own broker and ports, is never killed, and receives the very same
input payloads at the same moments (one publisher writes each round to both brokers): it is the
failure-free run "at the same time" — same records, same ticks, same machine load.

For each kill of node X, in the window W from 1 s before the kill to 1 s after the restarted X is
ready again, the killed cluster's ``alerts`` consumer must show no gap between consecutive arrivals
longer than ``pause_bound``: the twin's longest gap in W, plus the fastest surviving path's delay
D(W), plus the slack a loaded 2-core machine adds (``SLACK_S``, measured; docs/consume.md).  Every
consumer must print exactly `replay`'s reference: none twice, none missing.

One cluster with spaced kills rather than one per node: each kill waits until *every* node of the
killed cluster has been ready ``SETTLE`` ticks, so each hits a whole, settled cluster, while a
cluster start (about 10 s here, twice with the twin) is paid once, and the twin's one run covers
every window.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import aiomqtt

from replicast.engine.query_file import load_query
from replicast.operators.query import Query
from replicast.operators.record import CLOSED
from tests.integration.helpers import (ROOT, fig1_cluster_toml, free_ports, kill, make_cluster_module, metric,
                                       mosquitto, publish_fig1_round, replicast)

PUNCTUATION_MS = 100
TICK_S = 0.1
#: Ticks published whatever the kills (the run goes on past them while a kill is still to come or its
#: node is not ready again, up to ``max_ticks``).
TICKS = 150
RESTART_AFTER = 10                 # ticks from a kill to the restart
SETTLE = 10                        # ticks every node must have been ready before the next kill
#: Seconds the window W extends before the kill and after the restarted node's readiness.
WINDOW_MARGIN_S = 1.0
#: What a loaded 2-core machine adds to a comparison of two runs at the same time: the two
#: consumers' longest gaps over the same 2-s windows with no kill in either differ by up to 0.099 s
#: (5 runs at load 17-22, ``quiet_excess``; docs/consume.md, "The pause around a kill").  Around the
#: 35 kills of those runs the gap stayed 0.32-1.33 s below the twin's gap plus D, without slack.
SLACK_S = 0.1


class Lines:
    """A consumer process's stdout: each JSON line with the monotonic and wall-clock times it was read."""

    def __init__(self, process: subprocess.Popen):
        self.process, self.lines = process, []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append((time.monotonic(), time.time(), json.loads(line)))

    def records(self) -> list[dict]:
        return [record for _, _, record in self.lines]

    def times(self) -> list[float]:
        return [t for t, _, _ in self.lines]


def consume(app: str, broker_port: int, directory: Path, name: str = "") -> Lines:
    """``replicast consume APP`` on the broker at ``broker_port``, its stderr in ``consume-<name><app>.log``."""
    return Lines(subprocess.Popen(
        [sys.executable, "-m", "replicast.engine.cli", "consume", app, "--broker", f"mqtt://127.0.0.1:{broker_port}",
         "--position", str(directory / f"{name}{app}.pos")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=open(directory / f"consume-{name}{app}.log", "w"), text=True))


def ready(port: int) -> bool:
    try:
        return metric(port, "replicast_ready") == 1
    except OSError:
        return False


def max_gap(times: list[float]) -> float:
    return max((b - a for a, b in zip(times, times[1:])), default=0.0)


@contextlib.contextmanager
def clusters(files: list[Path], run_dirs: list[Path]):
    """``replicast cluster up`` of every file at once (threads: each ``up`` waits for its nodes), always
    down; yields each cluster's processes by name."""
    with concurrent.futures.ThreadPoolExecutor(len(files)) as pool:
        ups = list(pool.map(lambda f_d: replicast("cluster", "up", str(f_d[0]), "--run-dir", str(f_d[1])),
                            zip(files, run_dirs)))
    try:
        for up, run_dir in zip(ups, run_dirs):
            assert up.returncode == 0, up.stderr + "".join(p.read_text()[-3000:] for p in run_dir.glob("*.log"))
        yield [{p["name"]: p for p in json.loads((d / "state.json").read_text())["processes"]} for d in run_dirs]
    finally:
        for run_dir in run_dirs:
            if (run_dir / "state.json").exists():
                replicast("cluster", "down", "--run-dir", str(run_dir), "--grace", "5")


@contextlib.contextmanager
def brokers(directory: Path, kind: str, n: int):
    """``n`` broker ports: private mosquittos started here, or free ports for the embedded amqtt broker
    that ``cluster up`` starts itself (``broker = "embedded"``)."""
    with contextlib.ExitStack() as stack:
        if kind == "mosquitto":
            ports = []
            for i in range(n):
                (directory / f"mosquitto-{i}").mkdir()
                ports.append(stack.enter_context(mosquitto(directory / f"mosquitto-{i}")))
            yield ports
        else:
            yield free_ports(n)


@dataclass
class Run:
    """What a walkthrough saw: the input, each consumer's lines, the plain subscriber's copies, the
    kill events, and the twin's alerts consumer (None without a twin)."""
    query: Query
    published: dict[str, list]
    consumers: dict[str, Lines]
    raw: dict[str, Counter]
    raw_payloads: dict[str, list]
    events: list[tuple[str, str, float]]
    twin: Lines | None


def walkthrough(tmp_path: Path, sink_replicas: int, kills_plan: list[tuple[int, str]], broker: str = "mosquitto", *,
                twin: bool = False, max_ticks: int = 400) -> Run:
    """Cluster up (and its twin), a consumer per application (the twin: ``alerts`` only), the kills and
    restarts of ``kills_plan`` (tick from which to kill, victim), then CLOSED on every stream.
    ``broker``: ``"mosquitto"`` (one per cluster, started here) or ``"embedded"`` (the amqtt broker
    ``cluster up`` starts, as examples/cluster-fig1-eo.toml)."""
    make = make_cluster_module()
    query = load_query(ROOT / "examples/cluster-fig1-query.toml")
    names = ["", "twin-"] if twin else [""]
    with brokers(tmp_path, broker, len(names)) as broker_ports:
        files, run_dirs, metrics = [], [], []
        for name, broker_port in zip(names, broker_ports):
            ports = free_ports(14)
            (tmp_path / f"{name}files").mkdir()
            text = fig1_cluster_toml(tmp_path / f"{name}files", broker_port, ports, punctuation_ms=PUNCTUATION_MS,
                                     secret="consume-fig1-secret", sink_replicas=sink_replicas)
            if broker == "embedded":
                text = text.replace(f'broker = "mqtt://127.0.0.1:{broker_port}"', 'broker = "embedded"', 1)
                assert 'broker = "embedded"' in text
            files.append(tmp_path / f"{name}cluster.toml")
            files[-1].write_text(text)
            run_dirs.append(tmp_path / f"{name}run")
            metrics.append(dict(zip(["app", *make.SERVERS], ports[7:])))
        restarted: list[subprocess.Popen] = []
        consumers: dict[str, Lines] = {}
        watched: dict[str, Lines] = {}           # every consumer process, by its log's name
        published = {f"{kind}_{s}": [] for s in make.SERVERS for kind in ("cpu", "ping")}
        raw: dict[str, Counter] = {app: Counter() for app in make.APPLICATIONS}
        events: list[tuple[str, str, float]] = []        # (what, node, monotonic time)
        raw_payloads: dict[str, list[tuple[float, list]]] = {app: [] for app in make.APPLICATIONS}
        with clusters(files, run_dirs) as states:
            processes = states[0]
            try:
                for app in make.APPLICATIONS:
                    consumers[app] = watched[f"consume-{app}.log"] = consume(app, broker_ports[0], tmp_path)
                if twin:
                    watched["consume-twin-alerts.log"] = consume("alerts", broker_ports[1], tmp_path, "twin-")
                for log in watched:
                    wait_for_text(tmp_path / log, "subscribed to", 30)

                async def drive() -> None:
                    kills, restart_at, down, ready_since = list(kills_plan), {}, None, None
                    async with contextlib.AsyncExitStack() as stack:
                        pubs = [await stack.enter_async_context(aiomqtt.Client("127.0.0.1", port, identifier="test-pub"))
                                for port in broker_ports]
                        sub = await stack.enter_async_context(
                            aiomqtt.Client("127.0.0.1", broker_ports[0], identifier="test-raw"))
                        await sub.subscribe("replicast/out/#", qos=1)
                        raw_task = asyncio.create_task(collect_raw(sub))
                        tick = -1
                        while (tick := tick + 1) < TICKS or (kills or down is not None) and tick < max_ticks:
                            await publish_fig1_round(pubs, make.SERVERS, tick, published)   # the same payloads to both
                            whole = down is None and (not kills or all(ready(port) for port in metrics[0].values()))
                            ready_since = (tick if ready_since is None else ready_since) if whole else None
                            if kills and tick >= kills[0][0] and whole and tick - ready_since >= SETTLE:
                                down = kills.pop(0)[1]
                                kill(processes[down])
                                events.append(("kill", down, time.monotonic()))
                                restart_at[tick + RESTART_AFTER] = down
                            if tick in restart_at:
                                # docs/deploy.md, "Restarting a node": the command cluster up recorded
                                name = restart_at.pop(tick)
                                restarted.append(subprocess.Popen(
                                    processes[name]["command"], cwd=ROOT,
                                    stdout=open(tmp_path / f"{name}-{tick}.log", "w"), stderr=subprocess.STDOUT))
                                events.append(("restart", name, time.monotonic()))
                            if down is not None and events[-1][0] == "restart" and ready(metrics[0][down]):
                                events.append(("ready", down, time.monotonic()))
                                down = None
                            await asyncio.sleep(TICK_S)
                        assert not kills, f"kills not done within {max_ticks} ticks (nodes not ready long enough): {kills}"
                        for stream in published:
                            for pub in pubs:
                                await pub.publish(f"replicast/in/{stream}", json.dumps({"punctuation": CLOSED}), qos=1)
                        await asyncio.wait_for(raw_task, 60)

                async def collect_raw(sub) -> None:
                    closed = set()
                    async for message in sub.messages:
                        app = str(message.topic).rsplit("/", 1)[-1]
                        items = json.loads(message.payload)
                        raw[app].update(i["@id"] for i in items if "ts" in i)
                        raw_payloads[app].append((time.monotonic(), items))
                        if any(i.get("punctuation") == CLOSED for i in items):
                            closed.add(app)
                            if len(closed) == len(raw):
                                return

                asyncio.run(drive())
                for log, lines in watched.items():
                    assert lines.process.wait(60) == 0, (tmp_path / log).read_text()[-2000:]
                    lines.thread.join(10)
            finally:
                for process in [*(c.process for c in watched.values()), *restarted]:
                    if process.poll() is None:
                        process.terminate()
                        process.wait(10)
    return Run(query, published, consumers, raw, raw_payloads, events, watched.get("consume-twin-alerts.log"))


def wait_for_text(path: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in path.read_text():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {text!r} in {path}")
        time.sleep(0.05)


@dataclass(frozen=True)
class Pause:
    """The consumer's longest gap around one kill, and its bound (docs/consume.md, "The pause around a kill").

    ``gap``: longest gap between consecutive ``alerts`` arrivals of the killed cluster's consumer in W;
    ``twin_gap``: the twin's in the same W; ``path_delay``: D(W), the largest delay from a record's
    ``ts`` to its arrival at the twin's consumer among the records it received in W."""
    node: str
    gap: float
    twin_gap: float
    path_delay: float

    @property
    def bound(self) -> float:
        return self.twin_gap + self.path_delay + SLACK_S

    @property
    def excess(self) -> float:
        """The gap beyond the bound's measured terms (what the slack must cover)."""
        return self.gap - self.twin_gap - self.path_delay

    def __str__(self) -> str:
        return (f"{self.node}: gap {self.gap:.3f} s, twin {self.twin_gap:.3f} s + D {self.path_delay:.3f} s "
                f"(excess {self.excess:+.3f} s, bound {self.bound:.3f} s)")


def pauses(run: Run) -> list[Pause]:
    """One Pause per kill of ``run`` (which had a twin), its window W from WINDOW_MARGIN_S before the
    kill to WINDOW_MARGIN_S after the restarted node was ready."""
    kills = [(node, t) for what, node, t in run.events if what == "kill"]
    readies = [t for what, _, t in run.events if what == "ready"]
    killed = run.consumers["alerts"].times()
    result = []
    for (node, start), end in zip(kills, readies):
        lo, hi = start - WINDOW_MARGIN_S, end + WINDOW_MARGIN_S
        twin = [(t, wall, r) for t, wall, r in run.twin.lines if lo <= t <= hi]
        result.append(Pause(node, max_gap([t for t in killed if lo <= t <= hi]), max_gap([t for t, _, _ in twin]),
                            max((wall - r["ts"] / 1e6 for _, wall, r in twin), default=0.0)))
    return result


def quiet_excess(run: Run, width: float = 2.0) -> float:
    """Outside every kill window (both clusters failure-free, after start-up), the largest difference
    between the two consumers' longest gaps over the same ``width``-s windows, slid by 0.5 s: the
    noise of comparing two runs at the same time on this machine, with no kill in either."""
    kills = [t - WINDOW_MARGIN_S for what, _, t in run.events if what == "kill"]
    readies = [t + WINDOW_MARGIN_S for what, _, t in run.events if what == "ready"]
    a, b = run.consumers["alerts"].times(), run.twin.times()
    spans = zip([a[len(a) // 4], *readies], kills)          # from start-up, then from each restart's readiness
    worst = 0.0
    for start, stop in spans:
        while start + width <= stop:
            gaps = [max_gap([t for t in times if start <= t <= start + width]) for times in (a, b)]
            worst = max(worst, abs(gaps[0] - gaps[1]))
            start += 0.5
    return worst


def check(run: Run, plan: list[tuple[int, str]]) -> list[Pause]:
    """Assert the kills happened as planned, every consumer printed exactly the reference, and each
    kill's pause is within its bound; returns the pauses."""
    from tests.integration.helpers import assert_fig1_reference
    kills = [node for what, node, _ in run.events if what == "kill"]
    assert kills == [victim for _, victim in plan] and sum(w == "ready" for w, _, _ in run.events) == len(plan), run.events
    got = {app: lines.records() for app, lines in run.consumers.items()}
    assert_fig1_reference(run.query, run.published, got, PUNCTUATION_MS)        # none missing, none twice
    for app, records in got.items():
        assert len({r["@id"] for r in records}) == len(records), app
    result = pauses(run) if run.twin is not None else []
    if run.twin is not None:
        assert Counter(r["@id"] for r in run.twin.records()) == Counter(r["@id"] for r in got["alerts"]), \
            "the twin's alerts consumer did not print the reference"
        for pause in result:
            assert pause.gap <= pause.bound, f"pause around the kill of {pause}"
    return result


def main(argv: list[str] | None = None) -> int:
    make = make_cluster_module()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", nargs="+", default=["app", *make.SERVERS], help="nodes to kill, in this order")
    parser.add_argument("--broker", choices=("mosquitto", "embedded"), default="mosquitto")
    parser.add_argument("--rounds", type=int, default=1, help="runs, one cluster (and twin) each")
    parser.add_argument("--sink-replicas", type=int, default=2, choices=(1, 2),
                        help="1: the plain Fig. 1 cluster (a kill of app stops alerts until it is back)")
    args = parser.parse_args(argv)
    plan = [(60, node) for node in args.nodes]     # 6 s with no kill: the noise between the two runs
    failed = 0
    excesses, beyond = [], []
    for round_ in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="replicast-fig1-kills-") as directory:
            started = time.monotonic()
            run = walkthrough(Path(directory), args.sink_replicas, plan, args.broker, twin=True,
                              max_ticks=TICKS + 60 * len(plan) + 300)
            found = pauses(run)
            excesses += [p.excess for p in found]
            beyond += [p.gap - p.twin_gap for p in found]
            noise = quiet_excess(run)
            print(f"round {round_ + 1}: {time.monotonic() - started:.0f} s, {len(run.consumers['alerts'].lines)} alerts; "
                  f"no kill, the two consumers' longest gaps over the same 2-s windows differ by up to {noise:.3f} s")
            for p in found:
                print(f"  {p}{'' if p.gap <= p.bound else '  OVER THE BOUND'}")
            try:
                check(run, plan)
            except AssertionError as error:
                failed += 1
                print(f"  FAILED: {str(error)[:500]}")
    if excesses:
        print(f"{len(excesses)} kills: gap beyond the twin's gap + D: max {max(excesses):+.3f} s, median "
              f"{statistics.median(excesses):+.3f} s (slack {SLACK_S} s); beyond the twin's gap alone: max "
              f"{max(beyond):+.3f} s, median {statistics.median(beyond):+.3f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
