"""The front end of trace queries: install them on every node of a running cluster, read the partial
tables each node reports, and merge them into answers (docs/tracing.md; the nodes' side is
:mod:`engine.aio.trace_service`).  ``replicast trace-query`` and ``replicast dashboard`` use it.

Rules of this module:

1. A cluster's nodes are reached at ``host:metrics_port`` of its cluster file; a node without a
   metrics port cannot be traced and is named once in :attr:`ClusterTrace.untraceable`.
2. A query is checked here first (:func:`~engine.core.trace_language.parse`), so a bad one is one
   clear line before any node is asked.  A node that does not answer is skipped, named in
   :attr:`ClusterTrace.unreachable` and asked again at the next poll; it never stops the others.
3. :class:`Answers` keeps every report with the time it was taken; an answer merges the reports of
   a window (the last N seconds) or of everything since the query was installed.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections import defaultdict
from typing import Any

from replicast.engine.aio.trace_service import token
from replicast.engine.cluster_config import ClusterConfig
from replicast.engine.node import (TraceQuery, TraceQueryError, finish_trace_table as finish,
                                   merge_trace_tables as merge, parse_trace_query as parse)
from replicast.operators.errors import ReplicastError

#: Longest one node may take to answer one request (seconds).
NODE_TIMEOUT_S = 2.0


class ClusterTrace:
    """Trace queries on the nodes of one running cluster (rules 1, 2)."""

    def __init__(self, config: ClusterConfig, timeout: float = NODE_TIMEOUT_S):
        self.config, self.timeout = config, timeout
        self._auth = f"Bearer {token(config.secret)}"
        self.urls = {name: f"http://{_host(spec.host)}:{spec.metrics_port}"
                     for name, spec in config.nodes.items() if spec.metrics_port is not None}
        self.untraceable = sorted(set(config.nodes) - set(self.urls))
        self.unreachable: dict[str, str] = {}
        #: node -> query id -> events its table could not keep (more groups than a table holds)
        self.overflow: dict[str, dict[str, int]] = {}
        self._after: dict[str, int] = defaultdict(int)

    def _request(self, node: str, method: str, path: str, body: bytes | None = None) -> Any:
        request = urllib.request.Request(self.urls[node] + path, data=body, method=method,
                                         headers={"Authorization": self._auth})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as error:
            try:
                line = json.loads(error.read()).get("error", error.reason)
            except ValueError:
                line = error.reason
            if error.code >= 500:                      # the node's trouble: skipped this time (rule 2)
                self.unreachable[node] = f"{self.urls[node]}: {line}"
                return None
            raise ReplicastError(f"node {node}: {line}") from None      # the request's: a bad query, the token
        except (OSError, ValueError) as error:
            self.unreachable[node] = f"{self.urls[node]}: {error}"
            return None
        self.unreachable.pop(node, None)
        return answer

    def install(self, qid: str, text: str, nodes: list[str] | None = None) -> TraceQuery:
        """Install query ``qid`` on every node (or those of ``nodes``) (rule 2); returns it parsed."""
        query = parse(text)
        for node in self.urls if nodes is None else nodes:
            self._request(node, "PUT", f"/trace/queries/{qid}", text.encode())
        return query

    def remove(self, qid: str) -> dict[str, bool]:
        """Remove query ``qid`` from every node; which nodes had it."""
        removed = {}
        for node in self.urls:
            answer = self._request(node, "DELETE", f"/trace/queries/{qid}")
            if answer is not None:
                removed[node] = answer["removed"]
        return removed

    def queries(self) -> dict[str, dict[str, str]]:
        """Node -> its installed queries ``{id: text}``."""
        out = {}
        for node in self.urls:
            answer = self._request(node, "GET", "/trace/queries")
            if answer is not None:
                out[node] = answer["queries"]
        return out

    def poll(self) -> list[tuple[str, int, dict[str, list]]]:
        """New reports from every node since the last poll: ``(node, taken at µs, {query id: table})``."""
        new = []
        for node in self.urls:
            answer = self._request(node, "GET", f"/trace/results?after={self._after[node]}")
            if answer is None:
                continue
            if answer["seq"] < self._after[node]:
                self._after[node] = 0                  # the node restarted: its numbering starts again
                answer = self._request(node, "GET", "/trace/results?after=0") or {"reports": [], "seq": 0}
            for report in answer["reports"]:
                new.append((node, report["at_us"], report["tables"]))
            if answer.get("overflow"):
                self.overflow[node] = answer["overflow"]
            self._after[node] = answer["seq"]
        return new

    def state(self) -> dict[str, dict]:
        """Node -> what it hosts, in which states, and its statistics (unreachable nodes left out)."""
        out = {}
        for node in self.urls:
            answer = self._request(node, "GET", "/trace/state")
            if answer is not None:
                out[node] = answer
        return out


class Answers:
    """Reports of every query, merged into answers over a window (rule 3)."""

    def __init__(self):
        self.queries: dict[str, TraceQuery] = {}
        self.reports: list[tuple[int, str, dict[str, list]]] = []

    def watch(self, qid: str, query: TraceQuery) -> None:
        self.queries[qid] = query

    def forget(self, qid: str) -> None:
        self.queries.pop(qid, None)

    def add(self, reports: list[tuple[str, int, dict[str, list]]]) -> None:
        for node, at_us, tables in reports:
            self.reports.append((at_us, node, tables))

    def trim(self, before_us: int) -> None:
        """Forget reports taken before ``before_us``."""
        self.reports = [r for r in self.reports if r[0] >= before_us]

    def rows(self, qid: str, since_us: int | None = None) -> list[dict[str, Any]]:
        """The answer to ``qid`` over the reports taken at or after ``since_us`` (all: None)."""
        query = self.queries[qid]
        tables = [tables[qid] for at, _, tables in self.reports
                  if qid in tables and (since_us is None or at >= since_us)]
        return finish(query, merge(query, tables))


def now_us() -> int:
    return time.time_ns() // 1000


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


__all__ = ["Answers", "ClusterTrace", "TraceQueryError", "now_us"]
