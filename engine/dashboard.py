"""``replicast dashboard``: a locally served web page of a running cluster, or of a recorded run
(:class:`RecordedView`: a simulation's output, an application's output files) (docs/tracing.md).

The page (:mod:`engine.dashboard_page`, one HTML file with its script: no build step) reads
``/api/state`` once a second; this module serves it from a :class:`ClusterView` that polls the
cluster's nodes (:mod:`engine.trace_client`) in a thread of its own:

* the query DAG: every stream, operator and application with its replicas, the node each runs on
  and the state it reports (``joining``, ``rebuilding``, ``live``; ``unreachable`` when its node
  does not answer);
* each application's latency distribution as a CCDF, from a ``Deliver`` query the view installs
  (sampled 1/:data:`LATENCY_SAMPLE`, over the last :data:`LATENCY_WINDOW_S` seconds);
* the win share of every stream replica at every replica's port, from an ``Arrival`` query it
  installs (sampled 1/:data:`SHARE_SAMPLE`, over the last :data:`SHARE_WINDOW_S` seconds);
* the answers of every other query installed on the nodes (``replicast trace-query --keep``, or
  one running), merged from all nodes since the view first saw them.

Its own queries are removed when the dashboard stops.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from replicast.engine.cluster_config import ClusterConfig
from replicast.engine.node import (LogHistogram, TraceQueryError, merge_trace_tables as merge,
                                   parse_trace_query as parse)
from replicast.engine.trace_client import Answers, ClusterTrace, now_us
from replicast.operators.errors import ReplicastError

log = logging.getLogger("replicast.dashboard")

SHARE_SAMPLE, SHARE_WINDOW_S = 10, 10.0
LATENCY_SAMPLE, LATENCY_WINDOW_S = 1, 30.0       # Deliver events cost only at the applications
#: The dashboard's own queries (ids on the nodes).
SHARE_ID, LATENCY_ID = "dashboard-win-share", "dashboard-latency"
SHARE_QUERY = ('From a In Arrival Where a.outcome = "pass" GroupBy a.replica, a.port, a.upstream '
               f'Select a.replica, a.port, a.upstream, COUNT, SHARE Sample 1/{SHARE_SAMPLE}')
LATENCY_QUERY = f"From d In Deliver GroupBy d.app Select d.app, COUNT, P50(d.latency_us) Sample 1/{LATENCY_SAMPLE}"
#: Reports older than this are forgotten (the longest window the page shows).
KEEP_S = 600.0


class ClusterView:
    """What the page shows, refreshed by :meth:`refresh` (see the module docstring)."""

    def __init__(self, config: ClusterConfig):
        self.config = config
        self.trace = ClusterTrace(config, timeout=1.0)
        self.answers = Answers()
        self.answers.watch(SHARE_ID, parse(SHARE_QUERY))
        self.answers.watch(LATENCY_ID, parse(LATENCY_QUERY))
        self.others: dict[str, str] = {}
        self.installed_on: set[str] = set()
        self.snapshot: dict[str, Any] = {"ready": False}
        self.lock = threading.Lock()

    def install(self, nodes: list[str] | None = None) -> None:
        """Install the view's queries on every node (or those of ``nodes``: a restarted node has none)."""
        for qid, text in ((SHARE_ID, SHARE_QUERY), (LATENCY_ID, LATENCY_QUERY)):
            self.trace.install(qid, text, nodes)

    def remove(self) -> None:
        for qid in (SHARE_ID, LATENCY_ID):
            self.trace.remove(qid)

    def refresh(self) -> None:
        states = self.trace.state()
        lacking = [node for node, state in states.items() if not {SHARE_ID, LATENCY_ID} <= set(state["queries"])]
        if lacking:
            self.install(lacking)
        for node, state in states.items():
            for qid, text in state["queries"].items():
                if qid not in (SHARE_ID, LATENCY_ID) and qid not in self.others:
                    try:
                        self.answers.watch(qid, parse(text))
                        self.others[qid] = text
                    except TraceQueryError as error:
                        log.warning("query %s on node %s: %s", qid, node, error)
        self.answers.add(self.trace.poll())
        now = now_us()
        self.answers.trim(now - int(KEEP_S * 1e6))
        snapshot = {"ready": True, "at_us": now, "cluster": str(self.config.path),
                    "dag": self._dag(states), "latency": self._latency(now), "shares": self._shares(now),
                    "shares_title": f"Win share per stream replica (last {SHARE_WINDOW_S:.0f} s: whose copy "
                                    "passed the duplicate filter first)",
                    "queries": [{"id": qid, "text": text, "rows": self.answers.rows(qid)}
                                for qid, text in sorted(self.others.items())],
                    "unreachable": sorted(self.trace.unreachable), "untraceable": self.trace.untraceable}
        with self.lock:
            self.snapshot = snapshot

    def _dag(self, states: dict[str, dict]) -> list[dict]:
        """Logical nodes in topological order, each with its replicas where they run and their states."""
        query, placement = self.config.query, self.config.placement
        hosted = {r["replica"]: (node, r["state"]) for node, s in states.items() for r in s["replicas"]}
        out = []
        for kind, names in (("stream", query.streams), ("operator", query.operators),
                            ("application", query.applications)):
            for name in names:
                replicas = []
                for index, node in enumerate(placement.get(name, [])):
                    replica = f"{name}#{index}"
                    where, state = hosted.get(replica, (node, None))
                    if state is None:
                        state = "unreachable" if node not in states else "absent"
                    replicas.append({"replica": replica, "node": where, "state": state})
                for replica, (node, state) in sorted(hosted.items()):        # placed by a coordinator
                    if replica.rpartition("#")[0] == name and all(r["replica"] != replica for r in replicas):
                        replicas.append({"replica": replica, "node": node, "state": state})
                inputs = [] if kind == "stream" else list(query.inputs_of(name))
                out.append({"name": name, "kind": kind, "inputs": inputs, "replicas": replicas})
        return out

    def _latency(self, now: int) -> dict[str, dict]:
        """Per application: its CCDF (latency µs, share of records at least that late) and counts."""
        query = self.answers.queries[LATENCY_ID]
        tables = [t[LATENCY_ID] for at, _, t in self.answers.reports
                  if LATENCY_ID in t and at >= now - int(LATENCY_WINDOW_S * 1e6)]
        out = {}
        for (app,), (count, buckets) in merge(query, tables).items():
            points, above = [], count
            for bucket in sorted(buckets, key=int):
                value = LogHistogram.quantile({int(bucket): 1}, 0.5)        # the bucket's value (±1 %)
                points.append([value, above / count])
                above -= buckets[bucket]
            out[app] = {"count": count, "sample": LATENCY_SAMPLE, "ccdf": points,
                        "p50_us": LogHistogram.quantile(buckets, 0.5), "p99_us": LogHistogram.quantile(buckets, 0.99)}
        return out

    def _shares(self, now: int) -> list[dict]:
        rows = self.answers.rows(SHARE_ID, now - int(SHARE_WINDOW_S * 1e6))
        return [{"replica": r["replica"], "port": r["port"], "upstream": r["upstream"], "count": r["COUNT"],
                 "share": r["SHARE"]} for r in rows]

    def page_state(self) -> bytes:
        with self.lock:
            return json.dumps(self.snapshot, default=str).encode()


