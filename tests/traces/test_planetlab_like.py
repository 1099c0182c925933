"""``replicast trace synth --like planetlab``: PlanetLab's static structure, Seattle's dynamics."""

import json

import numpy as np
import pytest

from replicast.engine.cli import main
from replicast.traces import calibrate
from replicast.traces.store import TraceStore
from tests.traces.conftest import NETLATENCY

PLANETLAB_FRAMES = NETLATENCY / "PlanetLab"


def frames_of(path):
    store = TraceStore.open(path)
    return np.stack([store.frame(k) for k in range(store.n_frames)])


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    out = tmp_path_factory.mktemp("pl") / "pl"
    assert main(["-q", "trace", "synth", "--like", "planetlab", "--nodes", "60", "--duration", "3h",
                 "--seed", "4", "--out", str(out)]) == 0
    return out


def test_per_pair_medians_follow_the_planetlab_frames(trace):
    """The static structure: the distribution of per-pair median RTTs is PlanetLab's (shipped
    summary of its 18 frames), within 5 % at the 10th to 99th percentiles, and symmetric like it."""
    static = json.loads(calibrate.PLANETLAB_STATIC.read_text())
    assert len(calibrate.PLANETLAB_STATIC.read_bytes()) < 1_000_000
    frames = frames_of(trace)
    off = ~np.eye(frames.shape[1], dtype=bool)
    medians = np.nanmedian(frames, axis=0)
    expected = np.exp(static["base_log_quantiles"])
    for level in (0.1, 0.5, 0.9, 0.99):
        assert np.quantile(medians[off], level) == pytest.approx(expected[int(level * 1000)], rel=0.05), level
    both = off & ~np.isnan(medians)
    assert np.corrcoef(np.log(medians[both]), np.log(medians.T[both]))[0, 1] > 0.95


def test_dynamics_are_the_seattle_traces(trace):
    """Outages and frame-to-frame memory at Seattle's rates (within 10 %)."""
    real = calibrate.measure(frames_of("seattle"))
    fake = calibrate.measure(frames_of(trace))
    for name in ("outage_rate", "frame_corr"):
        assert fake[name] == pytest.approx(real[name], rel=0.10), (name, fake[name], real[name])
    meta = json.loads((trace / "params.json").read_text())
    assert meta["like"].startswith("planetlab")


@pytest.mark.skipif(not PLANETLAB_FRAMES.is_dir(), reason="the NetLatency PlanetLab frames are not here")
def test_shipped_summary_is_the_frames_summary():
    shipped = json.loads(calibrate.PLANETLAB_STATIC.read_text())
    assert calibrate.planetlab_static_from(PLANETLAB_FRAMES) == shipped
