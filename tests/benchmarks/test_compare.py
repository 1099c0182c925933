"""benchmarks/compare.py runs, and refuses to report ratios when the engines' outputs differ."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from tqdm import tqdm

pytest.importorskip("bytewax", reason="Bytewax comes with the bench extra: pip install -e '.[bench]'")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "compare.py"


def load_compare():
    spec = importlib.util.spec_from_file_location("compare_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module                 # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_quick_run_checks_outputs_and_prints_every_ratio():
    run = subprocess.run([sys.executable, str(SCRIPT), "--records", "20000", "--rounds", "1"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "outputs equal in every run" in run.stdout
    for row in ("filter+map", "window", "join", "replay --replicas 1", ">= 2.5x", ">= 5.0x", ">= 1.0x", "<= 2.0x"):
        assert row in run.stdout


def test_a_differing_output_exits_1_naming_the_runner(capsys):
    compare = load_compare()
    join = compare.workloads(4000, 0)[2]
    honest = join.bytewax
    join.bytewax = lambda streams: honest(streams)[1:]            # one pair lost
    with pytest.raises(SystemExit) as exit_status, tqdm(disable=True) as progress:
        compare.measure(join, 1, progress)
    assert exit_status.value.code == 1
    assert "MISMATCH join: bytewax differs from replicast's operators: 1 missing" in capsys.readouterr().out
