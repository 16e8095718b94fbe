"""The hot-path frame parsers and writers (router.amqp.fastpath) agree with the general,
validating codec: every transfer, flow and disposition the general encoder writes parses to the
same fields (or fails the same way), every prefix of one is refused with DecodeError, and the
frames the fast writer builds decode to the transfer it was asked for."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.amqp import messaging as m
from router.amqp.connection import Connection, ConnectionConfig
from router.amqp.session import Session
from router.amqp import performatives as p
from router.amqp.decode import decode_at
from router.amqp.encode import encode
from router.amqp.errors import DecodeError
from router.amqp.fastparse import parse_transfer, transfer_tag
from router.amqp.fastparse_fields import _common_disposition, parse_disposition, parse_flow
from router.amqp.fastpath import (
    disposition_frame,
    disposition_performative,
    frame_header,
    queue_transfer_own_tag,
    transfer_frame,
    transfer_frame_own_tag,
    transfer_middle,
)
from router.amqp.framing import frame
from router.amqp.types import Described, UInt, ULong

from .strategies import same
from .test_performatives import composites


def _general(body: bytes) -> tuple[Any, int] | DecodeError:
    try:
        value, stop = decode_at(body, 0, len(body))
    except DecodeError as exc:
        return exc
    return value, stop


def _fast(parse: Any, body: bytes) -> Any:
    try:
        fields = parse(body, 3, len(body))  # after the 3-byte smallulong descriptor
    except DecodeError as exc:
        return exc
    return _tag_resolved(body, fields) if parse is parse_transfer else fields


def _tag_resolved(buf: bytes, fields: tuple[Any, ...]) -> tuple[Any, ...]:
    """A transfer's fields with the tag as bytes in place of (tag, tag_at): what a reader of
    the tag gets (transfer_tag), as the general decoder gives it."""
    return (*fields[:2], transfer_tag(buf, fields[2], fields[3]), *fields[4:])


def _assert_agree(expected: tuple[Any, ...], fast: Any) -> None:
    """Field by field: numbers by value (the general decoder gives UInt, the fast parser int),
    delivery states as the codec tests compare them (they may hold NaN)."""
    assert not isinstance(fast, DecodeError), fast
    assert len(fast) == len(expected)
    for want, got in zip(expected, fast):
        if isinstance(want, bool):
            assert got is want
        elif isinstance(want, int):
            assert got == want
        else:
            assert same(want, got), (want, got)


# Each fast parser, and the fields it must return for the performative the general decoder read.
PARSERS: dict[type, tuple[Any, Any]] = {
    p.Transfer: (parse_transfer, lambda t, stop: (
        t.handle, -1 if t.delivery_id is None else t.delivery_id, t.delivery_tag, t.message_format or 0, t.settled, t.more,
        t.rcv_settle_mode, t.state, t.resume, t.aborted, stop)),
    p.Flow: (parse_flow, lambda f, stop: (
        f.next_incoming_id, f.incoming_window, f.next_outgoing_id, f.outgoing_window, f.handle,
        f.delivery_count, f.link_credit, f.available, f.drain, f.echo)),
    p.Disposition: (parse_disposition, lambda d, stop: (d.role, d.first, d.last, d.settled, d.state)),
}  # fmt: skip


@pytest.mark.parametrize("cls", list(PARSERS), ids=lambda c: c.__name__)
@given(data=st.data())
def test_fast_parsers_agree_with_the_general_decoder(cls: type, data: st.DataObject) -> None:
    body = encode(data.draw(composites(cls)))
    parse, expected = PARSERS[cls]
    general, fast = _general(body), _fast(parse, body)
    if isinstance(general, DecodeError):
        assert isinstance(fast, DecodeError)
        return
    value, stop = general
    _assert_agree(expected(value, stop), fast)


@pytest.mark.parametrize("parse", [parse_transfer, parse_flow, parse_disposition])
def test_every_prefix_of_a_performative_is_refused(parse: Any) -> None:
    performative = {
        parse_transfer: p.Transfer(handle=7, delivery_id=70000, delivery_tag=b"tag", settled=False),
        parse_flow: p.Flow(next_incoming_id=1, incoming_window=2048, next_outgoing_id=3,
                           outgoing_window=2048, handle=1, delivery_count=9, link_credit=300),
        parse_disposition: p.Disposition(role=True, first=5, last=70000, settled=True),
    }[parse]  # fmt: skip
    body = encode(performative)
    for cut in range(3, len(body)):
        with pytest.raises(DecodeError):
            parse(body[:cut], 3, cut)


@given(
    channel=st.integers(0, 0xFFFF),
    handle=st.integers(0, 255),
    delivery_id=st.integers(0, 0xFFFFFFFF),
    tag=st.binary(max_size=200),
    settled=st.booleans(),
    more=st.booleans(),
    # small frames, and frames past the table of precomputed sizes (2,048)
    payload=st.one_of(st.binary(max_size=64), st.integers(1900, 70000).map(lambda n: b"p" * n)),
)
def test_the_fast_transfer_frame_decodes_to_the_transfer_asked_for(
    channel: int, handle: int, delivery_id: int, tag: bytes, settled: bool, more: bool, payload: bytes
) -> None:
    middle = transfer_middle(channel, handle, len(tag))
    written = transfer_frame(middle, delivery_id, tag, settled, more, len(payload)) + payload
    expected = frame(channel, p.Transfer(handle=handle, delivery_id=delivery_id, delivery_tag=tag,
                                         message_format=0, settled=settled, more=more), payload)  # fmt: skip
    assert written[:8] != b"" and int.from_bytes(written[:4], "big") == len(written)
    assert written[6:8] == expected[6:8]  # channel
    value, stop = decode_at(written, 8, len(written))
    assert (value.handle, value.delivery_id, value.delivery_tag, value.message_format or 0,
            bool(value.settled), value.more) == (handle, delivery_id, tag, 0, settled, more)  # fmt: skip
    assert written[stop:] == payload
    fields = _tag_resolved(written, parse_transfer(written, 11, len(written)))
    assert fields[:6] == (handle, delivery_id, tag, 0, settled, more) and fields[-1] == stop
    # a delivery tagged with its own delivery-id's bytes, written from their two parts
    own = delivery_id.to_bytes(4, "big")
    assert transfer_frame_own_tag(
        transfer_middle(channel, handle, 4), own[:3], own[3], settled, more, len(payload)
    ) == transfer_frame(transfer_middle(channel, handle, 4), delivery_id, own, settled, more, len(payload))


@given(
    channel=st.integers(0, 0xFFFF),
    handle=st.integers(0, 255),
    delivery_id=st.integers(0, 0xFFFFFFFF),
    settled=st.booleans(),
    more=st.booleans(),
    # around the table of precomputed frame sizes (2,048 with the 30 bytes of header)
    size=st.one_of(st.integers(0, 64), st.integers(2000, 2100), st.integers(2100, 20000)),
    view=st.booleans(),
    queued=st.lists(st.binary(max_size=8), max_size=2),
)
def test_an_own_tagged_transfer_is_queued_as_the_frame_and_its_payload(
    channel: int, handle: int, delivery_id: int, settled: bool, more: bool, size: int, view: bool,
    queued: list[bytes],
) -> None:  # fmt: skip
    data = bytes(i & 0xFF for i in range(size))
    payload: bytes | memoryview = memoryview(data) if view else data
    own = delivery_id.to_bytes(4, "big")
    out: list[bytes | memoryview] = list(queued)
    middle = transfer_middle(channel, handle, 4)
    queue_transfer_own_tag(out, middle, middle + own[:3], own[:3], own[3], settled, more, payload, size)
    pieces = out[len(queued):]
    assert out[: len(queued)] == queued  # appended after what was queued, which is left as it was
    expected = transfer_frame(transfer_middle(channel, handle, 4), delivery_id, own, settled, more, size) + data
    assert b"".join(pieces) == expected
    if view or size + 30 >= 2048:  # the payload stays a piece of its own (a view is never copied)
        assert len(pieces) == 2 and pieces[1] is payload
    else:  # a small payload in bytes is formatted into its frame
        assert len(pieces) == 1 and type(pieces[0]) is bytes


@given(
    channel=st.integers(0, 0xFFFF),
    role=st.booleans(),
    first=st.integers(0, 0x1_0000_0000),
    span=st.one_of(st.none(), st.integers(0, 300), st.just(0x1_0000_0000)),
    settled=st.booleans(),
    state=st.sampled_from([None, m.Accepted(), m.Released(), m.Rejected(), m.Modified(delivery_failed=True)]),
)
def test_the_fast_disposition_frame_is_the_general_one_or_left_to_it(
    channel: int, role: bool, first: int, span: int | None, settled: bool, state: Any
) -> None:
    last = None if span is None else first + span
    written = disposition_frame(channel, role, first, last, settled, state)
    if 255 < first <= 0xFFFFFFFF:  # with first's top three bytes given (a session keeps them)
        assert disposition_frame(channel, role, first, last, settled, state, (first >> 8).to_bytes(3, "big")) == written
    common = (channel < 256 and first <= 0xFFFFFFFF and (last is None or last <= 0xFFFFFFFF)
              and (state is None or type(state) in (m.Accepted, m.Released)))  # fmt: skip
    assert (written != b"") == common
    if not common:
        return
    body = disposition_performative(role, first, last, settled, state)
    assert written == frame_header(8 + len(body), channel) + body
    value, stop = decode_at(written, 8, len(written))
    assert stop == len(written) == int.from_bytes(written[:4], "big")
    assert (value.role, value.first, value.last if value.last is not None else first, bool(value.settled)) == (
        role, first, first if last is None else last, settled)  # fmt: skip
    assert value.state == state


def test_transfers_the_fast_writer_cannot_express_are_left_to_the_general_one() -> None:
    assert transfer_middle(0, 256, 4) == b""
    assert transfer_middle(0, 1, 201) == b""


# Values of every shape the fast parsers read inline (null, uint0/smalluint/uint, true/false,
# vbin8, an empty outcome) and some they leave to the general decoder, for type confusion.
_confusing = st.one_of(
    st.none(), st.booleans(), st.sampled_from([0, 1, 255, 256]).map(UInt),
    st.binary(max_size=4), st.text(max_size=3), st.sampled_from([m.Accepted(), m.Released(), m.Rejected(), m.Modified(), m.Source()]),
)


_VALID_START: dict[type, list[Any]] = {
    p.Transfer: [UInt(0), UInt(1), b"t"],
    p.Flow: [None, UInt(10), UInt(1), UInt(10)],
    p.Disposition: [True, UInt(0)],
}


@pytest.mark.parametrize("cls", list(PARSERS), ids=lambda c: c.__name__)
@settings(max_examples=300)
@given(data=st.data())
def test_fast_parsers_agree_on_wrongly_typed_fields(cls: type, data: st.DataObject) -> None:
    # Any field may hold a value of another type (a uint0 where a boolean belongs, a binary
    # where a state belongs ...): the fast parser refuses exactly what the general decoder
    # refuses, and reads the same fields from the rest.
    items: list[Any] = list(_VALID_START[cls])
    items += [data.draw(_confusing, label=f"extra {i}") for i in range(data.draw(st.integers(0, 8)))]
    for i in range(len(items)):
        if data.draw(st.integers(0, 3), label=f"replace {i}?") == 0:
            items[i] = data.draw(_confusing, label=f"field {i}")
    body = encode(Described(ULong(cls.DESCRIPTOR_CODE), items))  # type: ignore[attr-defined]
    parse, expected = PARSERS[cls]
    general, fast = _general(body), _fast(parse, body)
    if isinstance(general, DecodeError):
        assert isinstance(fast, DecodeError), (items, fast)
        return
    assert not isinstance(fast, DecodeError), (items, fast)
    value, stop = general
    _assert_agree(expected(value, stop), fast)


def test_the_disposition_clients_send_is_read_without_the_general_path() -> None:
    # As Proton C writes it (seen on the wire): role receiver, first 123, last null, settled,
    # accepted. The common shape is read inline; a rejected outcome goes the general way.
    body = b"\xc0\x0a\x05\x41\x52\x7b\x40\x41\x00\x53\x24\x45"
    assert _common_disposition(body, 0, len(body)) == (True, 123, None, True, m.Accepted())
    assert parse_disposition(body, 0, len(body)) == (True, 123, None, True, m.Accepted())
    rejected = encode(Described(ULong(p.Disposition.DESCRIPTOR_CODE), [True, UInt(5), None, True, m.Rejected()]))[3:]
    assert _common_disposition(rejected, 0, len(rejected)) is None
    assert parse_disposition(rejected, 0, len(rejected))[4] == m.Rejected()
    for cut in range(1, len(body)):  # truncated: not the inline reader's to refuse
        assert _common_disposition(body[:cut], 0, cut) is None


@given(st.lists(st.integers(min_value=0, max_value=0xFFFFFFFF), min_size=1, max_size=50), st.integers(0, 600))
@settings(max_examples=200, deadline=None)
def test_a_sessions_delivery_id_bytes_are_the_ids_big_endian(starts: list[int], run: int) -> None:
    # Session.id_bytes keeps the top three bytes of the ids sent lately: any order of ids, runs
    # across a 256 boundary and the wrap at 2**32 (serial numbers, transport 2.8.10) included.
    session = Session(Connection(ConnectionConfig(container_id="x")), 0)
    for start in starts:
        for i in range(0, run, 37):
            delivery_id = (start + i) & 0xFFFFFFFF
            assert session.id_bytes(delivery_id) == delivery_id.to_bytes(4, "big")
