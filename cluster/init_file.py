"""``replicast cluster init``: write a cluster file for a list of ssh hosts (docs/cluster.md).

One node per host, named ``n1 … nN`` in the order given, reached over ssh (``[user@]host[:sshport]``)
and listening on ``--base-port`` (node links), ``base + 100`` (metrics).  With ``--placement
min-cost`` (the default) the placement coordinator deploys ``kmax`` replicas of every operator
(Alg. 5, docs/placement.md); the entry points are pinned round-robin to the hosts and the
applications to the first.  ``--placement manual`` writes the replicas out instead: every stream
and operator on ``kmax`` consecutive hosts.  The file is written with tomli-w after
``parse_cluster`` accepted it.
"""

from __future__ import annotations

from pathlib import Path

import tomli_w

from replicast.cluster.processes import ClusterError
from replicast.engine.cluster_config import parse_cluster
from replicast.engine.query_file import load_query


def parse_host(text: str) -> dict:
    """``[user@]host[:port]`` as an ``ssh = {…}`` table."""
    user, _, rest = text.rpartition("@")
    host, colon, port = rest.rpartition(":") if rest.count(":") == 1 else (rest, "", "")
    if not host or (colon and not port.isdigit()):
        raise ClusterError(f"--hosts: {text!r} is not [user@]host[:port]")
    return {"host": host, **({"user": user} if user else {}), **({"port": int(port)} if colon else {})}


def cluster_document(hosts: list[str], query_file: Path, out: Path, *, kmax: int, placement: str,
                     base_port: int, key: str | None, broker_port: int) -> dict:
    query = load_query(query_file)
    if not 1 <= kmax <= len(hosts):
        raise ClusterError(f"--kmax {kmax}: needs 1 ≤ kmax ≤ the number of hosts ({len(hosts)})")
    names = [f"n{i + 1}" for i in range(len(hosts))]
    nodes = []
    for i, (name, text) in enumerate(zip(names, hosts)):
        ssh = parse_host(text)
        if key is not None:
            ssh["key"] = key
        nodes.append({"name": name, "host": ssh["host"], "port": base_port + i, "metrics_port": base_port + 100 + i,
                      "ssh": ssh})
    try:
        relative_query = str(query_file.resolve().relative_to(out.resolve().parent))
    except ValueError:
        relative_query = str(query_file.resolve())
    doc: dict = {"query": relative_query, "secret_env": "REPLICAST_SECRET", "punctuation_ms": 100,
                 "mqtt": {"broker": "embedded", "host": nodes[0]["host"], "port": broker_port}, "nodes": nodes}
    streams, operators, apps = list(query.streams), list(query.operators), list(query.applications)
    if placement == "min-cost":
        doc["placement"] = "min-cost"
        pin = {s: names[i % len(names)] for i, s in enumerate(streams)}
        pin.update({a: names[0] for a in apps})
        doc["coordinator"] = {"kmax": kmax, "pin": pin}
    else:
        doc["placement"] = {name: [names[(i + r) % len(names)] for r in range(kmax)]
                            for i, name in enumerate([*streams, *operators])}
        doc["placement"].update({a: [names[0]] for a in apps})
    return doc


def write_cluster_file(out: Path, doc: dict) -> None:
    """Check ``doc`` as a cluster file (with a stand-in for the secret, which comes from the
    environment at ``up``), then write it to ``out``: a file ``init`` writes is one ``up`` accepts."""
    parse_cluster({**{k: v for k, v in doc.items() if k != "secret_env"}, "secret": "stand-in-secret"}, out)
    out.write_text("# written by 'replicast cluster init' (docs/cluster.md); set $REPLICAST_SECRET before "
                   "'replicast cluster up'\n" + tomli_w.dumps(doc), encoding="utf-8")
