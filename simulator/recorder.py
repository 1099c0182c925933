"""What a simulation run records: deliveries, bandwidth and network cost (DESIGN.md §8, §V-A).

* ``deliveries.parquet`` — one row per record delivered to an application: ``app, ts, arrival,
  latency_us`` (§VI-B: arrival − ts) and ``path``: the replicas the record came through on the
  way that delivered it first, entry point to application, as ``replica@node > … > app#0@node``
  (the batches' provenance, :mod:`engine.messages` rule 5: each replica's output batch carries the
  path of the input batch that caused it, so a path is the chain of first arrivals).
* ``bandwidth.parquet`` — per time bucket and stream replica: records, bytes, and the network cost
  ``rate × latency`` (records/s × one-way ms, §V-A); control traffic (acks, heartbeats) is counted
  per bucket under ``stream = "control"``.

Delivery columns are kept as compact arrays (int64 times; ``app`` and ``path`` as codes into small
dictionaries), about 24 bytes per delivered record; the bandwidth rows of a time bucket are compact
arrays too once the bucket is over (36 bytes per stream replica and bucket).  Given a ``sink``
directory, the recorder streams both tables there (``pyarrow.parquet.ParquetWriter``, a row group
per :data:`SPILL_ROWS` rows) as they are made, so its memory is bounded by that, not by the run's
duration; without one it keeps them and builds the tables at the end (small runs, tests).

``keep = (begin, end)`` (a time segment, :mod:`simulator.segments`) keeps only deliveries whose
``ts`` and bandwidth buckets whose start fall in ``[begin, end)``.  :attr:`Recorder.totals` sums
what was kept (counts per application, records, bytes and cost per stream kind) for the summary.
"""

from __future__ import annotations

from array import array
from collections import Counter
from itertools import repeat
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from mypy_extensions import mypyc_attr

from replicast.engine.messages import Ack, Batch
from replicast.engine.node import DeadLetter, Delivered
from replicast.engine.frame_size import ack_frame_size, batch_frame_size
from replicast.engine.wire import ack_header_size, batch_header_size, encode
from replicast.operators.record import CLOSED
from replicast.simulator import latency as latency_stats
from replicast.simulator.driver import Observer

#: Rows of a table the streaming recorder holds before writing them out (~24 MB of deliveries).
SPILL_ROWS = 1 << 20
DELIVERY_SCHEMA = pa.schema([("app", pa.dictionary(pa.int32(), pa.string())), ("ts", pa.int64()),
                             ("arrival", pa.int64()), ("latency_us", pa.int64()),
                             ("path", pa.dictionary(pa.int32(), pa.string()))])
BANDWIDTH_SCHEMA = pa.schema([("t_us", pa.int64()), ("stream", pa.dictionary(pa.int32(), pa.string())),
                              ("records", pa.int64()), ("bytes", pa.int64()), ("cost", pa.float64())])


#: How many distinct dead-letter reasons a run names in its summary.
DEAD_LETTER_REASONS = 10


