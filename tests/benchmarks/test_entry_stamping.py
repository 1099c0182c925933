"""benchmarks/entry_stamping.py runs: the cost of waiting for the member is one RTT between the
entry replicas, and a stamper's crash delivers every record once."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "entry_stamping.py"


def test_quick_run_reports_one_round_trip_and_a_clean_take_over():
    run = subprocess.run([sys.executable, str(SCRIPT), "--records", "60", "--rtts", "30"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert "one entry replica (baseline):       median   20.0 ms" in lines[0]
    assert "median   50.0 ms" in lines[1] and "median / baseline 2.50" in lines[1]      # 20 ms + one 30 ms RTT
    assert "the stamper crashes: every record once" in lines[2]
