"""The shipped Seattle trace, loaded once per test process."""

import numpy as np
import pytest


@pytest.fixture(scope="session")
def seattle_frames() -> np.ndarray:
    from replicast.traces.store import TraceStore

    store = TraceStore.open("seattle")
    return np.concatenate([chunk for _, chunk in store.chunks()]).astype(float)
