"""``replicast experiment table1``: CPU cost per replica for Union, Filter, Aggregate and Join at
degrees of replication 1–4 (the paper's Table I, §VI-D), measured on the node core
(:mod:`experiments.cpu_cost`), with the paper's figures alongside.

Writes ``table1.csv`` (one row per operator and degree) and ``table1.png`` (per-replica cost
against degree 1, ours solid, the paper's dashed).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from replicast.experiments import paper
from replicast.experiments.cpu_cost import OPERATORS, Cost, record_inputs, replay

DEGREES = (1, 2, 3, 4)
COLUMNS = ("operator", "degree", "cpu_percent", "ratio_to_degree1", "input_copies_per_s", "records_out_per_s",
           "paper_cpu_percent", "paper_ratio_to_degree1", "paper_ratio_to_none")


@dataclass(frozen=True)
class Settings:
    """How long to measure: ``seconds`` of stream per operator and degree, the first ``warmup_s``
    not counted; each replay is repeated ``repeats`` times and the least CPU time kept."""
    seconds: float = 2.0
    warmup_s: float = 0.5
    repeats: int = 3
    operators: tuple[str, ...] = tuple(OPERATORS)
    degrees: tuple[int, ...] = DEGREES


def measure(settings: Settings, progress: bool = True) -> list[Cost]:
    """One :class:`Cost` per operator and degree."""
    from tqdm import tqdm

    costs = []
    cases = [(op, k) for op in settings.operators for k in settings.degrees]
    for operator, degree in tqdm(cases, desc="table1", unit="case", disable=not progress):
        recording = record_inputs(operator, degree, settings.seconds)
        runs = [replay(recording, round(settings.warmup_s * 1e6)) for _ in range(settings.repeats)]
        best = min(runs, key=lambda r: r.cpu_ns)
        costs.append(Cost(operator, degree, best.cpu_ns / 1e9, settings.seconds - settings.warmup_s, best.copies_in,
                          best.records_out))
    return costs


def rows(costs: Sequence[Cost]) -> list[dict]:
    """The CSV rows: our cost and ratio to degree 1 next to the paper's."""
    base = {c.operator: c.cpu_percent for c in costs if c.degree == 1}
    out = []
    for c in costs:
        known = c.degree <= 4
        out.append({
            "operator": c.operator, "degree": c.degree, "cpu_percent": round(c.cpu_percent, 3),
            "ratio_to_degree1": round(c.cpu_percent / base[c.operator], 3) if c.operator in base else "",
            "input_copies_per_s": round(c.copies_in / c.stream_s), "records_out_per_s": round(c.records_out / c.stream_s),
            "paper_cpu_percent": paper.TABLE_I_CPU_PERCENT[c.operator][c.degree] if known else "",
            "paper_ratio_to_degree1": round(paper.table1_ratio_to_degree1(c.operator, c.degree), 3) if known else "",
            "paper_ratio_to_none": paper.TABLE_I_RATIO_TO_NONE[c.operator][c.degree - 1] if known else "",
        })
    return out


def write_csv(table: Sequence[dict], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(table)
    return path


def plot(table: Sequence[dict], path: Path) -> Path:
    """Per-replica CPU cost against degree 1: ours solid, the paper's dashed, one colour per operator."""
    from replicast.experiments.figures import panels

    operators = list(dict.fromkeys(r["operator"] for r in table))
    with panels(path, "CPU cost of a replica against degree 1 (Table I): replicast solid, paper dashed", 1,
                width=6.4, height=4.4) as (ax,):
        for i, operator in enumerate(operators):
            mine = [r for r in table if r["operator"] == operator and r["ratio_to_degree1"] != ""]
            degrees = [r["degree"] for r in mine]
            ax.plot(degrees, [r["ratio_to_degree1"] for r in mine], "o-", color=f"C{i}",
                    label=f"{operator} ({mine[0]['cpu_percent']:.1f} % at degree 1)")
            known = [r for r in mine if r["paper_ratio_to_degree1"] != ""]
            ax.plot([r["degree"] for r in known], [r["paper_ratio_to_degree1"] for r in known], "s--", color=f"C{i}",
                    alpha=0.6, label=f"{operator}, paper ({paper.TABLE_I_CPU_PERCENT[operator][1]} % at degree 1)")
        ax.set_xlabel("degree of replication (input and output stream replicas per port)")
        ax.set_ylabel("CPU per replica / CPU at degree 1")
        ax.set_xticks(sorted({r["degree"] for r in table}))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    return path


def run(out: Path, settings: Settings = Settings(), progress: bool = True) -> list[dict]:
    """Measure, write ``table1.csv`` and ``table1.png`` into ``out``, return the rows."""
    table = rows(measure(settings, progress))
    write_csv(table, out / "table1.csv")
    plot(table, out / "table1.png")
    return table