class RecordedView:
    """The same page for a finished run (``replicast dashboard --run PATH``), read once:

    * a simulated run (``deliveries.parquet``, or a ``replicast simulate`` directory's ``k<K>/``):
      each application's latency CCDF, and the win share of each upstream replica along the
      delivered records' paths — the chain of first arrivals the simulator records per delivery
      (engine/messages.py rule 5), so a share here is of the records that reached an application;
      the DAG is what the paths went through (replica@server), states ``recorded``;
    * a live cluster's output files (``*.jsonl`` of the applications' file sinks, or a directory of
      them): each application's latency CCDF (arrival − ts), no paths.
    """

    def __init__(self, path: Path):
        self.path = path
        self.snapshot: dict[str, Any] = {"ready": False}

    def install(self) -> None:
        pass

    def remove(self) -> None:
        pass

    def refresh(self) -> None:
        if self.snapshot["ready"]:
            return
        rows = self._rows()
        latency: dict[str, list[int]] = defaultdict(list)
        transitions: Counter = Counter()
        for app, late, path, n in rows:
            latency[app].extend([late] * n)
            hops = path.split(" > ") if path else []
            for upstream, replica in zip(hops, hops[1:]):
                transitions[(replica.partition("@")[0], upstream.partition("@")[0].rpartition("#")[0],
                             upstream.partition("@")[0])] += n
        self.snapshot = {"ready": True, "at_us": now_us(), "cluster": f"recorded run {self.path}",
                         "dag": _dag_of_paths(row[2] for row in rows), "latency": {
                             app: _ccdf(values) for app, values in sorted(latency.items())},
                         "shares": _path_shares(transitions), "queries": [], "unreachable": [], "untraceable": [],
                         "shares_title": "Win share per upstream replica along the delivered records' paths "
                                         "(port: the upstream's name)"}

    def _rows(self) -> list[tuple[str, int, str, int]]:
        """(app, latency µs, path, count) of every delivery."""
        path = self.path
        if path.is_dir() and (path / "deliveries.parquet").is_file():
            path = path / "deliveries.parquet"
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq             # the simulation extra
            table = pq.read_table(path, columns=["app", "ts", "arrival", "path"]).to_pydict()
            return [(app, arrival - ts, route or "", 1) for app, ts, arrival, route
                    in zip(table["app"], table["ts"], table["arrival"], table["path"])]
        files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
        if not files:
            raise ReplicastError(f"{path}: no deliveries.parquet and no *.jsonl output files here")
        rows = []
        for file in files:
            for number, line in enumerate(file.read_text().splitlines(), 1):
                try:
                    item = json.loads(line)
                    rows.append((str(item["app"]), int(item["arrival"]) - int(item["ts"]), "", 1))
                except (ValueError, KeyError, TypeError):
                    raise ReplicastError(f"{file}:{number}: not an output line with app, ts and arrival") from None
        return rows

    def page_state(self) -> bytes:
        return json.dumps(self.snapshot, default=str).encode()


