"""What a simulation run records: deliveries, bandwidth and network cost (issue 5 §4, §V-A).

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
arrays too once the bucket is over (36 bytes per stream replica and bucket, not ~250 in a dict of
lists).  A month of sim-fig1 at kmax 3 (~155 M deliveries, ~14 M bandwidth rows) thus needs about
4.3 GB for its outputs; the arrays become Arrow tables once, at the end.
"""

from __future__ import annotations

from array import array
from itertools import repeat
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from engine.messages import Batch
from engine.node import DeadLetter, Delivered
from engine.wire import batch_frame_size, batch_header_size, encode
from operators.record import CLOSED
from simulator.driver import Observer


class Recorder(Observer):
    """Collects a run's outputs; ``done`` (a SimPy event) fires when every application is closed."""

    def __init__(self, applications: list[str], network, bucket_us: int = 60_000_000, keep_records: bool = False,
                 done=None):
        self.apps = applications
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
        # The current bucket's traffic: id(stream replica) or "control" -> ([records, bytes,
        # record-weighted one-way ms], batch header size); earlier buckets' rows are in the columns.
        self._bucket, self._row = -1, {}
        self._streams: dict[int, Any] = {}
        self._header: dict[int, int] = {}  # id(stream) -> wire.batch_header_size
        self._code: dict[Any, int] = {}    # id(stream) or "control" -> code in stream_col
        self.bucket_col, self.stream_col = array("q"), array("i")
        self.records_col, self.bytes_col, self.cost_col = array("q"), array("q"), array("d")

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
                counts[1] += batch_frame_size(header, message)
                n = len(message.records)
                if n:
                    counts[0] += n
                    counts[2] += n * delay / 1000.0
            else:
                entry = row.get("control")
                if entry is None:
                    entry = row["control"] = ([0, 0, 0.0], 0)
                entry[0][1] += len(encode(message))

    def dead_letter(self, node: str, event: DeadLetter) -> None:
        self.dead_letters += 1

    # -- tables ---------------------------------------------------------------------------------
    def deliveries(self) -> pa.Table:
        ts = pa.array(np.frombuffer(self.ts_col, np.int64))
        arrival = pa.array(np.frombuffer(self.arrival_col, np.int64))
        return pa.table({"app": _dictionary(self.app_col, self._apps), "ts": ts,
                         "arrival": arrival, "latency_us": pc.subtract(arrival, ts),
                         "path": _dictionary(self.path_col, {" > ".join(p): i for p, i in self._paths.items()})})

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

    def bandwidth(self) -> pa.Table:
        """One row per time bucket and stream replica that carried something, by time then name."""
        code, row = self._code, self._row
        for key in row:                     # the current bucket's rows, without closing it
            code.setdefault(key, len(code))
        bucket = np.concatenate([np.frombuffer(self.bucket_col, np.int64), np.full(len(row), self._bucket, np.int64)])
        stream = np.concatenate([np.frombuffer(self.stream_col, np.int32),
                                 np.array([code[key] for key in row], np.int32)])
        columns = [np.concatenate([np.frombuffer(column, dtype), np.array([c[i] for c, _ in row.values()], dtype)])
                   for i, (column, dtype) in enumerate([(self.records_col, np.int64), (self.bytes_col, np.int64),
                                                        (self.cost_col, np.float64)])]
        names = np.array([key if key == "control" else _stream_name(self._streams[key]) for key in code] or [""],
                         dtype=object)
        rank = np.argsort(np.argsort(names, kind="stable"), kind="stable")    # code -> place in name order
        order = np.lexsort((rank[stream], bucket))
        seconds = self.bucket_us / 1e6
        return pa.table({
            "t_us": pa.array(bucket[order] * self.bucket_us),
            "stream": pa.array(names[stream[order]], pa.string()).dictionary_encode(),
            "records": pa.array(columns[0][order]),
            "bytes": pa.array(columns[1][order]),
            "cost": pa.array(columns[2][order] / seconds),
        })

    def write(self, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        pq.write_table(self.deliveries(), out_dir / "deliveries.parquet")
        pq.write_table(self.bandwidth(), out_dir / "bandwidth.parquet")


def _dictionary(codes: array, values: dict[str, int]) -> pa.DictionaryArray:
    """A string column from codes; a value gets its code at its first delivered row, so this is
    what ``dictionary_encode`` of the plain strings gives."""
    return pa.DictionaryArray.from_arrays(pa.array(np.frombuffer(codes, np.int32)), pa.array(list(values), pa.string()))


def _stream_name(stream: Any) -> str:
    return stream if isinstance(stream, str) else f"{stream.source}>{stream.target}"
