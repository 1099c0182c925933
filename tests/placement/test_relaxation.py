"""Spring relaxation (Pietzuch et al., ICDE 2006): equilibria by hand, then the nearest eligible server."""

import numpy as np
import pytest

from replicast.operators.plan import ReplicaId
from replicast.placement.coordinates import Coordinates
from replicast.placement.errors import PlacementError
from replicast.placement.model import Network, Workload
from replicast.placement.relaxation import initial_placement, relax
from tests.placement.instances import chain

POSITIONS_MS = [0.0, 20.0, 45.0, 70.0, 100.0]


def network(heights_ms=(0, 0, 0, 0, 0), capacity=(1, 1, 1, 1, 1)) -> Network:
    x = np.array(POSITIONS_MS) / 1000
    coordinates = Coordinates(np.c_[x, np.zeros(5)], np.array(heights_ms) / 1000, np.zeros(5), np.zeros(5))
    latency = np.abs(x[:, None] - x[None]) * 1000
    return Network(tuple(f"s{i}" for i in range(5)), latency, np.array(capacity, float), np.zeros(5), coordinates)


def rates(workload, **r):
    return Workload(workload.streams, workload.operators, workload.applications, workload.inputs, r, workload.load,
                    workload.pinned)


def test_equal_springs_meet_in_the_middle():
    points = relax(network(), rates(chain(0, 4), e=1.0, o=1.0))
    assert points["o"] * 1000 == pytest.approx([50.0, 0.0])
    assert initial_placement(network(), rates(chain(0, 4), e=1.0, o=1.0), alpha=0.9).hosts[ReplicaId("o", 0)] == 2


def test_a_stiffer_spring_pulls_harder():
    workload = rates(chain(0, 4), e=3.0, o=1.0)                   # (3·0 + 1·100) / 4 = 25 ms
    assert relax(network(), workload)["o"][0] * 1000 == pytest.approx(25.0)
    assert initial_placement(network(), workload, alpha=0.9).hosts[ReplicaId("o", 0)] == 1


def test_a_chain_spreads_evenly():
    workload = rates(chain(0, 4, operators=("o", "p")), e=1.0, o=1.0, p=1.0)
    points = relax(network(), workload)
    assert [points["o"][0] * 1000, points["p"][0] * 1000] == pytest.approx([100 / 3, 200 / 3])
    deployment = initial_placement(network(), workload, alpha=0.9)
    assert (deployment.hosts[ReplicaId("o", 0)], deployment.hosts[ReplicaId("p", 0)]) == (2, 3)


def test_height_and_load_push_an_operator_to_the_next_nearest_server():
    workload = rates(chain(0, 4), e=1.0, o=1.0)
    assert initial_placement(network(heights_ms=(0, 0, 40, 0, 0)), workload, alpha=0.9).hosts[ReplicaId("o", 0)] == 3
    assert initial_placement(network(capacity=(1, 1, 0.1, 1, 1)), workload, alpha=0.9).hosts[ReplicaId("o", 0)] == 3


def test_no_room_anywhere_is_an_error():
    with pytest.raises(PlacementError, match="operator 'o': no server has room"):
        initial_placement(network(capacity=(0.1,) * 5), rates(chain(0, 4), e=1.0, o=1.0), alpha=0.9)


def test_relaxation_needs_coordinates():
    plain = network()
    plain = Network(plain.servers, plain.latency_ms, plain.capacity, plain.load)
    with pytest.raises(PlacementError, match="coordinates"):
        relax(plain, rates(chain(0, 4), e=1.0, o=1.0))
