"""Coordination analysis of a query (Blazes, ``papers/000_…`` §V; docs/explain.md).

Two steps, both pure:

1. :func:`decide` (independent of the replication degree) chooses each operator's and
   application's coordination from its annotation (:mod:`operators.blazes`) and the seals its
   inputs carry: none for confluent paths; *seal at punctuation* where a time punctuation seals
   the operator's partitions (windows close, join buffers are pruned, only at punctuations);
   *sort at punctuation* (a :class:`~operators.sorter.Sorter` per port, §IV-C) for the other
   order-sensitive paths, unless the query declines it (``coordination = "none"``).  The planner
   and the node sort exactly where this says so (:meth:`Query.order_sensitive`): one rule, read
   by all.
2. :func:`analyse` labels every edge by Blazes' inference (Fig. 9) and reconciliation (Fig. 10)
   rules with ``Rep`` where a node has more than one replica, and records each step of the
   derivation, the operators that would let replicas (or runs) disagree, and the cheapest remedy.

Sealing per key (Blazes §V-B1: a keyed window closing once *that key's* producers have sealed it)
is chosen for the built-in aggregates (time and count windows) and the user operators that declare
``key_seals = "close"`` whose gate a declared source seal is compatible with: the engine executes it
(:mod:`operators.key_seals`).  For joins (seals would only prune their buffers sooner) and other user
operators it is shown as what would also do.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

from replicast.operators.blazes import (TS, Annotation, Label, Path, StreamLabel, compatible, key_text,
                                        sealed)
from replicast.operators.errors import QueryError

if TYPE_CHECKING:
    from replicast.operators.query import Query


class Coordination(enum.Enum):
    """What a node does so that its replicas agree (docs/explain.md, "Coordination")."""

    NONE = "none"
    SEAL_PUNCTUATION = "seal at punctuation"
    SORT = "sort at punctuation"
    SEAL_KEY = "seal per key"
    ENTRY_STAMPING = "entry stamping"
    DECLINED = "none (declined by the query)"


@dataclass(frozen=True)
class Decision:
    """The coordination chosen for one operator or application, with the reason."""

    name: str
    annotation: Annotation
    coordination: Coordination
    why: str
    #: Ports whose interleaving stays unordered although each is sorted (multi-input, order-sensitive).
    unordered_ports: bool = False
    #: A non-time seal key compatible with the gate on every port: sealing per key replaces the
    #: whole-stream wait (coordination SEAL_KEY, built-in aggregates) or could (joins, user operators).
    key_seal: frozenset[str] | None = None
    #: SEAL_KEY over a sorter (count windows): each port sorted, a key's prefix released at its seal.
    seal_sorts: bool = False
    #: Whether the coordination holds output back (windows, sorters) rather than only state (joins).
    holds_output: bool = True

    @property
    def sorts(self) -> bool:
        return self.coordination is Coordination.SORT or self.seal_sorts


@dataclass(frozen=True)
class Decisions:
    """:func:`decide`'s verdicts, per operator and application, and each stream's seals."""

    by_name: Mapping[str, Decision]
    seals: Mapping[str, frozenset[frozenset[str]]]

    def sorts(self, name: str) -> bool:
        decision = self.by_name.get(name)
        return decision is not None and decision.sorts


def source_seals(query: "Query", name: str) -> frozenset[frozenset[str]]:
    """A source's seals: time punctuations always (§IV-A), and its declared key if any."""
    seal = query.streams[name].seal
    return frozenset({frozenset({TS})} | ({frozenset(seal)} if seal else set()))


def _annotation(query: "Query", name: str) -> Annotation:
    if name in query.applications:
        return Annotation(Path.OR, None) if query.applications[name].ordered else Annotation(Path.CR)
    return query.compiled[name].annotation


def _output_seals(query: "Query", name: str, inputs: list[frozenset[frozenset[str]]]) -> frozenset[frozenset[str]]:
    """Seals an operator's output keeps: ts (punctuations are forwarded, §IV-A), and keys whose every
    attribute the operator copies unchanged — sealed on *every* input (a union needs all producers)."""
    carries = query.compiled[name].carries
    back = {}
    for out, source in carries.items():
        back.setdefault(source, out)
    kept = None
    for seals in inputs:
        mapped = {frozenset(back[a] for a in key) for key in seals if key != frozenset({TS}) and key <= set(back)}
        kept = mapped if kept is None else kept & mapped
    return frozenset({frozenset({TS})} | (kept or set()))


