"""Latencies of finished runs, from whatever they wrote (for ``replicast plot latency``).

A path is one run, or several:

* a simulated run's directory ``k<K>/`` (``deliveries.parquet`` + ``summary.json``), or the
  directory of a whole ``replicast simulate`` (its ``summary.json`` lists the runs: one run each);
* a Parquet file with ``latency_us`` (and ``arrival``), or ``ts`` and ``arrival`` columns;
* a JSON-lines file written by a node's ``FileSink`` (``{"app", "ts", fields…, "arrival"}``);
* an MQTT capture of ``replicast/out/#`` with receive times: ``mosquitto_sub -F %J`` (or ``%j``)
  lines ``{"tst", "topic", "payload"}``, or ``mosquitto_sub -F '%U %t %p'`` lines
  ``UNIX_TIME TOPIC PAYLOAD``; a record's latency is receive time − ts;
* a directory of such JSON-lines files (a live cluster's output directory): one run.

Labels come from the run's summary (scenario, kmax, bandwidth and cost ratios) or, for live
outputs, from the file or directory name.  Bad input is one :class:`PlotError` line naming the
file, line and what was expected.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from replicast.experiments.latency import LatencyRun
from replicast.operators.errors import ReplicastError

_UNIX_LINE = re.compile(r"^(\d+(?:\.\d+)?) (\S+) (.*)$")


class PlotError(ReplicastError):
    """A run cannot be read for plotting."""


def load_runs(path: Path) -> list[LatencyRun]:
    """The run(s) at ``path``."""
    if path.is_dir():
        if (path / "deliveries.parquet").is_file():
            return [_simulated(path)]
        summary = _json(path / "summary.json") if (path / "summary.json").is_file() else None
        if summary is not None and isinstance(summary.get("runs"), list):
            return [_simulated(path / f"k{run['kmax']}") for run in summary["runs"]]
        files = sorted(path.glob("*.jsonl"))
        if not files:
            raise PlotError(f"{path}: no deliveries.parquet, summary.json or *.jsonl here (see 'replicast plot "
                            "latency --help')")
        parts = [_json_lines(f) for f in files]
        return [LatencyRun(path.name, np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                           str(path))]
    if not path.is_file():
        raise PlotError(f"{path}: no such file or directory")
    if path.suffix == ".parquet":
        if path.name == "deliveries.parquet":
            return [_simulated(path.parent)]
        latency, arrival = _parquet(path)
        return [LatencyRun(path.stem, latency, arrival, str(path))]
    latency, arrival = _json_lines(path)
    return [LatencyRun(path.stem, latency, arrival, str(path))]


def _simulated(run_dir: Path) -> LatencyRun:
    latency, arrival = _parquet(run_dir / "deliveries.parquet")
    summary = _json(run_dir / "summary.json") if (run_dir / "summary.json").is_file() else {}
    label = run_dir.parent.name + "/" + run_dir.name
    parent = run_dir.parent / "summary.json"
    kmax = summary.get("kmax")
    if kmax is not None:
        scenario, ratios = run_dir.parent.name, ""
        if parent.is_file():
            whole = _json(parent)
            scenario = Path(str(whole.get("scenario", scenario))).stem
            for run in whole.get("runs", []):
                if run.get("kmax") == kmax and run.get("bandwidth_ratio") is not None:
                    ratios = f" ({run['bandwidth_ratio']:.2f}x, {run['cost_ratio']:.2f}x)"
        label = f"{scenario} kmax = {kmax}{ratios}"
    return LatencyRun(label, latency, arrival, str(run_dir), summary)


def _parquet(path: Path) -> tuple[np.ndarray, np.ndarray | None]:
    if not path.is_file():
        raise PlotError(f"{path}: missing")
    try:
        columns = set(pq.read_schema(path).names)
    except Exception as error:
        raise PlotError(f"{path}: not a Parquet file ({error})") from None
    if "latency_us" in columns:
        table = pq.read_table(path, columns=["latency_us", *(["arrival"] if "arrival" in columns else [])])
        arrival = table.column("arrival").to_numpy() if "arrival" in columns else None
        return table.column("latency_us").to_numpy(), arrival
    if {"ts", "arrival"} <= columns:
        table = pq.read_table(path, columns=["ts", "arrival"])
        arrival = table.column("arrival").to_numpy()
        return arrival - table.column("ts").to_numpy(), arrival
    raise PlotError(f"{path}: needs a latency_us column, or ts and arrival (µs); has {sorted(columns)}")


def _json(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise PlotError(f"{path}: not readable JSON ({error})") from None
    if not isinstance(doc, dict):
        raise PlotError(f"{path}: expected a JSON object")
    return doc


def _json_lines(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Latencies and arrival times (µs) of the records in a FileSink file or an MQTT capture."""
    ts, arrival = [], []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise PlotError(f"{path}: cannot read ({error})") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        unix = _UNIX_LINE.match(line)
        if unix is not None:                                     # mosquitto_sub -F '%U %t %p'
            received, payload = round(float(unix.group(1)) * 1e6), _payload(unix.group(3), where)
            _add_items(payload, received, ts, arrival, where)
            continue
        try:
            item = json.loads(line)
        except ValueError:
            raise PlotError(f"{where}: neither JSON nor a 'mosquitto_sub -F \"%U %t %p\"' line: {line[:80]!r}") from None
        if isinstance(item, dict) and "tst" in item and "payload" in item:   # mosquitto_sub -F %J / %j
            payload = item["payload"]
            _add_items(_payload(payload, where) if isinstance(payload, str) else payload, _iso_us(item["tst"], where),
                       ts, arrival, where)
        elif isinstance(item, dict) and "ts" in item:           # FileSink
            if "arrival" not in item:
                raise PlotError(f"{where}: a record without \"arrival\" (µs): latency needs the delivery time; "
                                "node outputs have it, 'replicast replay' outputs do not")
            ts.append(_int(item["ts"], "ts", where))
            arrival.append(_int(item["arrival"], "arrival", where))
        else:
            raise PlotError(f"{where}: expected a FileSink record {{\"ts\", …, \"arrival\"}} or a mosquitto_sub "
                            f"%J line {{\"tst\", \"payload\"}}, got {line[:80]!r}")
    if not ts:
        raise PlotError(f"{path}: no records")
    ts_array, arrival_array = np.array(ts, dtype=np.int64), np.array(arrival, dtype=np.int64)
    return arrival_array - ts_array, arrival_array


