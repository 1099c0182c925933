"""The operators benchmark runs and prints both tables (a smoke test: speed is judged by reading it)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_prints_both_tables():
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "operators.py"), "--quick"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "Table 1: ns per record" in run.stdout and "Table 2: per-replica CPU" in run.stdout
    for name in ("union", "filter", "aggregate", "join", "duplicate filter, k=2"):
        assert name in run.stdout
    assert "[5.00x]" in run.stdout          # the paper's Table I printed beside this run's ratios
