"""Frames cut by the ends of reads (transport §2.3): however the bytes of a stream are split
into reads, the engine handles the same frames in the same order, and a bad frame header is
refused even when it arrives a byte at a time.

The engine copies only the frame a read cut (router/amqp/cutframe.py), not the
read it joins; these tests hold that shortcut to the plain reading of the stream."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from router.amqp import errors as E
from router.amqp.events import TransferReceived
from router.amqp.performatives import Close
from router.testing.enginepair import RawPeer, attach_pair, begin_pair, bodies, connected_pair

from .support.engine_pairs import client_config, server_config

HEARTBEAT = b"\x00\x00\x00\x08\x02\x00\x00\x00"  # an empty frame (transport §2.4.5)
MAX_FRAME = 4096  # small, so that larger messages go in several frames


def _sender_stream(sizes: list[int]) -> tuple[Any, bytes]:
    """A fresh pair with a link attached and credit granted, and the bytes its client then sends:
    one message per size (several frames when larger than a frame), a heartbeat between each."""
    pair, cs, ss = connected_pair(client_config(max_frame_size=MAX_FRAME), server_config(max_frame_size=MAX_FRAME))
    sender, _ = attach_pair(pair, cs, ss, credit=len(sizes) + 1)
    stream = []
    for number, size in enumerate(sizes):
        sender.send_transfer(number.to_bytes(2, "big"), bytes([number % 251]) * size)
        stream += [pair.client.data_to_send(), HEARTBEAT]
    return pair, b"".join(stream)


def _received(pair: Any, reads: list[bytes]) -> list[tuple[bytes, bytes, bool]]:
    """(tag, payload, more) of every transfer frame the server handled from `reads`."""
    frames = []
    for read in reads:
        pair.server.receive_data(read, 0.0)
        frames += [(e.delivery_tag, bytes(e.payload), e.more) for e in pair.server.events() if isinstance(e, TransferReceived)]
    assert not pair.server.failed
    return frames


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:])]


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([0, 1, 100, MAX_FRAME - 200, MAX_FRAME, 3 * MAX_FRAME + 7]), min_size=1, max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=10**6), max_size=40),
)
def test_any_split_of_the_stream_gives_the_same_frames(sizes: list[int], cuts: list[int]) -> None:
    whole_pair, stream = _sender_stream(sizes)
    expected = _received(whole_pair, [stream])
    assert b"".join(p for _, p, _ in expected) == b"".join(bytes([n % 251]) * s for n, s in enumerate(sizes))
    cut_pair, same_stream = _sender_stream(sizes)
    assert same_stream == stream  # (the engines are deterministic)
    assert _received(cut_pair, _cut(stream, cuts)) == expected


def test_a_large_frame_a_byte_at_a_time() -> None:
    pair, stream = _sender_stream([MAX_FRAME - 200, 10])
    bytewise = [stream[i : i + 1] for i in range(len(stream))]
    assert [(len(p), more) for _, p, more in _received(pair, bytewise)] == [(MAX_FRAME - 200, False), (10, False)]


def _refused(pieces: list[bytes]) -> list[Any]:
    peer = RawPeer()
    peer.handshake()
    peer.begin(1)
    for piece in pieces:
        peer.feed(piece)
    assert peer.engine.failed
    return [c.error.condition for c in bodies(peer.output(), Close)]


def test_a_bad_header_cut_across_reads_is_refused_at_once() -> None:
    too_large = (70000).to_bytes(4, "big") + b"\x02\x00\x00\x01"  # above the default max-frame-size
    # (the rest of such a frame never comes: the engine must not wait for it)
    assert _refused([too_large[:3], too_large[3:6], too_large[6:]]) == [E.FRAMING_ERROR]
    too_small = (5).to_bytes(4, "big") + b"\x02\x00\x00\x01"
    assert _refused([too_small[:1], too_small[1:]]) == [E.FRAMING_ERROR]
    bad_offset = (64).to_bytes(4, "big") + b"\x01\x00\x00\x01"  # doff 1 < 2
    assert _refused([bad_offset[:7], bad_offset[7:], b"\x00" * 10]) == [E.FRAMING_ERROR]


def _two_session_stream(ops: list[tuple[str, int]]) -> tuple[Any, bytes]:
    """A fresh pair with two sessions, a link on each with credit, and the bytes its client
    then sends for `ops`: ("send", s) a message on session s, ("end", s) s ends (nothing more
    is sent on it)."""
    pair, cs0, ss0 = connected_pair()
    cs1, ss1 = begin_pair(pair)
    sessions = [(cs0, ss0), (cs1, ss1)]
    senders = [attach_pair(pair, cs, ss, f"l{n}", credit=len(ops) + 1)[0] for n, (cs, ss) in enumerate(sessions)]
    ended: set[int] = set()
    for number, (op, s) in enumerate(ops):
        if s in ended:
            continue
        if op == "send":
            senders[s].send_transfer(number.to_bytes(2, "big"), bytes([number % 251]) * 20)
        else:
            [cs0, cs1][s].end()
            ended.add(s)
    return pair, pair.client.data_to_send()


def _handled(pair: Any, reads: list[bytes]) -> list[tuple[Any, ...]]:
    """What the server made of `reads`: each event's kind, session channel and transfer."""
    seen: list[tuple[Any, ...]] = []
    for read in reads:
        pair.server.receive_data(read, 0.0)
        for event in pair.server.events():
            if isinstance(event, TransferReceived):
                link = event.link
                seen.append(("transfer", link.name, link.session.channel, event.delivery_id, bytes(event.payload)))
            else:
                seen.append((type(event).__name__,))
    assert not pair.server.failed
    return seen


SESSION_OPS = st.lists(st.tuples(st.sampled_from(["send", "send", "send", "end"]), st.integers(0, 1)), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(SESSION_OPS)
def test_frames_of_several_sessions_in_one_read_reach_their_own_sessions(ops: list[tuple[str, int]]) -> None:
    """The frame loop remembers the session of the last channel it looked up: frames of two
    sessions interleaved in one read, with sessions ending between them, reach their own
    sessions, as when each frame comes in a read of its own."""
    pair, stream = _two_session_stream(ops)
    one_read = _handled(pair, [stream])
    expected, ended = [], set()
    for number, (op, s) in enumerate(ops):
        if s in ended:
            continue
        if op == "end":
            ended.add(s)
        else:
            expected.append((f"l{s}", bytes([number % 251]) * 20))
    assert [(e[1], e[4]) for e in one_read if e[0] == "transfer"] == expected
    framed_pair, same_stream = _two_session_stream(ops)
    assert same_stream == stream  # (the engines are deterministic)
    frames, at = [], 0
    while at < len(stream):
        size = int.from_bytes(stream[at : at + 4], "big")
        frames.append(stream[at : at + size])
        at += size
    assert _handled(framed_pair, frames) == one_read