def _payload(text: str, where: str):
    try:
        return json.loads(text)
    except ValueError:
        raise PlotError(f"{where}: the payload is not JSON: {text[:80]!r}") from None


def _add_items(payload, received: int, ts: list, arrival: list, where: str) -> None:
    """An application payload: a list of records ``{"ts", …}`` and maybe a punctuation."""
    items = payload if isinstance(payload, list) else [payload]
    for item in items:
        if isinstance(item, dict) and "ts" in item:
            ts.append(_int(item["ts"], "ts", where))
            arrival.append(received)
        elif not (isinstance(item, dict) and "punctuation" in item):
            raise PlotError(f"{where}: expected records {{\"ts\", …}} or a punctuation in the payload, got {item!r:.80}")


def _iso_us(text, where: str) -> int:
    # mosquitto_sub 2.0 writes UTC as "…08.445959Z+0000": the zone twice
    text = re.sub(r"Z(?=[+-]\d\d:?\d\d$)", "", str(text))
    try:
        return round(datetime.fromisoformat(text).timestamp() * 1e6)
    except ValueError:
        raise PlotError(f"{where}: \"tst\" is not an ISO-8601 time: {text!r}") from None


def _int(value, key: str, where: str) -> int:
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)                       # mosquitto_sub -F %J re-encodes numbers, large ones as doubles
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlotError(f"{where}: \"{key}\" must be an integer (µs), got {value!r}")
    return value
