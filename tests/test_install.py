"""Installed as a user installs it (docs/install.md): a wheel built from an sdist adds one top-level
name and carries the examples and the shipped trace; ``replicast simulate`` runs from it; the base
install, without the extras, runs ``replicast node --help`` and says in one line which extra a
command lacks; PySpark without Java says so in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tests.integration.helpers import wheel_once

ROOT = Path(__file__).resolve().parents[1]
BASE_BUDGET_MB = 150


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """``python -m build``: an sdist, then a wheel built from the unpacked sdist (so a file missing
    from MANIFEST.in or package data is missing here too). Built once per test run: pytest-xdist
    workers share it behind a lock (two sdist builds at once in the checkout trip over each other)."""
    return wheel_once(tmp_path_factory, "replicast-sdist-wheel", ["--no-isolation"])


def make_venv(path: Path, *, system_site_packages: bool) -> Path:
    venv.EnvBuilder(with_pip=True, system_site_packages=system_site_packages).create(path)
    return path / "bin"


def run(command: list, cwd: Path, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(part) for part in command], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env)


def test_the_wheel_adds_one_top_level_name_and_carries_the_data(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        top_level = archive.read(next(n for n in names if n.endswith(".dist-info/top_level.txt"))).decode().split()
    assert top_level == ["replicast"]
    assert {name.split("/")[0] for name in names} == {"replicast", "-".join(wheel.name.split("-")[:2]) + ".dist-info"}
    for data in ("replicast/examples/sim-fig1.toml", "replicast/examples/fig1.toml",
                 "replicast/examples/cluster-fig1.toml", "replicast/traces/data/seattle/LICENSE",
                 "replicast/traces/data/seattle/CITATION.md", "replicast/traces/data/seattle/nodes.parquet"):
        assert data in names
    assert any(name.startswith("replicast/traces/data/seattle/rtt/") for name in names)


@pytest.mark.slow
def test_replicast_simulate_writes_its_plot_from_the_wheel(wheel, tmp_path):
    """The README's main job from a wheel: the installed package (not this checkout) finds its
    default scenario and the shipped trace. The venv borrows the test environment's packages for
    the extras; the wheel's own replicast comes first on its path."""
    bin_dir = make_venv(tmp_path / "venv", system_site_packages=True)
    done = run([bin_dir / "python", "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel], tmp_path)
    assert done.returncode == 0, done.stderr
    where = run([bin_dir / "python", "-c", "import replicast.examples as e; print(e.__file__)"], tmp_path)
    assert str(tmp_path / "venv") in where.stdout, where.stdout + where.stderr
    done = run([bin_dir / "replicast", "simulate", "--kmax", "1", "--duration-s", "120", "--out", "out"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary and (tmp_path / "out" / "latency.png").stat().st_size > 10_000


@pytest.mark.slow
def test_the_wheels_native_build_runs_until_a_source_beside_it_changes(wheel, tmp_path):
    """Built where mypyc is (the test extra has it), the wheel carries the compiled per-message path
    and its sources' digest: the installed package runs it; after an edit to one of its ``.py`` files
    it runs every native module's ``.py`` file instead, and says so once (replicast/native_build.py)."""
    pytest.importorskip("mypyc.build")
    bin_dir = make_venv(tmp_path / "venv", system_site_packages=True)
    done = run([bin_dir / "python", "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel], tmp_path)
    assert done.returncode == 0, done.stderr
    probe = ["-c", "import replicast.native_build as n, replicast.operators.dedup as d; print(n.status()); print(d.__file__)"]
    done = run([bin_dir / "python", *probe], tmp_path)
    status, dedup = done.stdout.strip().splitlines()
    assert done.returncode == 0 and not done.stderr and status.startswith("native") and dedup.endswith(".so"), \
        done.stdout + done.stderr
    source = Path(dedup).with_name("dedup.py")
    source.write_text(source.read_text() + "\n# edited after the build\n")
    done = run([bin_dir / "python", *probe], tmp_path)
    status, dedup = done.stdout.strip().splitlines()
    assert status.startswith("pure Python (the native build is older than dedup") and dedup == str(source)
    assert done.stderr.count("RuntimeWarning: replicast runs pure Python") == 1


@pytest.mark.slow
def test_the_base_install_runs_a_node_and_names_missing_extras(wheel, tmp_path):
    """A fresh venv with the wheel and its base requirements only (from PyPI, or pip's cache)."""
    bin_dir = make_venv(tmp_path / "venv", system_site_packages=False)
    done = run([bin_dir / "python", "-m", "pip", "install", "-q", "--retries", "2", wheel], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    site = next((tmp_path / "venv" / "lib").glob("python3*/site-packages"))
    size_mb = sum(f.stat().st_size for f in site.rglob("*") if f.is_file()) / 2**20
    assert size_mb <= BASE_BUDGET_MB, f"base install is {size_mb:.0f} MB of site-packages"
    heavy = run([bin_dir / "python", "-c", "import importlib.util as u; print([m for m in "
                 "('numpy', 'pandas', 'pyarrow', 'matplotlib', 'scipy', 'pyspark', 'simpy') if u.find_spec(m)])"],
                tmp_path)
    assert heavy.stdout.strip() == "[]"
    for command in (["--version"], ["--help"], ["node", "--help"], ["cluster", "up", "--help"], ["simulate", "--help"]):
        done = run([bin_dir / "replicast", *command], tmp_path)
        assert done.returncode == 0 and not done.stderr, (command, done.stderr)
    done = run([bin_dir / "replicast", "simulate", "--kmax", "1"], tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "replicast simulate: error: needs " + done.stderr.split("needs ")[1].split(",")[0]
        + ", which the 'sim' extra installs: python3 -m pip install 'replicast[sim]'"]
    done = run([bin_dir / "replicast", "experiment", "fig3"], tmp_path)
    assert done.returncode == 2 and "'replicast[all]'" in done.stderr and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.spark
def test_pyspark_without_java_says_so_in_one_line(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "JAVA_HOME"}
    env["PATH"] = str(Path(sys.executable).parent)      # no java on it
    trace = tmp_path / "t.csv"
    trace.write_text("src,dst,rtt_ms\na,b,10\n")
    done = run([sys.executable, "-m", "replicast", "trace", "ingest", trace, "--out", tmp_path / "out"], tmp_path, env)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        "replicast trace: error: PySpark needs Java 17 or newer, and there is none (no java on PATH and no "
        "JAVA_HOME): install one (Debian/Ubuntu: sudo apt-get install openjdk-17-jre-headless) or set JAVA_HOME to it"]
