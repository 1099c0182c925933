"""The node core's components built alone, from what they read (docs/architecture.md, "The node core's
modules"): no NodeCore, no network — an outbox, a few values, a table."""

from __future__ import annotations

import ast
from pathlib import Path

from replicast.engine.core.events import PeerTimedOut
from replicast.engine.core.links import PROBE_EVERY, Links
from replicast.engine.core.outbox import Outbox
from replicast.engine.core.stats import COUNTERS, Latency, server_report, statistics
from replicast.engine.core.views import Voter
from replicast.engine.messages import Ack, Heartbeat, View, ViewBallot, ViewDecided, ViewReply
from replicast.operators.plan import ReplicaId, StreamReplica

STREAM = StreamReplica(ReplicaId("a", 0), ReplicaId("b", 0), 0)


def test_outbox_addresses_itself_locally_and_only_connected_peers():
    connected = {"n2"}
    out = Outbox("n1", connected)
    out.send("n1", Heartbeat(1))
    out.send("n2", Heartbeat(2))
    out.send("n3", Heartbeat(3))                  # not connected: nowhere (it asks again when it is)
    out.put("n3", Heartbeat(4))                   # an answer on the link it came by
    out.event(PeerTimedOut("n3"))
    assert list(out.local) == [("n1", Heartbeat(1))]
    assert out.messages == [("n2", Heartbeat(2)), ("n3", Heartbeat(4))]
    assert out.events == [PeerTimedOut("n3")]
    connected.add("n3")                           # the core's set, shared: a peer that comes up is seen
    out.send("n3", Heartbeat(5))
    assert out.messages[-1] == ("n3", Heartbeat(5))


def links_alone(heard: dict[str, int], *peers: str) -> tuple[Links, Outbox]:
    out = Outbox("n1", set(peers))
    return Links(100, 600, out, lambda node, default: heard.get(node, default), now=0), out


def test_links_alone_coalesce_acks_and_send_them_after_a_heartbeat():
    links, out = links_alone({}, "n2")
    links.ack("n2", STREAM, 7, 3, now=10)
    links.ack("n2", STREAM, 7, 5, now=20)         # cumulative: only the latest leaves
    assert links.next_timer() == 0                # the first keep-alive round
    links.on_timer(now=0)
    out.messages.clear()
    assert links.next_timer() == 100
    links.on_timer(now=109)
    assert not [m for _, m in out.messages if isinstance(m, Ack)]
    links.on_timer(now=110)                       # due at 10 + heartbeat
    assert [(node, m) for node, m in out.messages if isinstance(m, Ack)] == [("n2", Ack(STREAM, 7, 5))]


def test_links_alone_ride_acks_and_probes_along_with_data():
    links, out = links_alone({}, "n2")
    links.ack("n2", STREAM, 7, 5, now=0)
    sent = links.drain([("n2", Heartbeat(0, 0))], now=5)
    assert sent == [("n2", Heartbeat(0, 0)), ("n2", Ack(STREAM, 7, 5)), ("n2", Heartbeat(5))]
    again = links.drain([("n2", Heartbeat(1, 1))], now=5 + PROBE_EVERY * 100 - 1)
    assert again == [("n2", Heartbeat(1, 1))]     # no probe before PROBE_EVERY heartbeat intervals


def test_links_alone_time_out_a_silent_peer_and_keep_idle_links_alive():
    heard = {"n2": 0, "n3": 0}
    links, out = links_alone(heard, "n2", "n3")
    assert links.on_timer(now=0)
    assert sorted(node for node, m in out.messages if isinstance(m, Heartbeat)) == ["n2", "n3"]
    heard["n2"] = 650
    out.messages.clear()
    assert links.on_timer(now=700)
    assert out.events == [PeerTimedOut("n3")]
    assert not links.on_timer(now=701)            # not a heartbeat round


def test_voter_alone_promises_accepts_and_refuses():
    counters = dict.fromkeys(COUNTERS, 0)
    out = Outbox("v", {"c"})
    voter = Voter({"s"}, 10, counters, out)
    view = View(12, 0, ((0, 1), (1, 1)))
    voter.on_ballot("c", ViewBallot("s", 0, 11), now=0)
    voter.on_ballot("c", ViewBallot("s", 0, 10), now=0)          # not above what it promised
    voter.on_ballot("c", ViewBallot("s", 0, 12, view), now=0)
    voter.on_ballot("c", ViewBallot("nope", 0, 99), now=0)       # not a stream of the query
    replies = [m for _, m in out.messages]
    assert [(r.phase, r.ok, r.promised) for r in replies] == [(1, True, 11), (1, False, 11), (2, True, 12)]
    assert replies[-1] == ViewReply("s", 0, 12, 2, True, 12, view)
    assert counters["refused_ballots"] == 2
    later = View(20, 1, ((1, 1),))
    voter.on_decided(ViewDecided("s", -1, later, 0, None))
    assert voter.streams["s"].accepted == later and voter.streams["s"].promised == 20


def test_statistics_and_report_alone_from_empty_tables():
    counters = dict.fromkeys(COUNTERS, 0)
    counters["gaps"] = 2
    stats = statistics({}, {}, (), {"app": Latency()}, {"n2": 1500}, counters)
    assert stats["gaps"] == 2 and stats["rtt_us"] == {"n2": 1500} and stats["replicas"] == {}
    assert stats["latency"]["app"]["count"] == 0
    report = server_report("n1", {}, {}, {"n2": 1500}, 1_000, now=5, load=0.5, capacity=2.0)
    assert report.rtt_ms == {"n2": 1.5} and report.load == 0.5 and report.capacity == 2.0


def _imports(path) -> set[str]:
    """Every module ``path`` imports, at any depth of its tree (TYPE_CHECKING blocks and functions too)."""
    tree = ast.parse(path.read_text(), str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:                               # relative: from . import node / from .node import …
                package = "replicast.engine.core" if node.level == 1 else "replicast.engine"
                base = f"{package}.{base}" if base else package
            names.add(base)
            names |= {f"{base}.{alias.name}" for alias in node.names}
    return names


CORE = Path(__file__).resolve().parents[2] / "engine" / "core"
NODE = {"replicast.engine.core.node", "engine.core.node"}


def test_no_core_module_imports_the_node_core_even_for_typing():
    modules = sorted(p for p in CORE.glob("*.py") if p.name != "node.py")
    assert len(modules) > 15
    importers = [p.name for p in modules if _imports(p) & NODE]
    assert importers == [], f"these modules import engine/core/node.py: {importers}"


def test_the_import_check_sees_typing_and_relative_imports(tmp_path):
    """The check above can fail: it finds the import forms a module could use."""
    for text in ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from replicast.engine.core.node import NodeCore\n",
                 "from . import node\n", "from .node import NodeCore\n", "import replicast.engine.core.node\n"):
        path = tmp_path / "m.py"
        path.write_text(text)
        assert _imports(path) & NODE, text


def test_every_core_module_is_named_in_the_architecture_docs():
    """A newcomer reading docs/architecture.md ("The node core's modules") can name every module of
    engine/core/ and what it may touch: each has its row (or shares one) in that section's table."""
    text = (CORE.parents[1] / "docs" / "architecture.md").read_text()
    section = text.split("## The node core's modules", 1)[1].split("\n## ", 1)[0]
    rows = "\n".join(line for line in section.splitlines() if line.startswith("| `"))
    modules = sorted(p.name for p in CORE.glob("*.py") if p.name != "__init__.py")
    missing = [name for name in modules if f"`{name}`" not in rows]
    assert missing == [], f"engine/core modules without a row in docs/architecture.md: {missing}"
