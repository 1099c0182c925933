"""The Fig. 1 walkthrough of docs/consume.md, as a user would run it: ``replicast cluster up`` of the
Fig. 1 cluster with two sink replicas per application (examples/make_cluster_fig1.py
``--sink-replicas 2``: every application on ``app`` and on a server), ``replicast consume APP`` for
each application as its own process (JSON lines on stdout), and kill -9 of three nodes in turn —
the server n2 (alerts' second sink, also entry points and operators), the server n3 (no sink: entry
points and operators only, each with a live replica elsewhere), then ``app`` (every application's
first sink) — each restarted with the command ``cluster up`` recorded in ``RUN_DIR/state.json``
(docs/deploy.md, "Restarting a node").  Every consumer prints exactly `replay`'s reference: none
twice, none missing.  Run on a private mosquitto and on the embedded amqtt broker that ``cluster up``
starts itself (``broker = "embedded"``, as examples/cluster-fig1-eo.toml).

The mosquitto run has a failure-free twin cluster fed the same input (tests/integration/fig1_kills.py)
and asserts the pause around each kill: the ``alerts`` consumer's longest gap is at most the twin's
longest gap in the same window plus the fastest path's delay plus the measured slack
(docs/consume.md, "The pause around a kill").  ``python3 -m tests.integration.fig1_kills`` does the
same for every node of the cluster."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.fig1_kills import PUNCTUATION_MS, check, walkthrough
from tests.integration.helpers import ROOT, assert_fig1_reference, make_cluster_module

#: (tick from which to kill, victim): a kill waits until every node has been ready SETTLE ticks and
#: the previous victim is ready again.  n3 hosts no sink (cpu_n2, ping_n2, cpu_n3, ping_n3,
#: correlate, load_trend: each with a replica on another server).
KILLS = [(30, "n2"), (60, "n3"), (90, "app")]


def test_shipped_example_is_the_generators_output():
    make = make_cluster_module()
    text = make.cluster_toml(query="cluster-fig1-query.toml", ports=list(range(17400, 17407)),
                             metrics_ports=list(range(17500, 17507)), broker="embedded", broker_port=18834,
                             secret="change-me-fig1-demo", output_dir="../out/cluster-fig1-eo", sources=True,
                             sink_replicas=2).replace("examples/cluster-fig1.toml", "examples/cluster-fig1-eo.toml")
    assert (ROOT / "examples/cluster-fig1-eo.toml").read_text() == text
    assert 'alerts = ["app", "n2"]' in text


@pytest.mark.parametrize("broker, plan, twin", [("mosquitto", KILLS, True),
                                                # a sink host and a server with no sink: the CI time kept small
                                                ("embedded", KILLS[:2], False)], ids=["mosquitto", "embedded"])
def test_fig1_two_sink_replicas_kill_and_restart_sink_hosts_consumer_prints_exactly_the_reference(tmp_path, broker, plan,
                                                                                                  twin):
    make = make_cluster_module()
    run = walkthrough(tmp_path, 2, plan, broker, twin=twin)
    print(f"alerts lines {len(run.consumers['alerts'].lines)}; plain subscriber copies per record "
          f"{({app: dict(Counter(c.values())) for app, c in run.raw.items()})}; "
          f"events {[(w, n, round(t - run.events[0][2], 2)) for w, n, t in run.events]}")
    for pause in check(run, plan):              # exact output; with the twin, each pause within its bound
        print(pause)
    for app, lines in run.consumers.items():
        records = lines.records()
        assert sum(run.raw[app].values()) > len(records), app       # both sink replicas published: copies on the topic
        # one file per sink replica ({node} in the path); a restarted one read its tail back: no line twice
        for node in make.sink_nodes(2)[app]:
            ids = [json.loads(line)["@id"]
                   for line in (tmp_path / "files" / "out" / f"{app}-{node}.jsonl").read_text().splitlines()]
            assert ids and len(set(ids)) == len(ids), (app, node)


def frontiers_read(tmp_path: Path) -> dict[str, int | None]:
    """The frontier each application's restarted sink read back (its ``frontier_read`` log event)."""
    read = {}
    for log in tmp_path.glob("app-*.log"):
        for line in log.read_text().splitlines():
            if '"frontier_read"' in line:
                event = json.loads(line)
                read[event["app"]] = event["frontier"]
    return read


def test_a_restarted_only_sink_publishes_nothing_again_below_its_retained_frontier(tmp_path):
    """One sink replica per application (the plain Fig. 1 cluster): kill -9 of ``app`` and its
    restart.  The restarted sinks read the frontier retained on ``replicast/frontier/<app>`` and
    publish nothing again at or below it, so a plain subscriber (no ids, no library) sees no record
    twice below it; above it, what the sink had delivered but not yet punctuated before the kill may
    come again (docs/consume.md), and is printed.  The consumer still prints exactly the reference.

    The frontier read back is at least the punctuation published before the last one the plain
    subscriber saw before the kill: the sink publishes the retained frontier right after each
    payload on the same session, so only the last payload's frontier can be missing."""
    run = walkthrough(tmp_path, 1, [(30, "app")])
    raw, raw_payloads = run.raw, run.raw_payloads
    got = {app: lines.records() for app, lines in run.consumers.items()}
    assert_fig1_reference(run.query, run.published, got, PUNCTUATION_MS)
    kill_time = next(t for what, _, t in run.events if what == "kill")
    read = frontiers_read(tmp_path)
    for app, payloads in raw_payloads.items():
        stamps = {i["@id"]: i["ts"] for _, items in payloads for i in items if "ts" in i}
        before = sorted({i["punctuation"] for t, items in payloads if t < kill_time for i in items
                         if "punctuation" in i})
        repeated = sorted(stamps[i] for i, n in raw[app].items() if n > 1)
        frontier = read.get(app)
        print(f"{app}: frontier read back {frontier}, punctuations before the kill …{before[-2:]}; repeated records "
              f"{len(repeated)}, of which at or below the frontier "
              f"{sum(1 for ts in repeated if frontier is not None and ts <= frontier)}")
        assert frontier is not None and len(before) >= 2 and frontier >= before[-2], (app, frontier, before[-2:])
        assert all(ts > frontier for ts in repeated), (app, frontier, repeated)
