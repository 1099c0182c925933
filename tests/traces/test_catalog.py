"""Trace names and paths."""

import pytest

from replicast.traces import catalog
from replicast.traces.errors import TraceError


def test_resolves_the_shipped_name_and_a_path(tmp_path):
    path = catalog.resolve("seattle")
    assert (path / "meta.json").is_file()
    assert catalog.resolve(str(path)) == path


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(TraceError, match=r"'nope' is neither a known trace \(seattle, planetlab490\)"):
        catalog.resolve("nope")


def test_directory_without_meta(tmp_path):
    with pytest.raises(TraceError, match="no meta.json"):
        catalog.resolve(tmp_path)


def test_unbuilt_planetlab_says_how_to_build_it(tmp_path, monkeypatch):
    monkeypatch.setenv("REPLICAST_TRACE_DIR", str(tmp_path))
    with pytest.raises(TraceError, match="replicast trace build planetlab490"):
        catalog.resolve("planetlab490")
    assert ("planetlab490", tmp_path / "planetlab490", False) in catalog.available()
