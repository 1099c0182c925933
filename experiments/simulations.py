"""The simulations behind the experiments: the shipped Fig. 4 scenario with an experiment's changes,
run through ``replicast simulate``'s own machinery and kept for reuse.

Each distinct scenario (every field but ``kmax``) gets a directory ``OUT/runs/<deployment>-<digest>/``
holding ``replicast simulate``'s per-run files (``k<K>/deliveries.parquet``, ``bandwidth.parquet``,
``summary.json``) and ``scenario.json`` (the scenario simulated).  A kmax whose ``summary.json``
is already there is not simulated again, so ``replicast experiment all`` simulates Fig. 4's
min-cost runs once for Fig. 4 and Fig. 5, and a second invocation with the same ``--out`` only
redraws.  Delete ``OUT/runs`` (or pass ``--fresh``) after changing the code.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from replicast.examples import example_path
from replicast.operators.errors import ReplicastError

log = logging.getLogger("replicast.experiment")
#: The paper's Fig. 4 setting on the shipped Seattle trace (docs/simulator.md): every simulated
#: experiment starts from it.
BASE_SCENARIO = example_path("sim-fig1.toml")
_CLEARED: set[Path] = set()


@dataclass(frozen=True)
class Scale:
    """What the user scales an experiment with: another trace, another length, parallelism."""
    trace: str | None = None          # a trace name or directory (default: the scenario's, seattle)
    duration_s: float | None = None   # simulated seconds (default: the experiment's own)
    jobs: int | None = None           # simulations at once (default: the number of CPUs)
    progress: bool = True
    fresh: bool = False               # simulate again even if OUT/runs has the run


def base_scenario(scale: Scale, default_duration_s: float | None) -> Any:
    """The shipped scenario with ``scale``'s trace and duration (else ``default_duration_s``;
    None: the whole trace, capped at the trace's length by the simulator)."""
    from replicast.simulator.scenario import load_scenario

    scenario = load_scenario(BASE_SCENARIO)
    if scale.trace is not None:
        scenario.trace = scale.trace
    scenario.duration_s = scale.duration_s if scale.duration_s is not None else default_duration_s
    return scenario


def span_s(scenario: Any) -> float:
    """Seconds of trace the sources of ``scenario`` run for (its duration, else the rest of the trace)."""
    from replicast.traces.store import TraceStore

    available = TraceStore.open(scenario.trace).duration_us / 1e6 - scenario.start_s
    return available if scenario.duration_s is None else min(scenario.duration_s, available)


def describe(seconds: float) -> str:
    """``1.9 h``, ``30 min`` or ``45 s``."""
    if seconds >= 5400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def digest(scenario: Any) -> str:
    """A short digest of every field of ``scenario`` but ``kmax`` (and its name)."""
    fields = {k: v for k, v in dataclasses.asdict(scenario).items() if k not in ("kmax", "name")}
    text = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def simulate(scenario: Any, runs_dir: Path, scale: Scale, variant: str = "") -> dict[int, Path]:
    """Run ``scenario`` at each of its kmax values not already in ``runs_dir``; kmax → its run
    directory ``runs_dir/<deployment>[-<variant>]-<digest>/k<K>``: experiments simulating the same
    scenario share it (``variant`` only makes the name readable)."""
    from replicast.simulator.runs import simulate_runs
    from replicast.simulator.run import Prepared

    name = scenario.deployment + (f"-{variant}" if variant else "")
    directory = runs_dir / f"{name}-{digest(scenario)}"
    if scale.fresh and directory not in _CLEARED:       # once per process: 'all' shares runs between figures
        _CLEARED.add(directory)
        shutil.rmtree(directory, ignore_errors=True)
    missing = tuple(k for k in scenario.kmax if not (directory / f"k{k}" / "summary.json").is_file())
    if missing:
        todo = replace(scenario, kmax=missing, name=name)
        prepared = Prepared(todo)
        log.info("%s: simulating kmax %s, %.0f s of trace %s (%s deployment%s) in %s", name,
                 ", ".join(map(str, missing)), (prepared.end - prepared.start) / 1e6, todo.trace, todo.deployment,
                 ", with a coordinator" if getattr(todo, "coordinator", None) is not None else "", directory)
        directory.mkdir(parents=True, exist_ok=True)
        for outcome in simulate_runs(prepared, directory, jobs=scale.jobs, progress=scale.progress):
            if not outcome.summary.get("completed", True):
                log.warning("%s kmax=%s: the applications did not all close within the drain time", name,
                            outcome.summary["kmax"])
        (directory / "scenario.json").write_text(json.dumps(dataclasses.asdict(todo), indent=2, default=str) + "\n",
                                                 encoding="utf-8")
    else:
        log.info("%s: kmax %s already simulated in %s", name, ", ".join(map(str, scenario.kmax)), directory)
    return {k: directory / f"k{k}" for k in scenario.kmax}


def summary(run_dir: Path) -> dict:
    """A run's ``summary.json``."""
    path = run_dir / "summary.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ReplicastError(f"{path}: cannot read the run's summary ({error}); delete {run_dir.parent} "
                             "and run the experiment again") from None


def ratios(summaries: dict[int, dict]) -> dict[int, tuple[float, float]]:
    """kmax → (bandwidth ratio, network cost ratio) against the smallest kmax (Fig. 4's legends)."""
    base = summaries[min(summaries)]
    return {k: (s["records_sent"] / base["records_sent"] if base["records_sent"] else float("nan"),
                s["network_cost"] / base["network_cost"] if base["network_cost"] else float("nan"))
            for k, s in summaries.items()}
