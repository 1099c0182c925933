"""Where the timing tier's deliveries go: a configuration's table (streamed to Parquet, or kept),
its summary, and the comparison with the reference tier's deliveries (docs/simulator.md)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from replicast.operators.record import Record
from replicast.simulator.timing_links import NEVER

DELIVERY_SCHEMA = pa.schema([("app", pa.dictionary(pa.int32(), pa.string())), ("ts", pa.int64()),
                             ("arrival", pa.int64()), ("latency_us", pa.int64())])


class Sink:
    """One configuration's deliveries: streamed to ``directory/deliveries.parquet`` (or kept, for
    tests and checks), counted in a :class:`~simulator.recorder.Totals` for the summary."""

    def __init__(self, config: Any, directory: Any = None, keep_records: bool = False, keep: bool = True,
                 thresholds_us: tuple[int, ...] = ()):
        from replicast.simulator.recorder import Totals

        self.config, self.directory, self.keep_records = config, directory, keep_records
        self.totals = Totals()
        self.tables: list[pa.Table] = []
        self.outputs: dict[str, list[Record]] = {}
        self.wall = 0.0
        #: without a directory, keep the tables (False: only the counts and histogram: a month's
        #: deliveries of 100 servers are billions of rows)
        self.keep = keep
        #: latency threshold (µs) -> deliveries above it, counted exactly
        self.exceed = {t: 0 for t in thresholds_us}
        self._writer = None
        if directory is not None:
            import pyarrow.parquet as pq

            directory.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(directory / "deliveries.parquet", DELIVERY_SCHEMA, compression="zstd")

    def add(self, query: Any, window: Any, arrivals: dict[str, np.ndarray]) -> None:
        if self._writer is None and not self.keep and not self.keep_records:
            self._count(query, window, arrivals)
            return
        parts = []
        for app, arrival in arrivals.items():
            feed = window.rows[query.applications[app].input]
            got = (arrival < NEVER) & (feed.ts >= window.begin) & (feed.ts < window.until)
            if self.keep_records:
                self.outputs.setdefault(app, []).extend(r for r, ok in zip(feed.records, got.tolist()) if ok)
            ts = feed.ts[got]
            parts.append(pa.table({"app": pa.DictionaryArray.from_arrays(np.zeros(len(ts), np.int32), [app]),
                                   "ts": ts, "arrival": arrival[got], "latency_us": arrival[got] - ts}))
        table = pa.concat_tables(parts, promote_options="permissive").unify_dictionaries().combine_chunks() \
            if parts else DELIVERY_SCHEMA.empty_table()
        self.totals.add_deliveries(table)
        if self.exceed:
            latency = table.column("latency_us").to_numpy()
            for t in self.exceed:
                self.exceed[t] += int(np.count_nonzero(latency > t))
        if self._writer is not None:
            self._writer.write_table(table.cast(DELIVERY_SCHEMA))
        elif self.keep:
            self.tables.append(table)

    def _count(self, query: Any, window: Any, arrivals: dict[str, np.ndarray]) -> None:
        """:meth:`add` when no row is kept: the same counts, histogram and sums, without a table."""
        totals, latencies = self.totals, []
        for app, arrival in arrivals.items():
            feed = query.applications[app].input
            got = arrival < NEVER
            got &= window.kept(feed)
            latency = arrival - window.rows[feed].ts
            latency = latency[got]
            if len(latency):
                totals.per_app[app] = totals.per_app.get(app, 0) + len(latency)
                latencies.append(latency)
        latency = np.concatenate(latencies) if latencies else np.empty(0, np.int64)
        if len(latency):
            totals.histogram.add(latency)
            totals.latency_sum += int(latency.sum())
            totals.latency_max = max(int(latency.max()), totals.latency_max or 0)
        for t in self.exceed:
            self.exceed[t] += int(np.count_nonzero(latency > t))

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def deliveries(self) -> pa.Table:
        if self.directory is not None:
            import pyarrow.parquet as pq

            return pq.read_table(self.directory / "deliveries.parquet")
        return pa.concat_tables([t.cast(DELIVERY_SCHEMA) for t in self.tables]) if self.tables \
            else DELIVERY_SCHEMA.empty_table()

    def latency_columns(self):
        if self.directory is None:
            yield self.deliveries().column("latency_us").to_numpy()
            return
        import pyarrow.parquet as pq

        with pq.ParquetFile(self.directory / "deliveries.parquet") as file:
            for group in range(file.num_row_groups):
                yield file.read_row_group(group, columns=["latency_us"]).column(0).to_numpy()

    def summary(self, prepared: Any) -> dict[str, Any]:
        from replicast.simulator.run import latency_summary

        totals = self.totals
        return {"kmax": self.config.kmax, "tier": "timing", "deployment": self.config.deployment,
                "simulated_s": (prepared.end - prepared.start) / 1e6, "wall_s": round(self.wall, 3),
                "delivered": totals.delivered, "per_app": dict(sorted(totals.per_app.items())),
                "latency_ms": latency_summary(totals, self.latency_columns()), "placement": self.config.placement,
                # as the reference tier's summary: records between servers, Σ records/s × one-way ms
                "records_sent": self.config.sent[0],
                "network_cost": round(self.config.sent[1] / 1e3 / ((prepared.end - prepared.start) / 1e6), 3)}


# -- checking against the reference tier -----------------------------------------------------------

def arrivals(outputs: dict[str, list[Record]], table: pa.Table) -> dict[tuple[str, Record], list[int]]:
    """(application, record) → its sorted arrival times, from a deliveries table and the records in
    the table's row order per application (a reference run with ``keep_records``, or a timing run)."""
    got: dict[tuple[str, Record], list[int]] = {}
    position: dict[str, int] = {}
    for app, arrival in zip(table.column("app").to_pylist(), table.column("arrival").to_numpy().tolist()):
        i = position.get(app, 0)
        position[app] = i + 1
        got.setdefault((app, outputs[app][i]), []).append(arrival)
    return {key: sorted(value) for key, value in got.items()}


def differences(reference: Any, timing: Any) -> tuple[np.ndarray, int]:
    """Per delivery of both tiers, timing − reference arrival (µs), and how many deliveries one tier
    has that the other has not (0 when both delivered the same records)."""
    expected = arrivals(reference.recorder.outputs, reference.recorder.deliveries())
    got = arrivals(timing.outputs, timing.deliveries)
    unmatched = sum(abs(len(got.get(key, [])) - len(expected.get(key, []))) for key in expected.keys() | got.keys())
    diff = [np.subtract(got[key][:n], expected[key][:n]) for key in expected.keys() & got.keys()
            for n in [min(len(got[key]), len(expected[key]))]]
    return (np.concatenate(diff) if diff else np.empty(0, np.int64)), unmatched
