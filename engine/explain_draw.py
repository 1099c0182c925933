"""The picture ``replicast explain`` draws: the query DAG, left to right, with Blazes' labels.

Each node is a box with its name, annotation and coordination, coloured by its output label
(green: Seal/Async, replicas agree; orange: Run; red: Inst/Diverge); each edge is an arrow with
its stream label (``Rep`` where the producer is replicated).  Columns are the longest path from a
source; no Graphviz needed.
"""

from __future__ import annotations

from pathlib import Path

from replicast.operators.blazes import Label

_COLOURS = {Label.SEAL: "#b7e4c7", Label.ASYNC: "#d8f3dc", Label.RUN: "#ffd6a5", Label.INST: "#ffadad",
            Label.DIVERGE: "#ff6b6b"}


def layout(analysis) -> dict[str, tuple[float, float]]:
    """(column, row) of every node: column = longest path from a source, rows spread evenly."""
    query = analysis.query
    depth: dict[str, int] = {}
    for name in analysis.nodes:                          # topological order
        inputs = query.inputs_of(name)
        depth[name] = 1 + max((depth[i] for i in inputs), default=-1)
    columns: dict[int, list[str]] = {}
    for name, d in depth.items():
        columns.setdefault(d, []).append(name)
    return {name: (float(d), row - (len(names) - 1) / 2)
            for d, names in columns.items() for row, name in enumerate(names)}


def draw(analysis, out: Path, *, title: str = "") -> Path:
    """Write the labelled DAG of ``analysis`` to ``out`` (PNG) and return the path."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed; must precede pyplot
    import matplotlib.pyplot as plt

    xy = {name: (x * 3.2, -y * 1.5) for name, (x, y) in layout(analysis).items()}
    columns = max(x for x, _ in xy.values()) / 3.2 + 1
    rows = max(-y for _, y in xy.values()) - min(-y for _, y in xy.values()) + 1.5
    fig, ax = plt.subplots(figsize=(max(8.0, 3.3 * columns), max(4.0, 1.6 * rows)))
    for edge in analysis.edges:
        (x0, y0), (x1, y1) = xy[edge.source], xy[edge.target]
        ax.annotate("", xy=(x1 - 0.75, y1), xytext=(x0 + 0.75, y0),
                    arrowprops={"arrowstyle": "->", "color": "0.35", "lw": 1.2})
        text = str(edge.label) + (", Rep" if edge.rep else "")
        ax.text((x0 + x1) / 2, (y0 + y1) / 2 + 0.12, text, fontsize=8, ha="center", va="bottom", color="0.2",
                bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8})
    for name, report in analysis.nodes.items():
        x, y = xy[name]
        annotation = str(report.annotation) if report.annotation else "source"
        text = f"{name}\n{annotation}\n{report.coordination.value}"
        edge = "#c1121f" if report.problem else "0.3"
        ax.text(x, y, text, ha="center", va="center", fontsize=9,
                bbox={"boxstyle": "round,pad=0.35", "fc": _COLOURS[report.output.label], "ec": edge,
                      "lw": 2.0 if report.problem else 1.0})
    ax.set_xlim(-1.2, (columns - 1) * 3.2 + 1.2)
    ys = [y for _, y in xy.values()]
    ax.set_ylim(min(ys) - 1.0, max(ys) + 1.0)
    ax.axis("off")
    verdict = "replicas agree" if analysis.agrees else \
        "replicas may disagree: " + ", ".join(analysis.diverging())
    ax.set_title(f"{title}\n{verdict}" if title else verdict, fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
