"""The engine's output in pieces for a gathered write (Connection.chunks_to_send): the same bytes
data_to_send gives, with the payloads that are views of reads handed on as they are (the
driver writes them with writev: a large message goes from the read it arrived in to the next
socket without a copy)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from router.testing.enginepair import attach_pair, connected_pair

from .support.engine_pairs import client_config, server_config

READ = bytes(range(256)) * 64  # a read's bytes, 16 KiB


def _sending(payloads: list[bytes | memoryview]) -> tuple[list[bytes | memoryview], bytes]:
    """Two identical senders send `payloads`: one's output as chunks, the other's joined."""
    outputs = []
    for _ in range(2):
        pair, cs, ss = connected_pair(client_config(), server_config())
        sender, _ = attach_pair(pair, cs, ss, credit=len(payloads) + 1)
        for number, payload in enumerate(payloads):
            sender.send_transfer(number.to_bytes(2, "big"), payload)
        outputs.append(pair.client)
    return outputs[0].chunks_to_send(), outputs[1].data_to_send()


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, len(READ) - 1), st.integers(0, 12000)), max_size=8))
def test_chunks_are_the_joined_output_with_views_kept_as_they_are(spec: list[tuple[bool, int, int]]) -> None:
    payloads: list[bytes | memoryview] = [
        memoryview(READ)[start : start + size] if view else READ[start : start + size] for view, start, size in spec
    ]
    chunks, joined = _sending(payloads)
    assert b"".join(chunks) == joined
    views = [p for p in payloads if isinstance(p, memoryview)]
    # every view is a chunk of its own, the very object given (not a copy); the rest is joined
    assert [c for c in chunks if isinstance(c, memoryview)] == views
    assert all(any(c is v for c in chunks) for v in views)
    assert len(chunks) <= 2 * len(views) + 1


def test_nothing_queued_is_no_chunks() -> None:
    pair, _, _ = connected_pair(client_config(), server_config())
    assert pair.client.chunks_to_send() == []
