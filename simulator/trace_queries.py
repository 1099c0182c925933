"""Trace queries over a simulated run (``replicast simulate --trace-query``; docs/tracing.md).

The simulator drives the same node cores as the asyncio runtime, so the same tracepoints answer the
same queries (engine/core/tracepoints.py).  Rules of this module:

1. Every query is installed on every node's core before the run starts, and again on a core that
   lacks it (a node restarted by a scenario's faults starts a new core), at each collection.
2. Every simulated second each core's partial tables are taken and merged into the run's
   (engine/core/trace_aggregate.py rule 2), as a live node reports every second: a table keeps at
   most ``MAX_GROUPS`` groups per second on each node, the events of further groups are counted.
3. The answer of a query is its merged table over the whole run, as rows of its ``Select``
   (:func:`~engine.core.trace_aggregate.finish`), with the count of events past the group limit.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from replicast.engine.node import (TraceQuery, finish_trace_table, install_trace_query, installed_trace_queries,
                                   merge_trace_tables, parse_trace_query as parse, take_trace_tables)

if TYPE_CHECKING:
    from replicast.simulator.driver import Simulation

#: Simulated µs between two collections of the cores' partial tables (rule 2).
EVERY_US = 1_000_000


def trace_queries(texts: Sequence[str]) -> list[tuple[str, str]]:
    """``--trace-query`` arguments (a file holding a query, or the query's text) as ``(id, text)``,
    each parsed here so that a bad one is one line before any run starts (TraceQueryError)."""
    queries = []
    for i, given in enumerate(texts, 1):
        try:
            is_file = "\n" not in given and Path(given).is_file()
        except OSError:                                # a query's text, too long for a file's name
            is_file = False
        text = Path(given).read_text(encoding="utf-8").strip() if is_file else given
        parse(text)
        queries.append((f"q{i}", text))
    return queries


class TraceCollector:
    """The queries of one simulated run, installed on its cores and their tables merged (rules 1–3)."""

    def __init__(self, sim: "Simulation", queries: Sequence[tuple[str, str]]):
        self.sim = sim
        self.queries: dict[str, TraceQuery] = {qid: parse(text) for qid, text in queries}
        self.tables: dict[str, list] = {qid: [] for qid in self.queries}     # merged so far, as plain data
        self.overflow = {qid: 0 for qid in self.queries}
        self._install()
        sim.env.process(self._every_second())

    def _install(self) -> None:
        for node in self.sim.nodes.values():
            have = installed_trace_queries(node.core)
            for qid, query in self.queries.items():
                if qid not in have:
                    install_trace_query(node.core, qid, query)

    def _every_second(self):
        while True:
            yield self.sim.env.timeout(EVERY_US)
            self.collect()

    def collect(self) -> None:
        """Take every core's partial tables into the run's (rule 2)."""
        for node in self.sim.nodes.values():
            tracer = node.core.tracer
            for qid, table in take_trace_tables(node.core).items():
                if table:
                    merged = merge_trace_tables(self.queries[qid], [self.tables[qid], table])
                    self.tables[qid] = [[list(key), states] for key, states in merged.items()]
            if tracer is not None:
                for qid, n in tracer.overflow.items():
                    self.overflow[qid] += n
                tracer.overflow.clear()
        self._install()

    def answers(self) -> list[dict[str, Any]]:
        """Each query's rows over the run (rule 3), after a last collection."""
        self.collect()
        return [{"id": qid, "query": query.text,
                 "rows": finish_trace_table(query, merge_trace_tables(query, [self.tables[qid]])),
                 "events_past_group_limit": self.overflow[qid]} for qid, query in self.queries.items()]
