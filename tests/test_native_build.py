"""The native build (replicast/native_build.py, docs/architecture.md "Native build"): in use where
it is built and current, giving the same simulation as the ``.py`` modules, and the tests that
patch compiled classes run against the ``.py`` modules here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from replicast import native_build

ROOT = Path(__file__).resolve().parents[1]
PURE = {**os.environ, native_build.PURE_ENV: "1"}

#: A sim-fig1 run's deliveries and bandwidth rows, hashed (as benchmarks/simulator.py does).
DIGEST = """
import hashlib, json, sys
import pyarrow as pa
from replicast import native_build
from replicast.examples import example_path
from replicast.simulator.run import Prepared, run
from replicast.simulator.scenario import load_scenario
scenario = load_scenario(example_path("sim-fig1.toml"))
scenario.duration_s = 120.0
result = run(Prepared(scenario), 3)
digests = {}
for name, table in (("deliveries", result.recorder.deliveries()), ("bandwidth", result.recorder.bandwidth())):
    table = pa.table({c: table[c].cast(pa.string()) if pa.types.is_dictionary(table[c].type) else table[c]
                      for c in table.column_names})
    table = table.sort_by([(c, "ascending") for c in table.column_names])
    digests[name] = hashlib.sha256(repr([table[c].to_pylist() for c in table.column_names]).encode()).hexdigest()
print(json.dumps({"build": native_build.status(), "native": native_build.STATUS.native,
                  "delivered": result.summary["delivered"], **digests}))
"""


def _mypyc_here() -> bool:
    try:
        import mypyc.build  # noqa: F401
    except ImportError:
        return False
    return True


def _digest(env: dict) -> dict:
    done = subprocess.run([sys.executable, "-c", DIGEST], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_native_build_is_in_use_where_it_can_be_built():
    """The test command installs with mypyc (setup.cfg's test extra, pyproject's build requirement):
    the suite runs the compiled modules, not a stale or missing build."""
    if os.environ.get(native_build.PURE_ENV) or not _mypyc_here():
        pytest.skip(f"asked for pure Python or no mypyc here: {native_build.status()}")
    assert native_build.STATUS.native, native_build.status()
    import replicast.engine.core.receiver as receiver
    import replicast.simulator.driver as driver

    assert Path(receiver.__file__).suffix == Path(driver.__file__).suffix == ".so"


def test_native_and_pure_python_simulate_the_same_run():
    """sim-fig1, two simulated minutes at kmax 3: every delivery (application, ts, arrival, latency,
    path) and every bandwidth row the same from the compiled modules as from the .py files."""
    native, pure = _digest(dict(os.environ)), _digest(PURE)
    assert not pure["native"] and pure["delivered"] > 1000
    if not native["native"]:
        pytest.skip(f"no native build in use here: {native['build']}")
    assert native == {**pure, "build": native["build"], "native": True}


def test_the_tests_that_patch_compiled_classes_pass_on_the_py_modules():
    """The ``pure_python`` tests (they patch methods of classes the native build compiles): here,
    against the .py files, each of them run and passed."""
    if not native_build.STATUS.native:
        pytest.skip("no native build in use: the pure_python tests ran in this process")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "pure_python",
                           "tests"], cwd=ROOT, capture_output=True, text=True, env=PURE, timeout=900)
    summary = done.stdout.strip().splitlines()[-1]
    assert done.returncode == 0 and int(summary.split(" passed")[0].split()[-1]) >= 9, done.stdout[-4000:]