def _ccdf(latencies: list[int], points: int = 200) -> dict:
    ordered = sorted(latencies)
    n = len(ordered)
    step = max(1, n // points)
    curve = [[float(ordered[i]), (n - i) / n] for i in range(0, n, step)]
    return {"count": n, "sample": 1, "ccdf": curve, "p50_us": float(ordered[(n - 1) // 2]),
            "p99_us": float(ordered[int(0.99 * (n - 1))])}


def _path_shares(transitions: Counter) -> list[dict]:
    totals: Counter = Counter()
    for (replica, port, _), n in transitions.items():
        totals[(replica, port)] += n
    return [{"replica": replica, "port": port, "upstream": upstream, "count": n, "share": n / totals[(replica, port)]}
            for (replica, port, upstream), n in sorted(transitions.items())]


def _dag_of_paths(paths) -> list[dict]:
    """Logical nodes and replicas seen on the paths, upstream first."""
    inputs: dict[str, set] = defaultdict(set)
    replicas: dict[str, dict[str, str]] = defaultdict(dict)
    first, last = set(), set()
    for path in set(paths):
        hops = [hop.partition("@") for hop in path.split(" > ")] if path else []
        for i, (replica, _, node) in enumerate(hops):
            name = replica.rpartition("#")[0]
            replicas[name][replica] = node
            if i:
                inputs[name].add(hops[i - 1][0].rpartition("#")[0])
        if hops:
            first.add(hops[0][0].rpartition("#")[0])
            last.add(hops[-1][0].rpartition("#")[0])
    order: list[str] = []
    while len(order) < len(replicas):                  # upstream first (paths are acyclic)
        ready = sorted(n for n in replicas if n not in order and inputs[n] <= set(order))
        order += ready or sorted(n for n in replicas if n not in order)
    return [{"name": name, "kind": "stream" if name in first else "application" if name in last else "operator",
             "inputs": sorted(inputs[name]), "replicas": [{"replica": r, "node": node, "state": "recorded"}
                                                          for r, node in sorted(replicas[name].items())]}
            for name in order]


def serve(view, host: str, port: int, interval: float = 1.0) -> None:
    """Serve the page on ``host:port`` and refresh the view every ``interval`` seconds until Ctrl-C."""
    from replicast.engine.dashboard_page import PAGE

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):                                # noqa: N802 - http.server's name
            if self.path in ("/", "/index.html"):
                body, kind = PAGE.encode(), "text/html; charset=utf-8"
            elif self.path == "/api/state":
                body, kind = view.page_state(), "application/json"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format, *args):            # noqa: A002
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="dashboard-http", daemon=True).start()
    print(f"replicast dashboard: http://{host}:{server.server_address[1]}/ (Ctrl-C stops)", flush=True)
    try:
        view.install()
        while True:
            started = time.monotonic()
            try:
                view.refresh()
            except Exception as error:                   # noqa: BLE001 - one bad poll never stops the page
                log.warning("refresh failed: %s", error)
            time.sleep(max(0.0, interval - (time.monotonic() - started)))
    finally:
        server.shutdown()
        server.server_close()
        view.remove()
