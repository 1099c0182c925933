"""``replicast dashboard``: a locally served web page of a running cluster (docs/tracing.md).

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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from replicast.engine.cluster_config import ClusterConfig
from replicast.engine.core.trace_aggregate import LogHistogram, merge
from replicast.engine.core.trace_language import TraceQueryError, parse
from replicast.engine.trace_client import Answers, ClusterTrace, now_us

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

    def install(self) -> None:
        """(Re)install the view's queries on every node that lacks them (a restarted node has none)."""
        for qid, text in ((SHARE_ID, SHARE_QUERY), (LATENCY_ID, LATENCY_QUERY)):
            self.trace.install(qid, text)

    def remove(self) -> None:
        for qid in (SHARE_ID, LATENCY_ID):
            self.trace.remove(qid)

    def refresh(self) -> None:
        states = self.trace.state()
        for node, state in states.items():
            if not {SHARE_ID, LATENCY_ID} <= set(state["queries"]):
                self.install()
                break
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


def serve(view: ClusterView, host: str, port: int, interval: float = 1.0) -> None:
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
