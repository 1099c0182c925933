"""The trace query language: Pivot Tracing's ``From … In … Where … GroupBy … Select …`` (docs/tracing.md).

A query names one tracepoint (:data:`TRACEPOINTS`), filters its events, groups them and
aggregates, e.g. the win share of each stream replica at ``correlate``::

    From a In Arrival
    Where a.replica = "correlate" And a.outcome = "pass"
    GroupBy a.port, a.upstream
    Select a.port, a.upstream, COUNT, SHARE
    Sample 1/100

Rules of this module (pure: it parses text, nothing else):

1. Keywords are case-insensitive; clauses come in the order above; ``Where``, ``GroupBy`` and
   ``Sample`` are optional (``Sample`` defaults to :data:`DEFAULT_SAMPLE`, ``Sample 1/1``: every record).
2. A field is ``alias.name`` (or a bare ``name``) and must be one the tracepoint has; a literal is a
   number or a double-quoted string.  Conditions are ``field OP literal`` joined by ``And``, with
   OP one of ``= != < <= > >=``.
3. ``Select`` lists grouped fields and aggregates: ``COUNT``, ``SHARE`` (this group's count over the
   count of all groups agreeing on every GroupBy field but the last), ``SUM(f)``, ``AVG(f)``,
   ``MIN(f)``, ``MAX(f)`` and percentiles ``P50(f)`` … ``P999(f)`` (``P`` then digits after "0.").
4. Anything else is a :class:`TraceQueryError` whose one line names the clause and the word.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from replicast.operators.errors import ReplicastError


class TraceQueryError(ReplicastError):
    """A trace query that does not parse or names what does not exist."""


#: Tracepoints and their fields (docs/tracing.md describes each).  Every event also has ``node``.
TRACEPOINTS: dict[str, tuple[str, ...]] = {
    # a record an entry point emits into the DAG (§II-B): its stamping delay when the source stamped it
    "Source": ("node", "replica", "stream", "ts", "age_us"),
    # each copy of a sampled record reaching a replica's duplicate filter (§IV-B, Alg. 1)
    "Arrival": ("node", "replica", "port", "upstream", "upstream_node", "outcome", "rank", "later_us", "age_us", "ts"),
    # a passed record waiting in a sorter for the punctuation that releases it (§IV-C), a stamped
    # record waiting for every entry replica to hold its stamp (entry-stamped mode), or a keyed
    # window's output waiting for its producer's seal per key (tracepoints rule 8)
    "Wait": ("node", "replica", "port", "kind", "wait_us", "ts", "key"),
    # a record an operator replica emits
    "Emit": ("node", "replica", "ts", "age_us"),
    # a batch sent to one downstream replica (every N-th batch of a replica's output log, N the sampling)
    "Send": ("node", "replica", "to_node", "to_replica", "records", "punctuation"),
    # a record delivered to an application (§VI-B latency = arrival − ts), with the path of first
    # arrivals when a Hop query carries baggage (or the simulator traces paths)
    "Deliver": ("node", "app", "ts", "latency_us", "path"),
    # each hop of a sampled delivered record's baggage: time from the hop before (or its ts) to this emission
    "Hop": ("node", "app", "hop", "replica", "hop_us", "latency_us", "path"),
}

AGGREGATES = ("COUNT", "SHARE", "SUM", "AVG", "MIN", "MAX")
OPERATORS = ("=", "!=", "<", "<=", ">", ">=")
#: Sampling when a query says none: one record in a hundred (docs/tracing.md, the overhead).
DEFAULT_SAMPLE = 100
_CLAUSES = ("from", "where", "groupby", "select", "sample")
_TOKEN = re.compile(r'\s*(?:(?P<string>"(?:[^"\\]|\\.)*")|(?P<number>-?\d+(?:\.\d+)?)|'
                    r'(?P<op>!=|<=|>=|=|<|>|->)|(?P<punct>[(),/])|(?P<word>[A-Za-z_][A-Za-z_0-9.]*))')
_PERCENTILE = re.compile(r"P(\d+)$")


@dataclass(frozen=True)
class Condition:
    field: str
    op: str
    value: str | int | float


@dataclass(frozen=True)
class Output:
    """One ``Select`` item: a grouped field (``aggregate`` None) or an aggregate of ``field``."""

    aggregate: str | None
    field: str | None = None

    @property
    def label(self) -> str:
        if self.aggregate is None:
            return self.field
        return self.aggregate if self.field is None else f"{self.aggregate}({self.field})"


@dataclass(frozen=True)
class TraceQuery:
    """A parsed query; :attr:`text` is what the user wrote."""

    tracepoint: str
    where: tuple[Condition, ...]
    group_by: tuple[str, ...]
    select: tuple[Output, ...]
    sample: int
    text: str

    @cached_property
    def aggregates(self) -> tuple[Output, ...]:
        """The Select items that aggregate, in order (the partial state a node keeps per group)."""
        return tuple(o for o in self.select if o.aggregate is not None)


def parse(text: str) -> TraceQuery:
    """The query ``text`` says (rules 1–4)."""
    tokens = _tokenize(text)
    clauses = _split(tokens)
    if "from" not in clauses or "select" not in clauses:
        raise TraceQueryError("a trace query needs From … In TRACEPOINT and Select …")
    alias, tracepoint = _from(clauses["from"])
    fields = TRACEPOINTS[tracepoint]
    field = lambda word, clause: _field(word, alias, fields, tracepoint, clause)   # noqa: E731
    where = _where(clauses.get("where", []), field)
    group_by = tuple(field(w, "GroupBy") for w in _items(clauses.get("groupby", []), "GroupBy"))
    select = tuple(_output(item, field, group_by) for item in _items(clauses["select"], "Select", nested=True))
    if not any(o.aggregate for o in select):
        raise TraceQueryError("Select: name at least one aggregate (COUNT, SHARE, SUM, AVG, MIN, MAX, Pnn)")
    sample = _sample(clauses.get("sample"))
    return TraceQuery(tracepoint, where, group_by, select, sample, " ".join(text.split()))


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens, at = [], 0
    text = text.rstrip()
    while at < len(text):
        match = _TOKEN.match(text, at)
        if match is None or match.end() == at:
            raise TraceQueryError(f"unexpected character {text[at:].strip()[:1]!r} at position {at} of the query")
        kind = match.lastgroup
        tokens.append((kind, match.group(kind)))
        at = match.end()
    return tokens


def _split(tokens: list[tuple[str, str]]) -> dict[str, list[tuple[str, str]]]:
    clauses: dict[str, list] = {}
    current = None
    for kind, value in tokens:
        if kind == "word" and value.lower() in _CLAUSES:
            name = value.lower()
            if name in clauses:
                raise TraceQueryError(f"{value}: clause given twice")
            if _CLAUSES.index(name) < max((_CLAUSES.index(c) for c in clauses), default=-1):
                raise TraceQueryError(f"{value}: clauses go in the order From, Where, GroupBy, Select, Sample")
            clauses[name] = current = []
        elif current is None:
            raise TraceQueryError(f"a trace query starts with From, not {value!r}")
        else:
            current.append((kind, value))
    return clauses


def _from(tokens) -> tuple[str, str]:
    words = [v for _, v in tokens]
    if len(words) != 3 or words[1].lower() != "in":
        raise TraceQueryError(f"From: expected 'From ALIAS In TRACEPOINT', got 'From {' '.join(words)}'")
    alias, tracepoint = words[0], words[2]
    if tracepoint not in TRACEPOINTS:
        raise TraceQueryError(f"From: no tracepoint {tracepoint!r} (there are {', '.join(TRACEPOINTS)})")
    return alias, tracepoint


def _field(word: str, alias: str, fields: tuple[str, ...], tracepoint: str, clause: str) -> str:
    prefix, dot, name = word.rpartition(".")
    if dot and prefix != alias:
        raise TraceQueryError(f"{clause}: {word!r} names alias {prefix!r}; the query's alias is {alias!r}")
    if name not in fields:
        raise TraceQueryError(f"{clause}: {tracepoint} has no field {name!r} (it has {', '.join(fields)})")
    return name


def _literal(kind: str, value: str) -> str | int | float:
    if kind == "string":
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    if kind == "number":
        return float(value) if "." in value else int(value)
    raise TraceQueryError(f"Where: expected a number or a \"string\", got {value!r}")


def _where(tokens, field) -> tuple[Condition, ...]:
    conditions, i = [], 0
    while i < len(tokens):
        if len(tokens) < i + 3:
            raise TraceQueryError(f"Where: expected 'FIELD OP VALUE', got {' '.join(v for _, v in tokens[i:])!r}")
        (fk, fv), (ok, ov), (vk, vv) = tokens[i:i + 3]
        if fk != "word" or ok != "op" or ov not in OPERATORS:
            raise TraceQueryError(f"Where: expected 'FIELD OP VALUE' (OP one of {' '.join(OPERATORS)}), "
                                  f"got {fv} {ov} {vv}")
        conditions.append(Condition(field(fv, "Where"), ov, _literal(vk, vv)))
        i += 3
        if i < len(tokens):
            if tokens[i] != ("word", tokens[i][1]) or tokens[i][1].lower() != "and":
                raise TraceQueryError(f"Where: conditions are joined by And, not {tokens[i][1]!r}")
            i += 1
            if i == len(tokens):
                raise TraceQueryError("Where: a condition must follow And")
    return tuple(conditions)


def _items(tokens, clause: str, nested: bool = False) -> list:
    """Comma-separated items: a word, or (``nested``) ``WORD(WORD)``."""
    if not tokens:
        return []
    items, current = [], []
    for kind, value in tokens:
        if value == ",":
            items.append(current)
            current = []
        else:
            current.append((kind, value))
    items.append(current)
    out = []
    for item in items:
        words = [v for _, v in item]
        if len(item) == 1 and item[0][0] == "word":
            out.append(words[0])
        elif nested and len(item) == 4 and words[1] == "(" and words[3] == ")" and item[2][0] == "word":
            out.append((words[0], words[2]))
        else:
            raise TraceQueryError(f"{clause}: cannot read item {' '.join(words) or '(empty)'!r}")
    return out


def _output(item, field, group_by: tuple[str, ...]) -> Output:
    if isinstance(item, tuple):
        name, argument = item[0].upper(), field(item[1], "Select")
        if name in ("SUM", "AVG", "MIN", "MAX") or _PERCENTILE.match(name):
            return Output(name, argument)
        raise TraceQueryError(f"Select: no aggregate {item[0]!r} over a field (SUM, AVG, MIN, MAX, Pnn)")
    if item.upper() in ("COUNT", "SHARE"):
        return Output(item.upper())
    name = field(item, "Select")
    if name not in group_by:
        raise TraceQueryError(f"Select: {item!r} is neither aggregated nor in GroupBy")
    return Output(None, name)


def _sample(tokens) -> int:
    if tokens is None:
        return DEFAULT_SAMPLE
    words = [v for _, v in tokens]
    if len(words) == 3 and words[0] == "1" and words[1] == "/" and words[2].isdigit() and int(words[2]) >= 1:
        return int(words[2])
    raise TraceQueryError(f"Sample: expected '1/N' with N ≥ 1, got {' '.join(words)!r}")


def percentile(name: str) -> float:
    """The quantile a ``Pnn`` aggregate names: P50 → 0.5, P99 → 0.99, P999 → 0.999."""
    digits = _PERCENTILE.match(name).group(1)
    return int(digits) / 10 ** len(digits)
