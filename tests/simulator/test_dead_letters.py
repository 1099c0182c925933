"""A simulated run whose entry points reject input says how many items and why (docs/simulator.md, "Outputs")."""

import logging

from replicast.engine.node import DeadLetter
from replicast.experiments.simulate_cli import _warn_dead_letters
from replicast.simulator.recorder import DEAD_LETTER_REASONS, Recorder


def test_the_recorder_counts_dead_letters_by_stream_and_reason_and_caps_the_distinct_reasons():
    recorder = Recorder(["app"], network=None)
    for _ in range(3):
        recorder.dead_letter("e1", DeadLetter("cpu", "late: ts 5 behind punctuation 9", {"ts": 5}))
    for i in range(DEAD_LETTER_REASONS + 4):
        recorder.dead_letter("e1", DeadLetter("ping", f"malformed: field {i}", {}))
    assert recorder.dead_letters == 3 + DEAD_LETTER_REASONS + 4
    assert recorder.dead_letter_reasons["cpu: late: ts 5 behind punctuation 9"] == 3
    assert len(recorder.dead_letter_reasons) == DEAD_LETTER_REASONS + 1
    assert recorder.dead_letter_reasons["other reasons"] == 5
    assert sum(recorder.dead_letter_reasons.values()) == recorder.dead_letters


def test_a_run_with_dead_letters_warns_and_says_when_nothing_was_delivered(caplog):
    with caplog.at_level(logging.WARNING, logger="replicast.simulate"):
        _warn_dead_letters({"kmax": 2, "delivered": 0, "dead_letters": 40,
                            "dead_letter_reasons": {"cpu_1: malformed: unexpected field 'ts'": 40}})
        _warn_dead_letters({"kmax": 3, "deployment": "min-cost", "delivered": 7, "dead_letters": 0})
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert "kmax=2: 40 input items rejected as dead letters, nothing delivered" in message
    assert "cpu_1: malformed: unexpected field 'ts' (40)" in message
