"""explain's verdicts against replicated replay, on the corpus in data/explain/ (docs/explain.md,
"Checked").  Each file says what it expects (``# expect: agree|diverge``); the analysis must say
the same, and replay with random delays and crashes must find a divergence where it predicts one
and none where it predicts agreement.  CI runs a few seeds per query; the full counts (1,000 seeds
to find each divergence, 10,000 without one) run with ``python3 benchmarks/explain_verdicts.py``."""

import random
import re
from pathlib import Path

import pytest

from replicast.engine.explain_check import check_verdict, sample_streams
from replicast.engine.query_file import load_query, parse_query
from replicast.engine.replay import replay, scheduled_replay
from replicast.engine.replay_cli import compare
from replicast.operators.blazes import Path as BlazesPath
from replicast.operators.coordination import Coordination, analyse

CORPUS = sorted((Path(__file__).parent / "data" / "explain").glob("*.toml"))
AGREEING_SEEDS = 20
DIVERGING_SEEDS = 50


def expectation(path: Path) -> bool:
    return re.search(r"^# expect: (agree|diverge)$", path.read_text(), re.M).group(1) == "agree"


def test_the_corpus_covers_every_annotation_built_in_and_user_defined():
    assert len(CORPUS) >= 20
    seen = set()
    for path in CORPUS:
        query = load_query(path)
        for name, op in query.operators.items():
            seen.add((op.kind == "python", query.compiled[name].annotation.path))
    assert {(True, p) for p in BlazesPath} <= seen
    assert {(False, BlazesPath.CR), (False, BlazesPath.OW)} <= seen
    verdicts = [expectation(p) for p in CORPUS]
    assert verdicts.count(True) >= 10 and verdicts.count(False) >= 7


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_replay_confirms_the_verdict(path):
    query = load_query(path)
    assert analyse(query, 2).agrees == expectation(path)
    check = check_verdict(query, seeds=AGREEING_SEEDS if expectation(path) else DIVERGING_SEEDS)
    assert check.confirmed, f"{path.name}: {check}"


@pytest.mark.parametrize("path", [p for p in CORPUS if not expectation(p)], ids=lambda p: p.stem)
def test_without_replication_a_predicted_run_label_shows_across_schedules(path):
    """k = 1: no Rep, so Blazes says Run: one copy's output depends on the schedule."""
    query = load_query(path)
    analysis = analyse(query, 1)
    assert {analysis.nodes[a].output.label.title for a in query.applications} == {"Run"}
    streams = sample_streams(query, random.Random(0))
    reference = replay(query, streams, punctuation_us=1_000_000)
    assert any(compare(query, reference, scheduled_replay(query, streams, seed=seed, punctuation_us=1_000_000))
               for seed in range(DIVERGING_SEEDS))


def test_a_diverging_query_agrees_once_its_remedy_is_applied():
    """The same user operator, sorting declined (diverges) and then sorted (the remedy): agrees."""
    declined = next(p for p in CORPUS if p.stem == "17_user_ow_declined")
    fixed = declined.read_text().replace('coordination = "none"\n', "")
    query = load_query(declined)
    assert analyse(query, 2).nodes["r"].coordination is Coordination.DECLINED
    remedied = parse_query(fixed, "remedied.toml")
    assert analyse(remedied, 2).nodes["r"].coordination is Coordination.SORT
    assert check_verdict(remedied, seeds=AGREEING_SEEDS).diverged_at is None
