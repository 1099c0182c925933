"""Fig. 2 in the simulator (``replicast experiment fig2 --simulate``): one scenario per mode, built
from :mod:`experiments.fig2`'s setting, simulated in this process over the trace's delays.

No CPU cost is modelled (``processing_us`` all 0): the paper's Fig. 2 workload is light, and with
costs a replica's duplicate copies would make it a few µs slower than no replication per hop.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.compute as pc

from replicast.experiments.fig2 import APP, PLACEMENT, Settings, deliveries, servers, write_inputs
from replicast.experiments.fig2_workload import STREAMS


def scenario_document(settings: Settings, mode: str, names: dict[str, str]) -> dict:
    """The scenario (as a parsed TOML document) of one mode: roles replaced by trace node names."""
    return {
        "name": f"fig2-{mode}", "trace": settings.trace, "query": "query.toml", "servers": list(names.values()),
        "kmax": 2, "seed": 1, "start_s": settings.trace_time_s, "duration_s": settings.duration_s,
        "drain_s": settings.drain_s, "punctuation_ms": 500, "heartbeat_ms": settings.heartbeat_ms,
        "peer_timeout_ms": settings.peer_timeout_ms, "join_timeout_ms": settings.peer_timeout_ms, "mode": mode,
        "processing_us": {kind: 0 for kind in ("entry", "union", "filter", "map", "join", "aggregate",
                                               "count_aggregate", "application")},
        "deployment": {"kind": "manual", "applications": {APP: names["O"]},
                       "manual": {op: [names[r] for r in roles] for op, roles in PLACEMENT.items()}},
        "sources": [{"kind": "events", "events": "events.jsonl", "stream": s, "servers": [names["src"]]}
                    for s in STREAMS],
        "faults": [{"crash": names["W"], "at_s": settings.crash_s}],
    }


def run_modes(directory: Path, settings: Settings, progress: bool = True) -> pd.DataFrame:
    """Simulate every mode; all deliveries (:func:`experiments.fig2.deliveries`)."""
    from tqdm import tqdm

    from replicast.simulator.run import Prepared, run
    from replicast.simulator.scenario import parse_scenario

    write_inputs(directory, settings)
    names = servers(settings)
    frames = []
    for mode in tqdm(settings.modes, desc="fig2 (simulated)", unit="mode", disable=not progress):
        doc = scenario_document(settings, mode, names)
        (directory / f"scenario-{mode}.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        prepared = Prepared(parse_scenario(doc, directory / f"scenario-{mode}.toml"))
        result = run(prepared, 2, keep_records=True)
        table = result.recorder.deliveries()
        mine = table.filter(pc.equal(table.column("app"), APP))
        fields = [record[1:] for record in result.recorder.outputs[APP]]      # in delivery order, as the table
        frames.append(deliveries(mine.column("ts").to_numpy(), mine.column("arrival").to_numpy(), fields,
                                 prepared.start, mode))
        (directory / f"summary-{mode}.json").write_text(json.dumps(result.summary, indent=2, default=str) + "\n",
                                                        encoding="utf-8")
    return pd.concat(frames, ignore_index=True)