def decide(query: "Query") -> Decisions:
    """Each operator's and application's coordination (step 1 of the module docstring)."""
    seals: dict[str, frozenset[frozenset[str]]] = {s: source_seals(query, s) for s in query.streams}
    by_name: dict[str, Decision] = {}
    for name in (*query.operators, *query.applications):
        inputs = [seals[i] for i in query.inputs_of(name)]
        by_name[name] = _decide_one(query, name, inputs)
        if name in query.operators:
            seals[name] = _output_seals(query, name, inputs)
    return Decisions(by_name, seals)


def _decide_one(query: "Query", name: str, inputs: list[frozenset[frozenset[str]]]) -> Decision:
    annotation = _annotation(query, name)
    declined = name in query.operators and query.operators[name].params.get("coordination", "auto") == "none"
    if not annotation.path.order_sensitive:
        if declined:
            raise QueryError(f"{query.source}: operator '{name}' (coordination): it is {annotation}, confluent: "
                             f"there is no coordination to decline")
        why = f"{annotation}: confluent, the same output multiset in any input order"
        if len(inputs) > 1:
            why += f"; its output interleaves its {len(inputs)} inputs as they arrive (Async order)"
        return Decision(name, annotation, Coordination.NONE, why)
    gate = annotation.gate
    by_time = all(compatible(gate, frozenset({TS})) for _ in inputs)
    keys = [frozenset(k for k in seals if k != frozenset({TS}) and compatible(gate, k)) for seals in inputs]
    shared = frozenset.intersection(*keys) if keys else frozenset()
    key_seal = min(shared, key=key_text) if shared else None
    holds = not (name in query.operators and query.operators[name].kind == "join")
    # Seal per key, executed by the engine for the built-in aggregates and for user operators that
    # declare they close on seals (operators/key_seals.py, operators/user.py).
    user = name in query.operators and query.compiled[name].closes_on_key_seals
    per_key = key_seal is not None and name in query.operators and (query.operators[name].kind == "aggregate"
                                                                     or user)
    if by_time and declined:
        raise QueryError(f"{query.source}: operator '{name}' (coordination): it is {annotation}, sealed by time "
                         f"punctuations inside the operator: there is no sorting to decline")
    if by_time and per_key:
        what = ("it declares key_seals = \"close\": the engine hands it each key's seal (on_key_seal) and it "
                "emits what that key's partitions complete once that key's own producer has sealed them"
                if user else "a key's windows close once that key's own producer has sealed them")
        why = (f"{annotation}: order-sensitive, but its sources seal per {key_text(key_seal)} (Seal_{key_text(key_seal)} "
               f"is compatible with its gate): {what} (Blazes §V-B1), the others at time punctuations "
               f"(Seal_ts: ts determines the window)")
        return Decision(name, annotation, Coordination.SEAL_KEY, why, key_seal=key_seal, holds_output=holds)
    if by_time:
        why = (f"{annotation}: order-sensitive, but its partitions are sealed by time punctuations "
               f"(Seal_ts is compatible: ts determines the window), so it acts only on sealed partitions")
        return Decision(name, annotation, Coordination.SEAL_PUNCTUATION, why, key_seal=key_seal, holds_output=holds)
    if declined:
        return Decision(name, annotation, Coordination.DECLINED,
                        f"{annotation}: order-sensitive and no seal is compatible, but the query declines "
                        f"sorting (coordination = \"none\")", key_seal=key_seal)
    many = len(inputs) > 1
    if per_key and not many:
        why = (f"{annotation}: order-sensitive and no time seal is compatible with its gate; its input is sorted "
               f"(§IV-C) and a key's sorted prefix is released once that key's own producer has sealed it "
               f"(Seal_{key_text(key_seal)} is compatible, Blazes §V-B1), the rest at each punctuation")
        return Decision(name, annotation, Coordination.SEAL_KEY, why, key_seal=key_seal, seal_sorts=True)
    why = f"{annotation}: order-sensitive and no time seal is compatible with its gate"
    if many:
        why += f"; each of its {len(inputs)} ports is sorted, but their interleaving is not ordered"
    return Decision(name, annotation, Coordination.SORT, why, unordered_ports=many, key_seal=key_seal)


# -- labels ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Edge:
    """A logical stream from ``source`` into ``port`` of ``target``, with its label."""

    source: str
    target: str
    port: int
    label: StreamLabel
    rep: bool


