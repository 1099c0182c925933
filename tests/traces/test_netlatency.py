"""The NetLatency matrix reader: units, diagonal, missing values, and errors that name file and line."""

import numpy as np
import pytest

from replicast.traces import netlatency
from replicast.traces.errors import TraceError

GOOD = "0\t0.17\t0.32\n0.12\t0\t0\n0.30\t0.05\t0\n"


def test_parse_and_convert_seconds_to_ms_dropping_diagonal_and_zeros():
    matrix = netlatency.parse_matrix(GOOD, "SeattleData_1")
    table = netlatency.matrix_to_table(matrix, 20_000_000, "s")
    rows = {(s, d): r for s, d, r in zip(*(table.column(c).to_pylist() for c in ("src", "dst", "rtt_ms")))}
    assert len(rows) == 6  # 3 x 3 minus the diagonal
    assert rows[(0, 1)] == 170.0 and rows[(2, 0)] == 300.0 and rows[(2, 1)] == 50.0
    assert rows[(1, 2)] is None  # 0 = no measurement
    assert set(table.column("t").to_pylist()) == {20_000_000}


@pytest.mark.parametrize(
    "text, where",
    [
        ("0 1 2\n1 0\n2 1 0\n", r"bad_7:2: row has 2 values, expected 3"),
        ("0 1 2\n1 0 x3\n2 1 0\n", r"bad_7:2: column 3: 'x3' is not a number"),
        ("0 1 2\n1 0 3\n2 -1 0\n", r"bad_7:3: column 2: RTT -1 is negative"),
        ("0 1 2\n1 0 3\n", r"bad_7: 2 rows of 3 values; expected a square"),
        ("0 1\n1 nan\n", r"bad_7:2: column 2: RTT nan is negative or not finite"),
    ],
)
def test_malformed_matrices_name_file_line_and_reason(text, where):
    with pytest.raises(TraceError, match=where):
        netlatency.parse_matrix(text, "bad_7")


def test_wrong_width_against_expected_size():
    with pytest.raises(TraceError, match=r"f_2:1: row has 2 values, expected 3"):
        netlatency.parse_matrix("0 1\n1 0\n", "f_2", n_expected=3)


def test_frame_number_and_units():
    assert netlatency.frame_number("x/SeattleData_688") == 688
    assert netlatency.unit_for("SeattleData_3") == "s"
    assert netlatency.unit_for("PlanetLabData_3") == "ms"
    assert netlatency.unit_for("Other_3", "us") == "us"
    with pytest.raises(TraceError, match="--unit"):
        netlatency.unit_for("Other_3")
    with pytest.raises(TraceError, match="frame number"):
        netlatency.frame_number("README")


def test_frame_files_sorted_numerically(tmp_path):
    for k in (10, 2, 1):
        (tmp_path / f"M_{k}").write_text(GOOD)
    assert [p.name for p in netlatency.frame_files(tmp_path)] == ["M_1", "M_2", "M_10"]
    np.testing.assert_array_equal(netlatency.parse_matrix(GOOD, "x")[0], [0, 0.17, 0.32])
