"""The synthetic trace in process (traces/synth_store.py): frame for frame what ``replicast trace
synth`` writes, in any reading order, with the store's whole interface."""

import numpy as np
import pytest

from replicast.traces import calibrate, synth
from replicast.traces.store import TraceStore
from replicast.traces.synth_store import SynthStore

KWARGS = dict(n_nodes=7, n_frames=100, interval_us=1_000_000, seed=3)


@pytest.fixture(scope="module")
def params():
    return calibrate.like_planetlab(calibrate.fit_store(TraceStore.open("seattle"), max_frames=300))


@pytest.fixture(scope="module")
def written(tmp_path_factory, params):
    out = tmp_path_factory.mktemp("synth") / "t"
    synth.generate(params, out, chunk_rows=5 * 42, **KWARGS)
    return TraceStore.open(out)


def test_in_process_frames_equal_the_written_trace_in_any_order(params, written):
    # small chunks, three checkpoints and one cached chunk: going back restarts from a checkpoint,
    # jumping ahead skips, and both must land on the very frames the writer wrote
    store = SynthStore(params, chunk_frames=9, checkpoints=3, cache_chunks=1, **KWARGS)
    order = [50, 3, 99, 0, 20, 21, 22, 98, 5, 60, 36, 35, *range(100)]
    for k in order:
        np.testing.assert_array_equal(store.frame(k), written.frame(k), err_msg=f"frame {k}")
    assert len(store._checkpoints) <= 4
    assert np.isnan(np.stack([store.frame(k) for k in range(100)])).any()      # outages are there


def test_in_process_store_answers_as_the_written_one(params, written):
    store = SynthStore(params, name=written.meta.name, **KWARGS)
    assert store.meta == written.meta and store.nodes == written.nodes
    assert store.reliable_nodes(4) == written.reliable_nodes(4)
    assert all(store.outages(a, b) == written.outages(a, b) for a in range(7) for b in range(7))
    for t in (0, 1_500_000, 99_999_999, 500_000_000):
        assert store.one_way_us(1, 2, t) == written.one_way_us(1, 2, t)


def test_frames_do_not_depend_on_the_block_sizes(params):
    one = synth.SynthFrames(params, 5, seed=8)
    whole = one.take(40)
    other = synth.SynthFrames(params, 5, seed=8)
    parts = [other.take(1), other.take(12)]
    other.skip(7)
    checkpoint = other.checkpoint()
    parts += [other.take(20)]
    np.testing.assert_array_equal(np.concatenate(parts), np.concatenate([whole[:13], whole[20:]]))
    other.restore(checkpoint)
    np.testing.assert_array_equal(other.take(20), whole[20:])