@dataclass
class NodeReport:
    """One node's analysis: its decision, derivation steps and output label."""

    name: str
    kind: str                          # "source" | "operator" | "application"
    replicas: int
    annotation: Annotation | None
    coordination: Coordination
    why: str
    output: StreamLabel
    steps: list[str] = field(default_factory=list)
    #: Set where this node itself lets replicas or runs disagree (rule 1–3 fired here).
    problem: str | None = None
    remedy: str | None = None
    key_seal: frozenset[str] | None = None
    holds_output: bool = False


@dataclass
class Analysis:
    """The labelled DAG: every edge and every node, in topological order."""

    query: "Query"
    nodes: dict[str, NodeReport]
    edges: list[Edge]

    @property
    def agrees(self) -> bool:
        """Whether every application receives the same contents on every replica and run."""
        return all(self.nodes[a].output.label.agrees for a in self.query.applications)

    def diverging(self) -> list[str]:
        return [n.name for n in self.nodes.values() if n.problem]


def analyse(query: "Query", replicas: int | Mapping[str, int] = 1,
            entry_modes: Mapping[str, str] | None = None) -> Analysis:
    """Blazes' labels for every edge of ``query`` run with ``replicas`` (step 2 of the module docstring).

    ``replicas`` is an int for every entry point and operator, or name → k (default 1);
    applications are never replicated.  ``entry_modes`` maps a stream to ``"source"`` (the
    source stamps ts, the default) or ``"entry"`` (entry points stamp, docs/node.md).
    """
    decisions = query.coordination
    modes = dict(entry_modes or {})
    for stream, mode in modes.items():
        if stream not in query.streams or mode not in ("source", "entry"):
            raise QueryError(f"entry mode {stream}={mode!r}: expected a stream of {query.source} and 'source' or 'entry'")

    def degree(name: str) -> int:
        if name in query.applications:
            return 1
        k = replicas if isinstance(replicas, int) else replicas.get(name, 1)
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise QueryError(f"{query.source}: '{name}' needs at least one replica, got {k!r}")
        return k

    nodes: dict[str, NodeReport] = {}
    edges: list[Edge] = []
    for stream in query.streams:
        nodes[stream] = _source(query, stream, degree(stream), modes.get(stream, "source"), decisions)
    for name in (*query.operators, *query.applications):
        inputs = []
        for port, upstream in enumerate(query.inputs_of(name)):
            label = nodes[upstream].output
            edges.append(Edge(upstream, name, port, label, nodes[upstream].replicas > 1))
            inputs.append((upstream, label))
        nodes[name] = _infer(query, name, degree(name), decisions.by_name[name], inputs, decisions)
    return Analysis(query, nodes, edges)


def _source(query: "Query", stream: str, k: int, mode: str, decisions: Decisions) -> NodeReport:
    label = sealed(decisions.seals[stream])
    declared = query.streams[stream].seal
    step = f"source {stream}: punctuated on event time (§IV-A)" + \
        (f" and sealed per {key_text(declared)} (declared)" if declared else "") + f" ⊢ {label}"
    if mode == "entry":
        why = ("entry points stamp ts: one stamper replica stamps each event and the others adopt it "
               "(docs/node.md), else replicas' clocks would give one event different ts (Inst)")
        return NodeReport(stream, "source", k, None, Coordination.ENTRY_STAMPING, why, label, [step])
    return NodeReport(stream, "source", k, None, Coordination.NONE,
                      "the source stamps ts and punctuates; every entry replica forwards the same records",
                      label, [step])


