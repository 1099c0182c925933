"""A node's trace queries over HTTP, on its metrics port beside ``/metrics`` (docs/tracing.md).

``replicast trace-query`` and ``replicast dashboard`` install queries on every node of a running
cluster, read the partial tables the node core's tracepoints fill (engine.core.tracepoints), and
remove the queries again — the node never restarts.  Routes (every one needs the cluster's token,
:func:`token`, as ``Authorization: Bearer …``; anything else is ``/metrics``, as before):

* ``GET /trace/queries`` — the installed queries, ``{id: text}``;
* ``PUT /trace/queries/ID`` — install (or replace) query ID, the body its text; a query that does
  not parse is a 400 whose ``error`` is the parser's one line;
* ``DELETE /trace/queries/ID`` — remove it (with the last one, tracing costs nothing again);
* ``GET /trace/results?after=SEQ`` — the reports since SEQ: every :data:`REPORT_S` the service
  takes each query's partial table from the core, numbered; the last :data:`KEEP_REPORTS` are kept;
* ``GET /trace/state`` — what the dashboard draws: hosted replicas, their states and inputs, the
  node's statistics (latency histograms per application included).

The HTTP server runs in a thread and never touches the core: each request hands a function to the
event loop and waits for it (at most :data:`LOOP_WAIT_S`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import hmac
import json
import socket
import threading
import time
from collections import deque
from socketserver import ThreadingMixIn
from typing import Any, Callable
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app

from replicast.engine.node import TraceQueryError, installed_trace_queries, parse_trace_query as parse, trace_id
from replicast.operators.errors import ReplicastError

#: How often the node takes its queries' partial tables (seconds).
REPORT_S = 1.0
#: Reports kept for readers (10 minutes at one a second); a reader further behind misses the oldest.
KEEP_REPORTS = 600
#: Longest a request waits for the event loop.
LOOP_WAIT_S = 2.0
#: Largest query text accepted (bytes).
MAX_QUERY_BYTES = 4096


def token(secret: bytes) -> str:
    """The bearer token of a cluster's trace routes: derived from its shared secret, never the secret."""
    return hmac.new(secret, b"replicast trace queries", hashlib.sha256).hexdigest()


def traceparent_of(path: tuple[str, ...]) -> list[tuple[str, str]]:
    """The ``traceparent`` user property of a delivery whose baggage carries an input's trace id
    (engine/core/tracepoints.py rule 5): the same trace, a span id of this delivery's own."""
    trace = trace_id(path)
    if trace is None:
        return []
    span = hashlib.sha256("\n".join(path).encode()).hexdigest()[:16]
    return [("traceparent", f"00-{trace}-{span}-01")]


