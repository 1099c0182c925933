"""User-defined operators that act on seals per key (``key_seals = "close"``, operators/user.py):
the analysis seals them per key, their replicas hand them each key's seal, and a user keyed window
closes per key with the one-copy reference's output in any interleaving (Blazes §V-B1)."""

import random
from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st

from replicast.engine.query_file import parse_query
from replicast.examples.user_operators import Rises, ServerPeak
from replicast.operators.coordination import Coordination
from replicast.operators.errors import QueryError
from replicast.operators.key_seals import KeySealing, key_sealing
from replicast.operators.record import CLOSED
from replicast.operators.replica import OperatorReplica
from tests.operators.test_key_seals import producers, run_chain

USER_SEALING = KeySealing(("k",), closes=True, port_positions=((1,),))


def query_text(extra: str = "", cls: str = "ServerPeak", seal: bool = True) -> str:
    streams = "".join(f'[[streams]]\nname = "{n}"\nfields = {{ server = "str", load = "float" }}\n'
                      + ('seal = ["server"]\n' if seal else "") + "\n" for n in ("east", "west"))
    return streams + f"""
[[operators]]
name = "cpu"
kind = "union"
inputs = ["east", "west"]

[[operators]]
name = "peak"
kind = "python"
input = "cpu"
class = "replicast.examples.user_operators:{cls}"
fields = {{ server = "str", load = "float" }}
{extra}

[[applications]]
name = "out"
input = "peak"
"""


def test_the_analysis_seals_a_user_operator_per_key_only_where_it_declares_it_closes():
    query = parse_query(query_text(), "q.toml")
    decision = query.coordination.by_name["peak"]
    assert decision.coordination is Coordination.SEAL_KEY and decision.key_seal == frozenset({"server"})
    assert "key_seals" in decision.why and "on_key_seal" in decision.why
    assert key_sealing(query, "peak") == KeySealing(("server",), closes=True, port_positions=((1,),))
    # declared "ignore" (the query table wins over the class): whole-stream punctuations, as before
    ignoring = parse_query(query_text('key_seals = "ignore"'), "q.toml")
    assert ignoring.coordination.by_name["peak"].coordination is Coordination.SEAL_PUNCTUATION
    assert key_sealing(ignoring, "peak") is None
    # unsealed sources: nothing to close on
    assert parse_query(query_text(seal=False), "q.toml").coordination.by_name["peak"].coordination \
        is Coordination.SEAL_PUNCTUATION
    # an OW_{server} operator (no window): sorted, each key's sorted prefix released at its seal
    rises = parse_query(query_text('key_seals = "close"', cls="Rises"), "q.toml")
    assert rises.coordination.by_name["peak"].coordination is Coordination.SEAL_KEY
    assert rises.coordination.by_name["peak"].seal_sorts and rises.order_sensitive("peak")


@pytest.mark.parametrize("cls, extra, message", [
    ("ServerPeak", 'key_seals = "yes"', "(key_seals): expected one of 'ignore', 'close', got 'yes'"),
    ("Distinct", 'key_seals = "close"', "(key_seals): 'close' needs an order-sensitive label (OR, OW) with a gate "
                                        "naming the sealed fields, got CW"),
    ("EveryNth", 'key_seals = "close"', "(key_seals): 'close' needs an order-sensitive label (OR, OW) with a gate "
                                        "naming the sealed fields, got OW_*"),
    ("ServerPeak", 'gate = ["window"]', None),
])
def test_a_bad_key_seals_declaration_is_one_line_naming_the_operator(cls, extra, message):
    if message is None:                              # a gate the seal is not compatible with: no seal, no error
        query = parse_query(query_text(extra, cls=cls), "q.toml")
        assert query.coordination.by_name["peak"].coordination is Coordination.SEAL_PUNCTUATION
        assert key_sealing(query, "peak") is None
        return
    with pytest.raises(QueryError) as error:
        parse_query(query_text(extra, cls=cls), "q.toml")
    assert "q.toml: operator 'peak'" in str(error.value) and message in str(error.value)
    assert "\n" not in str(error.value)


def server_peak_replica(k=1, interval_ms=0.01):
    return OperatorReplica(ServerPeak(interval_ms), [k], sealing=USER_SEALING)


def test_a_user_keyed_window_closes_at_its_keys_seal_before_the_punctuation():
    replica = server_peak_replica()
    assert replica.operator.key_seal_fields == ("k",)
    replica.on_batch(0, 0, [(3, "a", 1.0), (4, "b", 2.0), (5, "a", 4.0), (12, "a", 1.0)])
    assert replica.on_key_seals(0, 0, [(("a",), 8)]) == ([], [])             # [0, 10) could still get a at 9
    assert replica.on_key_seals(0, 0, [(("a",), 9)]) == ([(9, "a", 4.0)], [])
    assert replica.on_batch(0, 0, [(7, "a", 9.0)]) == ([], None)            # behind a's seal: dropped
    assert replica.late_for_seal == 1
    assert replica.on_batch(0, 0, [], 9) == ([(9, "b", 2.0)], 9)             # the punctuation closes b's only
    assert replica.on_batch(0, 0, [], CLOSED) == ([(19, "a", 1.0)], CLOSED)


def test_a_user_operator_declaring_nothing_gets_no_seals():
    replica = OperatorReplica(Rises(), [1], sort_inputs=True)               # no KeySealing: the analysis gave none
    replica.on_batch(0, 0, [(3, "a", 1.0), (5, "a", 2.0)])
    assert replica.on_key_seals(0, 0, [(("a",), 9)]) == ([], [])


def reference(streams, interval_ms):
    operator = ServerPeak(interval_ms)
    operator.on_batch(0, sorted(r for records in streams for r in records))
    return Counter(operator.on_punctuation(0, CLOSED)[0])


