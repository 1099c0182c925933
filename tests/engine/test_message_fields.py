"""The per-message nouns that are not frozen are never changed once made (engine/messages.py).

:class:`~engine.messages.Batch`, :class:`~engine.messages.Ack` and the core's ``Delivered`` event are
plain dataclasses — a frozen one's ``__init__`` runs interpreted even where the class is compiled —
so nothing at run time stops an assignment to their fields.  This test reads every module of the
package instead: an assignment to an attribute named like one of their fields must be on an object
known not to be one of them (the node core's ``Inbound``, ``Hosted`` and entry point, the
simulator's call heap and links, a duplicate filter's run, a class's own ``self`` — the messages
have no methods).  A new one fails here, naming its line, until someone has looked at it."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from replicast.engine.core.events import Delivered
from replicast.engine.messages import Batch, Ack

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ("engine", "operators", "simulator", "placement", "cluster", "experiments", "replicast")
FIELDS = {f.name for cls in (Batch, Ack, Delivered) for f in dataclasses.fields(cls)}
#: Objects whose attributes of those names are theirs, not a message's (what each is).
NOT_MESSAGES = {
    "self": "a class's own attribute (the messages have no methods)",
    "inbound": "engine/core/hosted.py's Inbound",
    "hosted": "engine/core/hosted.py's Hosted",
    "hosted.entry": "engine/entry.py's EntryPoint",
    "calls": "simulator/network.py's Calls",
    "self.link(src, dst)": "simulator/network.py's Link",
    "run": "operators/dedup_runs.py's Run",
    "source": "simulator/scenario.py's source spec",
}


def assignments(source: str) -> list[tuple[str, str, int]]:
    """(object, attribute, line) of every assignment to an attribute named like a message field."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        for target in targets:
            for element in (target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]):
                if isinstance(element, ast.Attribute) and element.attr in FIELDS:
                    out.append((ast.unparse(element.value), element.attr, node.lineno))
    return out


def test_the_check_sees_an_assignment_to_a_batch_field():
    assert ("batch", "records", 2) in assignments("batch = Batch(s, 0, 0, [])\nbatch.records = []\n")
    assert ("b", "offset", 1) in assignments("b.offset += 1\n")


def test_no_module_assigns_to_a_field_of_batch_ack_or_delivered():
    found = [f"{path.relative_to(ROOT)}:{line}: {obj}.{attr}"
             for package in PACKAGE for path in sorted((ROOT / package).rglob("*.py"))
             for obj, attr, line in assignments(path.read_text()) if obj not in NOT_MESSAGES]
    assert not found, "assignments that may change a message once made:\n" + "\n".join(found)
