"""``replicast simulate --jobs``: runs in worker processes write exactly what in-process runs write."""

import json
import logging
from pathlib import Path

import pyarrow.parquet as pq

from replicast.engine.cli import main

DATA = Path(__file__).parent / "data"
# kmax neither ascending nor descending: outcomes gathered in submission order (largest kmax first)
# or in completion order (roughly smallest first) would come out in another order than the one given.
CHAIN = [str(DATA / "chain.toml"), "--kmax", "3", "--kmax", "1", "--kmax", "2", "--duration-s", "120",
         "--check", "--no-progress"]
TIMING = {"wall_s", "hops_per_s"}


def without_timing(summary):
    if isinstance(summary, dict):
        return {key: without_timing(value) for key, value in summary.items() if key not in TIMING}
    if isinstance(summary, list):
        return [without_timing(value) for value in summary]
    return summary


def read_summary(path: Path):
    return without_timing(json.loads(path.read_text()))


def test_workers_write_what_one_process_writes(tmp_path, capsys, caplog):
    caplog.set_level(logging.INFO, logger="replicast.simulate")
    printed = {}
    for jobs in ("1", "2"):
        assert main(["simulate", *CHAIN, "--jobs", jobs, "--out", str(tmp_path / jobs)]) == 0
        printed[jobs] = [line.rsplit(";", 1)[0] for line in capsys.readouterr().out.splitlines()[:-1]]
    one, two = tmp_path / "1", tmp_path / "2"
    for k in (1, 2, 3):
        for table in ("deliveries", "bandwidth"):
            expected = pq.read_table(one / f"k{k}" / f"{table}.parquet")
            got = pq.read_table(two / f"k{k}" / f"{table}.parquet")
            assert got.num_rows > 0 and got.equals(expected), f"k{k}/{table}.parquet"
        assert read_summary(two / f"k{k}" / "summary.json") == read_summary(one / f"k{k}" / "summary.json")
    combined = read_summary(two / "summary.json")
    assert combined == read_summary(one / "summary.json")
    assert [run["kmax"] for run in combined["runs"]] == [3, 1, 2]
    assert all(run["equals_reference"] for run in combined["runs"])
    assert printed["2"] == printed["1"]                     # check lines and per-run lines, in kmax order
    assert printed["1"][0] == "kmax=3: OK, 270 records equal the replay reference"
    # Every run logs its start and end, from the worker processes too.
    messages = [r.getMessage() for r in caplog.records if r.name == "replicast.simulate"]
    for k in (1, 2, 3):
        assert messages.count(f"kmax={k}: run started") == 2
        assert sum(m.startswith(f"kmax={k}: run finished in ") for m in messages) == 2


def test_error_in_a_worker_is_one_line_and_exit_2(tmp_path, capfd):
    # capfd, not capsys: the workers' stderr goes to file descriptor 2 directly.
    code = main(["simulate", str(DATA / "chain.toml"), "--kmax", "1", "--kmax", "9", "--jobs", "2",
                 "--out", str(tmp_path)])
    assert code == 2
    err = capfd.readouterr().err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if "error" in line.lower()]
    assert errors == ["replicast simulate: error: " + str(DATA / "chain.toml") +
                      ": [deployment]: kmax = 9 needs at least 9 servers, the scenario has 7"]
    assert not (tmp_path / "summary.json").exists()


def test_bad_jobs_and_repeated_kmax_are_user_errors(tmp_path, capsys):
    assert main(["simulate", str(DATA / "chain.toml"), "--jobs", "0", "--out", str(tmp_path)]) == 2
    assert "--jobs must be at least 1, got 0" in capsys.readouterr().err
    assert main(["simulate", str(DATA / "chain.toml"), "--kmax", "2", "--kmax", "2", "--out", str(tmp_path)]) == 2
    assert "kmax 2 is given twice" in capsys.readouterr().err