@mypyc_attr(allow_interpreted_subclasses=True)   # benchmarks/simulator.py counts through a subclass
class Recorder(Observer):
    """Collects a run's outputs; ``done`` (a SimPy event) fires when every application is closed."""

    def __init__(self, applications: list[str], network, bucket_us: int = 60_000_000, keep_records: bool = False,
                 done=None, *, sink: Path | None = None, keep: tuple[int, int] | None = None):
        self.apps = applications
        self.sink, self.keep = sink, keep
        self._writers: dict[str, pq.ParquetWriter] = {}
        self._closed = False
        #: What was kept so far: deliveries per application, latency histogram, and per stream
        #: kind ("data" or "control") records, bytes and cost (records/s × one-way ms, summed).
        self.totals = Totals()
        self.network = network
        self.bucket_us = bucket_us
        self.keep_records = keep_records
        self.outputs: dict[str, list] = {app: [] for app in applications}
        self.app_col = array("i")          # codes into self._apps / self._vias
        self.ts_col = array("q")
        self.arrival_col = array("q")
        self.path_col = array("i")
        self._apps: dict[str, int] = {}
        self._paths: dict[tuple[str, ...], int] = {}
        self.closed: set[str] = set()
        self.done = done
        self.dead_letters = 0
        #: Why input items were rejected, per stream ("stream: reason" -> count), the first
        #: DEAD_LETTER_REASONS distinct ones; the rest are counted under "other reasons".
        self.dead_letter_reasons: Counter[str] = Counter()
        # The current bucket's traffic: id(stream replica) or "control" -> ([records, bytes,
        # record-weighted one-way ms], batch header size); earlier buckets' rows are in the columns.
        self._bucket = -1
        self._row: dict = {}
        self._streams: dict[int, Any] = {}
        self._header: dict[int, int] = {}  # id(stream) -> wire.batch_header_size
        self._acked: dict[int, tuple[Any, int]] = {}   # id(stream) -> (stream, wire.ack_header_size)
        # The last batch sized: its records object, offset, epoch and frame size less the header.
        self._body_of: Any = None
        self._body_at, self._body_epoch, self._body = -1, -1, 0
        self._code: dict[Any, int] = {}    # id(stream) or "control" -> code in stream_col
        self.bucket_col, self.stream_col = array("q"), array("i")
        self.records_col, self.bytes_col, self.cost_col = array("q"), array("q"), array("d")
        #: The placement coordinator's decisions: (time, kind, reason, what it names, coordinator).
        self.decisions: list[tuple[int, str, str, str, str]] = []

    # -- Observer -------------------------------------------------------------------------------
    def delivered(self, node: str, event: Delivered) -> None:
        n = len(event.records)
        if n:
            app = self._apps.setdefault(event.app, len(self._apps))
            path = self._paths.setdefault(event.path, len(self._paths))
            self.app_col.extend(repeat(app, n))
            self.ts_col.extend([r[0] for r in event.records])
            self.arrival_col.extend(repeat(event.now, n))
            self.path_col.extend(repeat(path, n))
            if self.sink is not None and len(self.ts_col) >= SPILL_ROWS:
                self._spill_deliveries()
            if self.keep_records:
                self.outputs[event.app].extend(event.records)
        if event.punctuation == CLOSED and event.app not in self.closed:
            self.closed.add(event.app)
            if self.done is not None and len(self.closed) == len(self.apps) and not self.done.triggered:
                self.done.succeed()

    def sent(self, src: str, dst: str, messages: list, now: int, delay: int | None) -> None:
        bucket = now // self.bucket_us
        if bucket != self._bucket:
            self._flush()
            self._bucket = bucket
        row, delay = self._row, delay or 0
        for message in messages:
            if type(message) is Batch:
                # Keyed by identity: the core reuses one StreamReplica object per route, and hashing
                # the dataclass is the costliest step here.
                key = id(message.stream)
                entry = row.get(key)
                if entry is None:
                    if key not in self._streams:    # kept alive here, so the id stays this stream's
                        self._streams[key] = message.stream
                        self._header[key] = batch_header_size(message.stream)
                    entry = row[key] = ([0, 0, 0.0], self._header[key])
                counts, header = entry
                records = message.records
                if records is not self._body_of or message.offset != self._body_at or message.epoch != self._body_epoch:
                    # The batches of one emit (one per remote stream replica) differ only in their
                    # stream: one frame body size serves them all (the same records object at the
                    # same offset and epoch is the same log item, punctuation and path included).
                    self._body_of, self._body_at, self._body_epoch = records, message.offset, message.epoch
                    self._body = batch_frame_size(0, message)
                counts[1] += header + self._body
                n = len(records)
                if n:
                    counts[0] += n
                    counts[2] += n * delay / 1000.0
            else:
                entry = row.get("control")
                if entry is None:
                    entry = row["control"] = ([0, 0, 0.0], 0)
                if type(message) is Ack:        # most control messages: sized as batches are, not encoded
                    known = self._acked.get(id(message.stream))
                    if known is None:           # the stream kept alive with its size, so the id stays its
                        known = self._acked[id(message.stream)] = (message.stream, ack_header_size(message.stream))
                    entry[0][1] += ack_frame_size(known[1], message)
                else:
                    entry[0][1] += len(encode(message))

    def dead_letter(self, node: str, event: DeadLetter) -> None:
        self.dead_letters += 1
        reason = f"{event.stream}: {event.reason}"
        if reason not in self.dead_letter_reasons and len(self.dead_letter_reasons) >= DEAD_LETTER_REASONS:
            reason = "other reasons"
        self.dead_letter_reasons[reason] += 1

    def decided(self, node: str, decision: Any, now: int) -> None:
        self.decisions.append((now, type(decision).__name__.lower(), decision.reason, decision.target, node))

    # -- tables ---------------------------------------------------------------------------------
    def deliveries(self) -> pa.Table:
        """The kept deliveries (read back from the sink once :meth:`close` has written them)."""
        if self.sink is not None:
            self.close()
            return _read(self.sink / "deliveries.parquet", DELIVERY_SCHEMA)
        return self._delivery_table()

    def _delivery_table(self) -> pa.Table:
        """The buffered delivery rows as a table (only those in the ``keep`` window)."""
        ts = pa.array(np.frombuffer(self.ts_col, np.int64))
        arrival = pa.array(np.frombuffer(self.arrival_col, np.int64))
        table = pa.table({"app": _dictionary(self.app_col, self._apps), "ts": ts,
                          "arrival": arrival, "latency_us": pc.subtract(arrival, ts),
                          "path": _dictionary(self.path_col, {" > ".join(p): i for p, i in self._paths.items()})})
        return _within(table, "ts", self.keep)

    def _spill_deliveries(self) -> None:
        table = self._delivery_table()
        self.totals.add_deliveries(table)
        self._write("deliveries.parquet", table, DELIVERY_SCHEMA)
        # New arrays, not cleared ones: the table's columns still view the old ones' buffers.
        self.app_col, self.ts_col, self.arrival_col, self.path_col = array("i"), array("q"), array("q"), array("i")

    def _flush(self) -> None:
        """Move the current bucket's rows into the columns."""
        code = self._code
        for key, (counts, _) in self._row.items():
            self.bucket_col.append(self._bucket)
            self.stream_col.append(code.setdefault(key, len(code)))
            self.records_col.append(counts[0])
            self.bytes_col.append(counts[1])
            self.cost_col.append(counts[2])
        self._row = {}
        if self.sink is not None and len(self.bucket_col) >= SPILL_ROWS:
            self._spill_bandwidth()

    def bandwidth(self) -> pa.Table:
        """One row per time bucket and stream replica that carried something, by time then name
        (read back from the sink once :meth:`close` has written it)."""
        if self.sink is not None:
            self.close()
            return _read(self.sink / "bandwidth.parquet", BANDWIDTH_SCHEMA)
        self._flush()
        self._bucket = -1
        return self._bandwidth_table()

    def _bandwidth_table(self) -> pa.Table:
        """The finished buckets' rows (only those in the ``keep`` window), by time then name."""
        code = self._code
        bucket = np.frombuffer(self.bucket_col, np.int64)
        stream = np.frombuffer(self.stream_col, np.int32)
        names = np.array([key if key == "control" else _stream_name(self._streams[key]) for key in code] or [""],
                         dtype=object)
        rank = np.argsort(np.argsort(names, kind="stable"), kind="stable")    # code -> place in name order
        order = np.lexsort((rank[stream], bucket))
        seconds = self.bucket_us / 1e6
        table = pa.table({
            "t_us": pa.array(bucket[order] * self.bucket_us),
            "stream": pa.array(names[stream[order]], pa.string()).dictionary_encode(),
            "records": pa.array(np.frombuffer(self.records_col, np.int64)[order]),
            "bytes": pa.array(np.frombuffer(self.bytes_col, np.int64)[order]),
            "cost": pa.array(np.frombuffer(self.cost_col, np.float64)[order] / seconds),
        })
        return _within(table, "t_us", self.keep)

    def _spill_bandwidth(self) -> None:
        table = self._bandwidth_table()
        self.totals.add_bandwidth(table)
        self._write("bandwidth.parquet", table, BANDWIDTH_SCHEMA)
        self.bucket_col, self.stream_col = array("q"), array("i")
        self.records_col, self.bytes_col, self.cost_col = array("q"), array("q"), array("d")

    def _write(self, name: str, table: pa.Table, schema: pa.Schema) -> None:
        writer = self._writers.get(name)
        if writer is None:
            self.sink.mkdir(parents=True, exist_ok=True)
            writer = self._writers[name] = pq.ParquetWriter(self.sink / name, schema, compression="zstd")
        if table.num_rows:
            writer.write_table(table.cast(schema))

    def close(self) -> None:
        """Write what is left and close the sink's files (both exist afterwards, maybe empty).
        Without a sink: account the kept rows in :attr:`totals`."""
        if self._closed:
            return
        self._closed = True
        self._flush()
        self._bucket = -1
        if self.sink is None:
            self.totals.add_deliveries(self._delivery_table())
            self.totals.add_bandwidth(self._bandwidth_table())
            return
        self._spill_deliveries()
        self._spill_bandwidth()
        for name, schema in (("deliveries.parquet", DELIVERY_SCHEMA), ("bandwidth.parquet", BANDWIDTH_SCHEMA)):
            self._write(name, schema.empty_table(), schema)
            self._writers.pop(name).close()

    def write(self, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        pq.write_table(self.deliveries(), out_dir / "deliveries.parquet")
        pq.write_table(self.bandwidth(), out_dir / "bandwidth.parquet")


class Totals:
    """Sums over the kept rows, enough for a run's summary without reading its tables again."""

    def __init__(self):
        self.per_app: dict[str, int] = {}
        self.histogram = latency_stats.Histogram()
        self.latency_sum = 0            # µs, for the mean
        self.latency_max: int | None = None
        self.data = [0, 0, 0.0]         # records, bytes, cost of data streams
        self.control_bytes = 0
        self.cost_by_bucket: dict[int, float] = {}     # bucket start (µs) -> network cost (§V-A)

    @property
    def delivered(self) -> int:
        return sum(self.per_app.values())

    def add_deliveries(self, table: pa.Table) -> None:
        for row in pc.value_counts(table.column("app")).to_pylist():
            self.per_app[row["values"]] = self.per_app.get(row["values"], 0) + row["counts"]
        latency = table.column("latency_us").to_numpy()
        if len(latency):
            self.histogram.add(latency)
            self.latency_sum += int(latency.sum())
            self.latency_max = max(int(latency.max()), self.latency_max or 0)

    def add_bandwidth(self, table: pa.Table) -> None:
        control = pc.equal(table.column("stream").cast(pa.string()), "control")
        data = table.filter(pc.invert(control))
        self.data[0] += pc.sum(data.column("records")).as_py() or 0
        self.data[1] += pc.sum(data.column("bytes")).as_py() or 0
        self.data[2] += pc.sum(data.column("cost")).as_py() or 0.0
        if data.num_rows:
            for row in data.group_by("t_us").aggregate([("cost", "sum")]).to_pylist():
                t = row["t_us"]
                self.cost_by_bucket[t] = self.cost_by_bucket.get(t, 0.0) + row["cost_sum"]
        self.control_bytes += pc.sum(table.filter(control).column("bytes")).as_py() or 0


def _within(table: pa.Table, column: str, keep: tuple[int, int] | None) -> pa.Table:
    if keep is None:
        return table
    values = table.column(column)
    return table.filter(pc.and_(pc.greater_equal(values, keep[0]), pc.less(values, keep[1])))


def _read(path: Path, schema: pa.Schema) -> pa.Table:
    return pq.read_table(path).cast(schema) if path.is_file() else schema.empty_table()


def _dictionary(codes: array, values: dict[str, int]) -> pa.DictionaryArray:
    """A string column from codes; a value gets its code at its first delivered row, so this is
    what ``dictionary_encode`` of the plain strings gives."""
    return pa.DictionaryArray.from_arrays(pa.array(np.frombuffer(codes, np.int32)), pa.array(list(values), pa.string()))


def _stream_name(stream: Any) -> str:
    return stream if isinstance(stream, str) else f"{stream.source}>{stream.target}"