class TraceService:
    """Trace queries of one running node core (see the module docstring)."""

    def __init__(self, core, secret: bytes, loop: asyncio.AbstractEventLoop):
        """``core``: the driver's :class:`~engine.node.GuardedCore`."""
        self.core, self.loop = core, loop
        self._token = token(secret).encode()
        self.reports: deque[dict[str, Any]] = deque(maxlen=KEEP_REPORTS)
        self.seq = 0

    # -- on the event loop ----------------------------------------------------------------------------
    async def run(self) -> None:
        """Take the queries' partial tables every :data:`REPORT_S` (a supervised task)."""
        while True:
            await asyncio.sleep(REPORT_S)
            self.collect()

    def collect(self) -> None:
        tables = self.core.take_traces()
        if tables:
            self.seq += 1
            self.reports.append({"seq": self.seq, "at_us": time.time_ns() // 1000, "tables": tables})

    def _install(self, qid: str, text: str) -> dict:
        query = parse(text)
        self.core.install_trace(qid, query)
        return {"installed": qid, "text": query.text}

    def _remove(self, qid: str) -> dict:
        if self.core.tracer is not None:
            self.collect()                              # what it counted so far still reaches readers
        return {"removed": self.core.remove_trace(qid)}

    def _results(self, after: int) -> dict:
        tracer = self.core.tracer
        return {"node": self.core.name, "seq": self.seq, "reports": [r for r in self.reports if r["seq"] > after],
                "overflow": {} if tracer is None else dict(tracer.overflow)}

    def _state(self) -> dict:
        core = self.core
        replicas = []
        for replica, hosted in core.hosted.items():
            inputs = [{"upstream": str(stream.source), "port": stream.port, "node": inbound.node,
                       "state": inbound.state.value}
                      for stream, inbound in core.inbound.items() if stream.target == replica]
            replicas.append({"replica": str(replica), "name": replica.name, "kind": hosted.kind,
                             "state": hosted.state.value, "inputs": inputs})
        return {"node": core.name, "now_us": time.time_ns() // 1000, "replicas": replicas,
                "queries": installed_trace_queries(core), "statistics": core.statistics()}

    # -- in the HTTP server's threads -----------------------------------------------------------------
    def _on_loop(self, function: Callable[[], dict]) -> dict:
        done: concurrent.futures.Future = concurrent.futures.Future()

        def call() -> None:
            try:
                done.set_result(function())
            except Exception as error:              # noqa: BLE001 - handed to the request's thread
                done.set_exception(error)
        self.loop.call_soon_threadsafe(call)
        return done.result(LOOP_WAIT_S)

    def handle(self, method: str, path: str, query: str, body: bytes, authorization: str) -> tuple[int, dict]:
        """One request to ``/trace/…``: (status, JSON body)."""
        if not hmac.compare_digest(authorization.removeprefix("Bearer ").encode(), self._token):
            return 401, {"error": "trace routes need the cluster's token (Authorization: Bearer …)"}
        parts = path.strip("/").split("/")
        try:
            if parts == ["trace", "queries"] and method == "GET":
                return 200, self._on_loop(lambda: {"node": self.core.name,
                                                   "queries": installed_trace_queries(self.core)})
            if len(parts) == 3 and parts[:2] == ["trace", "queries"] and method == "PUT":
                if len(body) > MAX_QUERY_BYTES:
                    return 413, {"error": f"query {parts[2]!r}: longer than {MAX_QUERY_BYTES} bytes"}
                text = body.decode("utf-8", "replace")
                return 200, self._on_loop(lambda: self._install(parts[2], text))
            if len(parts) == 3 and parts[:2] == ["trace", "queries"] and method == "DELETE":
                return 200, self._on_loop(lambda: self._remove(parts[2]))
            if parts == ["trace", "results"] and method == "GET":
                after = int(parse_qs(query).get("after", ["0"])[0])
                return 200, self._on_loop(lambda: self._results(after))
            if parts == ["trace", "state"] and method == "GET":
                return 200, self._on_loop(self._state)
        except TraceQueryError as error:
            return 400, {"error": str(error)}
        except ReplicastError as error:                 # the core stopped (engine/node.py, ERROR)
            return 503, {"error": str(error)}
        except ValueError as error:
            return 400, {"error": f"{path}: {error}"}
        except concurrent.futures.TimeoutError:
            return 503, {"error": f"the node's event loop did not answer within {LOOP_WAIT_S} s"}
        return 404, {"error": f"no route {method} {path}"}


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True

    def shutdown(self) -> None:
        super().shutdown()
        self.server_close()                             # the port is free once the node stops


class _Quiet(WSGIRequestHandler):
    def log_message(self, format, *args):   # noqa: A002 - the base class's name
        pass


def serve(host: str, port: int, registry, service: TraceService):
    """``/metrics`` from ``registry`` and ``/trace/…`` from ``service`` on ``host:port``, in a daemon
    thread; returns ``(server, thread)`` as ``prometheus_client.start_http_server`` does."""
    metrics = make_wsgi_app(registry)

    def app(environ, start_response):
        path = environ.get("PATH_INFO", "")
        if not path.startswith("/trace/"):
            return metrics(environ, start_response)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(min(length, MAX_QUERY_BYTES + 1)) if length else b""
        status, answer = service.handle(environ["REQUEST_METHOD"], path, environ.get("QUERY_STRING", ""), body,
                                        environ.get("HTTP_AUTHORIZATION", ""))
        data = json.dumps(answer, default=str).encode()
        start_response(f"{status} {_REASONS.get(status, 'Error')}",
                       [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return [data]

    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    server_class = type("_NodeHTTP", (_Server,), {"address_family": family})
    server = make_server(host, port, app, server_class, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True)
    thread.start()
    return server, thread


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 413: "Payload Too Large",
            503: "Service Unavailable"}
