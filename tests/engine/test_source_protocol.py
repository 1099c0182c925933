"""The pure side of a node's source port (engine/source_protocol.py): line framing within a byte
bound whatever the chunking, the source challenge, the phase table, and ``[source_connections]``
in the cluster file (errors name file, key and value)."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from replicast.engine.cluster_config import ClusterConfigError
from replicast.engine.source_protocol import (Auth, LineFramer, Phase, SourceLimits, Step, advance, answer, challenge,
                                              check_answer, parse_source_limits)
from tests.engine.test_config_errors import cluster

LIMIT = 16


def reference(stream: bytes, limit: int) -> tuple[list[bytes], int]:
    """What the framer must return for ``stream`` fed at once: every newline-terminated line up to
    ``limit`` bytes, the longer ones counted (the unterminated tail is never a line here)."""
    *complete, tail = stream.split(b"\n")
    return [line for line in complete if len(line) <= limit], sum(len(line) > limit for line in complete) + (
        len(tail) > limit)


@given(st.lists(st.sampled_from([b"a", b"bb", b"\n", b"x" * 20, b"cpu {}", b"\n\n"]), max_size=40),
       st.lists(st.integers(1, 30), max_size=40))
def test_lines_and_refusals_do_not_depend_on_how_the_bytes_are_chunked(pieces, cuts):
    stream = b"".join(pieces)
    framer, lines, at = LineFramer(LIMIT), [], 0
    for cut in cuts:
        lines += framer.feed(stream[at:at + cut])
        assert framer.held <= LIMIT
        at += cut
    lines += framer.feed(stream[at:])
    assert framer.held <= LIMIT
    assert (lines, framer.overlong) == reference(stream, LIMIT)


def test_an_overlong_line_is_skipped_to_its_newline_and_the_next_line_is_read():
    framer = LineFramer(8)
    assert framer.feed(b"ok 1\n" + b"y" * 5) == [b"ok 1"]
    assert framer.feed(b"y" * 1000) == [] and framer.overlong == 1 and framer.held == 0
    assert framer.feed(b"y" * 1000 + b"tail\nok 2\nok") == [b"ok 2"]      # still the same refused line
    assert framer.overlong == 1
    assert framer.feed(b" 3\n") == [b"ok 3"]
    assert framer.feed(b"last") == [] and framer.finish() == b"last"


def test_garbage_without_newlines_holds_at_most_the_limit():
    framer = LineFramer(64 * 1024)
    for _ in range(100):
        framer.feed(b"\x00" * 60_000)
        assert framer.held <= 64 * 1024
    assert framer.overlong == 1 and framer.finish() is None


def test_the_challenge_is_answered_with_the_secret_only():
    nonce = bytes(range(16))
    line = answer(b"cluster-secret", challenge(nonce))
    assert line.startswith(b"AUTH ") and line.endswith(b"\n")
    assert check_answer(b"cluster-secret", nonce, line)
    assert not check_answer(b"another-secret", nonce, line)
    assert not check_answer(b"cluster-secret", bytes(16), line)            # another connection's nonce
    for bad in (b"", b"AUTH", b"AUTH zz", b"cpu {}", line.replace(b"AUTH", b"auth")):
        assert not check_answer(b"cluster-secret", nonce, bad)


def test_phases_move_only_along_the_table():
    assert advance(Phase.CHALLENGED, Step.ANSWERED) is Phase.OPEN
    assert advance(Phase.TLS_HANDSHAKE, Step.TLS_DONE) is Phase.OPEN
    with pytest.raises(ValueError, match="cannot go from 'reading lines' by 'answered'"):
        advance(Phase.OPEN, Step.ANSWERED)


def test_defaults_are_the_documented_ones():
    assert parse_source_limits({}, "c.toml: [source_connections]", ClusterConfigError, has_tls=False) == SourceLimits(
        max_connections=256, max_line_bytes=65536, idle_timeout_s=300.0, auth=Auth.NONE)


def test_the_cluster_file_sets_the_limits(tmp_path):
    from replicast.engine.cluster_config import load_cluster
    path = cluster(tmp_path, outputs="[source_connections]\nmax_connections = 8\nmax_line_bytes = 4096\n"
                                     "idle_timeout_s = 2.5\nauth = \"secret\"\n")
    assert load_cluster(path).source_connections == SourceLimits(8, 4096, 2.5, Auth.SECRET)


@pytest.mark.parametrize("line, message", [
    ("max_connections = 0", "[source_connections]: max_connections must be a whole number in 1-65536, got 0"),
    ("max_line_bytes = 1.5", "[source_connections]: max_line_bytes must be a whole number in 64-67108864, got 1.5"),
    ("idle_timeout_s = -1", "[source_connections]: idle_timeout_s must be a number in 0.01-86400, got -1"),
    ("auth = \"password\"", "[source_connections]: auth must be one of 'none', 'secret', 'tls', got 'password'"),
    ("auth = \"tls\"", "[source_connections]: auth = \"tls\" needs the cluster's [tls] table"),
    ("max_conections = 3", "[source_connections]: unknown key(s) ['max_conections']"),
])
def test_a_bad_value_names_the_file_the_key_and_the_value(tmp_path, line, message):
    from replicast.engine.cluster_config import load_cluster
    path = cluster(tmp_path, outputs=f"[source_connections]\n{line}\n")
    with pytest.raises(ClusterConfigError) as error:
        load_cluster(path)
    assert str(error.value).startswith(f"{path}: {message}")