def _infer(query: "Query", name: str, k: int, decision: Decision, inputs: list[tuple[str, StreamLabel]],
           decisions: Decisions) -> NodeReport:
    """Fig. 9's inference per input path, then Fig. 10's reconciliation, for one node."""
    annotation = decision.annotation
    rep = k > 1
    derived: list[Label] = []
    steps: list[str] = []
    causes: list[str] = []
    for port, (upstream, label) in enumerate(inputs):
        into = f"{label}  {annotation}"
        if label.label is Label.DIVERGE or (label.label is Label.INST and not annotation.path.writes):
            steps.append(f"{into}  (p)  {label.label.title}")
            causes.append(f"its input {upstream} is already {label.label.title}")
            continue
        if label.label is Label.INST:                               # rule 3: Inst into CW / OW
            steps.append(f"{into}  (3)  Taint")
            derived.append(Label.DIVERGE if rep else Label.RUN)
            causes.append(f"its state absorbs {upstream}'s replica-dependent contents (rule 3)")
            continue
        if not annotation.path.order_sensitive:
            steps.append(f"{into}  (p)  {label}")
            continue
        content_ok = label.label is not Label.RUN
        if content_ok and decision.coordination is Coordination.SEAL_PUNCTUATION:
            steps.append(f"{into}  (p, protected: Seal_ts compatible with the gate)  {label}")
            continue
        if content_ok and decision.coordination is Coordination.SEAL_KEY:
            sealed_by = f"Seal_{key_text(decision.key_seal)}" + ("" if decision.seal_sorts else " and Seal_ts")
            steps.append(f"{into}  (p, protected: {sealed_by} compatible with the gate"
                         f"{'; sorted at punctuation' if decision.seal_sorts else ''})  {label}")
            continue
        if content_ok and decision.coordination is Coordination.SORT and not decision.unordered_ports:
            steps.append(f"{into}  (p, sorted at punctuation: one total order, §IV-C)  {label}")
            continue
        rule = "(1)  NDRead" if annotation.path is Path.OR else \
            "(4)  Taint" if label.label is Label.SEAL else "(2)  Taint"
        steps.append(f"{into}  {rule}" + (f"_{{{','.join(sorted(annotation.gate))}}}"
                                          if annotation.path is Path.OR and annotation.gate else ""))
        if annotation.path is Path.OR:
            derived.append(Label.INST if rep else Label.RUN)
        else:
            derived.append(Label.DIVERGE if rep else Label.RUN)
        if label.label is Label.RUN:
            causes.append(f"its input {upstream} differs between runs (Run) and it is order-sensitive")
        elif decision.unordered_ports:
            causes.append(f"the interleaving of its {len(inputs)} inputs is arrival order")
        else:
            causes.append("its input arrives in any order and nothing orders it")
    worst = max([label.label for _, label in inputs] + derived)
    if derived:
        steps.append(f"reconcile: {'Taint' if annotation.path.writes else 'NDRead'}, "
                     f"{'Rep' if rep else 'not Rep'} ⊢ {max(derived).title}")
    if worst.agrees:
        seals = decisions.seals.get(name, frozenset({frozenset({TS})})) if name in query.operators else \
            frozenset(k for _, label in inputs for k in label.seals)
        output = sealed(seals)
    else:
        output = StreamLabel(worst)
    kind = "application" if name in query.applications else "operator"
    report = NodeReport(name, kind, k, annotation, decision.coordination, decision.why, output, steps,
                        key_seal=decision.key_seal, holds_output=decision.holds_output and
                        decision.coordination in (Coordination.SEAL_PUNCTUATION, Coordination.SORT,
                                                  Coordination.SEAL_KEY))
    if derived:
        report.problem = f"{name} lets {'replicas' if rep else 'runs'} disagree ({max(derived).title}): " + \
            "; ".join(dict.fromkeys(causes))
        report.remedy = _remedy(query, name, decision, inputs)
    return report


def _remedy(query: "Query", name: str, decision: Decision, inputs: list[tuple[str, StreamLabel]]) -> str:
    """The cheapest coordination that would make ``name``'s replicas agree (Blazes §V-B)."""
    bad = [u for u, label in inputs if not label.label.agrees]
    if bad:
        return f"fix {', '.join(bad)} first: coordination here cannot undo contents that already differ"
    options = []
    if decision.key_seal is not None:
        options.append(f"seal per key {key_text(decision.key_seal)}: the sources already seal on it, so each "
                       f"partition could be released once its own producers sealed it (the engine does this for "
                       f"built-in aggregates, and for user operators that declare key_seals = \"close\" and act on "
                       f"on_key_seal)")
    if decision.coordination is Coordination.DECLINED and not decision.unordered_ports and len(inputs) == 1:
        options.append("sort at punctuation: drop coordination = \"none\" and the planner puts a Sorter in front")
    if len(inputs) > 1:
        options.append("one order across all inputs: engine mode \"deterministic\" merges every operator's ports "
                       "at the slowest input's punctuation (docs/modes.md)")
        options.append("or make the operator act only on sealed partitions: emit at punctuations (on_frontier) "
                       "and declare a gate with 'window' or 'ts'")
    elif decision.coordination is not Coordination.DECLINED:
        options.append("declare a gate with 'window' or 'ts' if it acts only at punctuations")
    return "; ".join(options)
