"""benchmarks/key_sealing.py runs: sealed and unsealed outputs are identical, and the engine holds no
window back once its seal (or the last punctuation) could have reached it over the trace (simulated
time: the figures are deterministic, not wall-clock)."""

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "key_sealing.py"


def test_a_short_run_holds_nothing_back_and_gives_identical_outputs():
    run = subprocess.run([sys.executable, str(SCRIPT), "--producers", "5", "--duration-s", "30"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert "outputs identical with and without seals: yes" in out
    rows = re.findall(r"^  (nearer|farther|all) +(seal per key|whole-stream punct\.) +(\d+) +([\d.]+) +([\d.]+) +"
                      r"([\d.]+) +([\d.]+) +([\d.]+)$", out, re.M)
    assert len(rows) == 6, out
    assert all(float(held) == 0.0 for *_, held in rows), out          # nothing waits beyond the trace's bound
    sealed = {group: float(p50) for group, how, _, p50, *_ in rows if how == "seal per key"}
    unsealed = {group: float(p50) for group, how, _, p50, *_ in rows if how != "seal per key"}
    assert sealed["nearer"] < unsealed["nearer"]                       # the nearer keys stop waiting for the far
