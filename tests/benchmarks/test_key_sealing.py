"""benchmarks/key_sealing.py runs: sealed and unsealed outputs are identical, and the engine holds no
window back once its seal (or the last punctuation) could have reached it over the trace (simulated
time: the figures are deterministic, not wall-clock) — with one replica of everything, and with the
Union and the aggregate replicated (``--kmax 2``)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "key_sealing.py"


@pytest.fixture(scope="module")
def outputs() -> dict[int, str]:
    """The script's report of 30 s at 5 producers, at kmax 1 and 2 (exit 0: identical outputs, equal to
    the one-copy replay reference, and every aggregate replica closed the same windows)."""
    runs = {k: subprocess.run([sys.executable, str(SCRIPT), "--producers", "5", "--duration-s", "30", "--kmax", str(k)],
                              capture_output=True, text=True, timeout=300) for k in (1, 2)}
    for k, run in runs.items():
        assert run.returncode == 0, (k, run.stderr)
    return {k: run.stdout for k, run in runs.items()}


def _table(out: str) -> dict[tuple[str, str], tuple[float, float, float]]:
    """(keys, coordination) → (p50, p99, held) of the report's table."""
    rows = re.findall(r"^  (nearer|farther|all) +(seal per key|whole-stream punct\.) +(\d+) +([\d.]+) +([\d.]+) +"
                      r"([\d.]+) +([\d.]+) +([\d.]+)$", out, re.M)
    return {(group, how): (float(p50), float(p99), float(held)) for group, how, _, p50, p99, _, _, held in rows}


def test_a_short_run_holds_nothing_back_and_gives_identical_outputs(outputs):
    out = outputs[1]
    assert "outputs identical with and without seals: yes" in out
    table = _table(out)
    assert len(table) == 6, out
    assert all(held == 0.0 for *_, held in table.values()), out          # nothing waits beyond the trace's bound
    assert table["nearer", "seal per key"][0] < table["nearer", "whole-stream punct."][0]   # the nearer keys stop
                                                                                           # waiting for the far


def test_replicated_union_and_aggregate_give_the_reference_and_bypass_a_slow_link(outputs):
    """kmax 2: the Union and the aggregate also run on the relay nearest the reporting server.  In this
    window seattle-18's direct link is slow (345 ms one way) and its seals reach the reporting server
    sooner through the relay, so the farther keys' sealed p99 drops below kmax 1's, with nothing held
    beyond the fastest path's bound."""
    out = outputs[2]
    assert "cpu seattle-2/seattle-25, load seattle-2/seattle-25" in out
    assert "outputs identical with and without seals: yes" in out
    assert "every aggregate replica closed the same windows" in out
    one, two = _table(outputs[1]), _table(out)
    assert len(two) == 6, out
    assert all(held == 0.0 for *_, held in two.values()), out
    assert two["farther", "seal per key"][1] < one["farther", "seal per key"][1], (outputs[1], out)