@settings(max_examples=150, deadline=None)
@given(producers(), st.integers(0, 2**32), st.sampled_from([0.01, 0.007]), st.sampled_from([None, 0.5]))
def test_a_sealed_user_keyed_window_equals_the_one_copy_reference_in_any_interleaving(streams, seed, interval,
                                                                                      snapshot_at):
    # producers replicated twice, two Union replicas with their own interleavings, a consumer replica with a
    # third, seals as high as each producer's records allow, optionally snapshotted into a fresh replica halfway
    got = run_chain(streams, lambda k: server_peak_replica(k, interval), random.Random(seed), snapshot_at=snapshot_at)
    assert got == reference(streams, interval)


def test_sealed_user_keyed_windows_close_before_the_punctuation_in_a_chain():
    # one producer per key, a seal after every record: the key's intervals close at its own seals
    streams = [[(t, "k00", float(t)) for t in range(0, 60, 3)], [(t, "k10", 1.0) for t in range(1, 60, 4)]]
    closed = []
    original = ServerPeak.on_key_seal

    class Counting(ServerPeak):
        def on_key_seal(self, port, key, p):
            out = original(self, port, key, p)
            closed.extend(out)
            return out

    got = run_chain(streams, lambda k: OperatorReplica(Counting(0.01), [k], sealing=USER_SEALING),
                    random.Random(3))
    assert got == reference(streams, 0.01) and closed


# -- end to end: replay (replicas, crashes) and the simulator's node-core tier ---------------------

EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[2] / "examples"


def test_replay_hands_seals_to_the_user_operator_through_replicas_and_crashes(monkeypatch):
    from replicast.engine.event_file import read_events
    from replicast.engine.query_file import load_query
    from replicast.engine.replay import replay

    query = load_query(EXAMPLES / "keyed-seal-user.toml")
    inputs = read_events(EXAMPLES / "keyed-seal-events.jsonl", query)
    closed = []
    original = ServerPeak.on_key_seal

    def counting(self, port, key, p):
        out = original(self, port, key, p)
        closed.extend(out)
        return out

    monkeypatch.setattr(ServerPeak, "on_key_seal", counting)
    reference = Counter(replay(query, inputs, replicas=1, punctuation_us=1_000_000).outputs["per_server"])
    assert not closed and len(reference) == 600                  # the reference run ignores seals
    for seed in range(3):
        result = replay(query, inputs, replicas=3, seed=seed, crash=2, punctuation_us=1_000_000)
        assert Counter(result.outputs["per_server"]) == reference, seed
    assert len(closed) > 1000                                     # most intervals were closed by a seal


def test_the_simulator_closes_a_user_keyed_window_per_key_sooner_with_the_same_output(tmp_path):
    """The node-core tier on 20 s of the Seattle trace, 5 producers at 40–225 ms: declared
    ``key_seals = "close"`` against ``"ignore"``, the same sources and seed.  Simulated time only."""
    from replicast.examples.make_keyed_seal import PRODUCERS_5, scenario_text, user_query_text
    from replicast.simulator.run import Prepared, run
    from replicast.simulator.scenario import load_scenario

    delivered, outputs = {}, {}
    for mode in ("close", "ignore"):
        text = user_query_text(5).replace('key_seals = "close"', f'key_seals = "{mode}"')
        (tmp_path / f"{mode}.toml").write_text(text)
        (tmp_path / f"sim-{mode}.toml").write_text(scenario_text(f"{mode}.toml", PRODUCERS_5, 20)
                                                    .replace("load = [", "peak = ["))     # the operator's name
        result = run(Prepared(load_scenario(tmp_path / f"sim-{mode}.toml")), 1, keep_records=True)
        records = result.recorder.outputs["per_server"]
        arrivals = result.recorder.deliveries().column("arrival").to_numpy()
        delivered[mode] = {record: arrival - record[0] for record, arrival in zip(records, arrivals)}
        outputs[mode] = Counter(records)
    assert outputs["close"] == outputs["ignore"] and sum(outputs["close"].values()) >= 80
    nearest = [r for r in delivered["close"] if r[1] == PRODUCERS_5[0]]
    # seattle-13 (40 ms away) no longer waits for seattle-21 (225 ms): every one of its intervals is sooner,
    # but the last, which the sources' final punctuation closes in both runs
    last = max(r[0] for r in nearest)
    assert all(delivered["close"][r] < delivered["ignore"][r] for r in nearest if r[0] < last) and len(nearest) > 10


# -- the consistency checker sends seals too ------------------------------------------------------

def checker_inputs(rng):
    return [[(rng.randrange(0, 5_000_000), f"s{rng.randrange(4)}", rng.choice([0.1, 0.5, 0.9, 1e16]))
             for _ in range(60)]]


class EarlyPeak(ServerPeak):
    """A broken promise: closes the interval its key's seal falls in, before the seal covers it."""

    def on_key_seal(self, port, key, p):
        return self._close(p + self.interval, key[0])


def test_the_consistency_checker_sends_seals_and_catches_an_operator_that_closes_too_early():
    from replicast.operators.testing import check_replica_consistency

    rng = random.Random(5)
    assert check_replica_consistency(lambda: ServerPeak(1000), checker_inputs(rng), rng, trials=30,
                                     key_seals={"server": 1}) == []
    rng = random.Random(5)
    problems = check_replica_consistency(lambda: EarlyPeak(1000), checker_inputs(rng), rng, trials=30,
                                         key_seals={"server": 1})
    assert problems and "output differs from trial 0" in problems[0]
    # without seals the broken on_key_seal is never called: the checker could not see it
    rng = random.Random(5)
    assert check_replica_consistency(lambda: EarlyPeak(1000), checker_inputs(rng), rng, trials=30) == []
