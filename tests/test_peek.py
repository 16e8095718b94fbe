"""peek() on every prefix of real messages: a first transfer frame may end anywhere, and the
answer is then a routing view (cut after the properties) or DecodeError, never another error."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from router.amqp.errors import DecodeError
from router.amqp.message import Message, encode_message
from router.amqp.messaging import Header, Properties
from router.amqp.peek import peek, peek_at
from router.amqp.types import Symbol

short_text = st.text(max_size=40)
properties = st.builds(
    Properties,
    message_id=st.one_of(st.none(), short_text, st.integers(0, 2**64 - 1)),
    to=st.one_of(st.none(), short_text),
    subject=st.one_of(st.none(), short_text),
    reply_to=st.one_of(st.none(), short_text),
    absolute_expiry_time=st.one_of(st.none(), st.integers(0, 2**62)),
    creation_time=st.one_of(st.none(), st.integers(0, 2**62)),
    group_id=st.one_of(st.none(), short_text),
)
sections: dict[str, Any] = {
    "header": st.one_of(st.none(), st.builds(Header, ttl=st.one_of(st.none(), st.integers(0, 2**32 - 1)))),
    "message_annotations": st.one_of(st.none(), st.dictionaries(st.text(st.characters(min_codepoint=97, max_codepoint=122), min_size=1, max_size=10).map(lambda s: Symbol("x-opt-" + s)), short_text, max_size=3)),
    "properties": st.one_of(st.none(), properties),
    "application_properties": st.one_of(st.none(), st.dictionaries(short_text, st.integers(-(2**63), 2**63 - 1), max_size=3)),
}
messages = st.builds(lambda body, **kw: Message.value(body, **kw), st.one_of(short_text, st.binary(max_size=300)), **sections)


@given(messages)
def test_every_prefix_is_a_view_or_a_decode_error(message: Message) -> None:
    payload = encode_message(message)
    whole = peek(payload)
    if message.properties is not None:
        assert whole.to == message.properties.to
    for cut in range(len(payload)):
        try:
            view = peek(payload[:cut])
        except DecodeError:
            continue
        if message.properties is not None and view.to is not None:
            assert view.to == message.properties.to  # never a wrong address from a cut frame


def test_a_frame_cut_inside_the_properties_list_header_is_a_decode_error() -> None:
    payload = encode_message(Message.value("x", properties=Properties(message_id="m", to="orders")))
    start = payload.index(b"\x00\x53\x73")
    for cut in range(start + 3, start + 8):  # inside the list's constructor, size and count
        try:
            peek(payload[:cut])
        except DecodeError as exc:
            assert "cut short" in str(exc) or exc.description


def _outcome(read: Any) -> tuple[Any, ...] | str:
    """What peek answers, comparable: the view's fields, or the error's kind."""
    try:
        view = read()
    except DecodeError:
        return "DecodeError"
    return (view.ttl_ms, view.annotations_span, view.to, view.absolute_expiry_ms, view.insert_at, view.priority)


@given(messages, st.binary(max_size=20), st.binary(min_size=1, max_size=40))
def test_a_payload_peeked_where_it_arrived_reads_nothing_around_it(
    message: Message, before: bytes, after: bytes
) -> None:
    """A large payload is peeked inside the read it arrived in (peek_at): every prefix of it,
    between arbitrary bytes of other frames, gets peek's answer for the payload alone, offsets
    included; nothing past its end is read (a cut frame is refused, never routed by the bytes
    of the next frame)."""
    payload = encode_message(message)
    for cut in range(len(payload) + 1):
        part = payload[:cut]
        source = before + part + after
        expected = _outcome(lambda: peek(part))
        assert _outcome(lambda: peek_at(source, len(before), len(before) + cut)) == expected
        assert _outcome(lambda: peek(memoryview(source)[len(before) : len(before) + cut])) == expected


def test_a_large_payload_is_peeked_where_it_arrived() -> None:
    """Annotations of any length before the properties, in a payload inside a larger read."""
    for annotation in (100, 2000, 2600, 6000):
        message = Message.value(
            "b" * 5000,
            message_annotations={Symbol("x-opt-big"): "a" * annotation},
            properties=Properties(to="far/away"),
        )
        payload = encode_message(message)
        read = b"\x00" * 77 + payload + b"\x00\x53\x73" * 10
        in_read = peek_at(read, 77, 77 + len(payload))
        assert in_read.to == "far/away" == peek(payload).to
        assert in_read.annotations_span == peek(payload).annotations_span


def test_a_to_that_is_no_string_is_a_decode_error() -> None:
    """Compiled, `to` was typed `str | None` and any other value raised TypeError out of peek
    (out of the core) instead of the DecodeError that refuses the message."""
    from router.amqp.encode import encode
    from router.amqp.types import Described, ULong

    body = encode_message(Message.value(1))
    for to in (5, b"bin", ["q"], {"q": 1}, True, 1.5):
        for fields in ([None, None, to], [None, None, to] + [None] * 7):
            payload = encode(Described(ULong(0x73), fields)) + body
            for need_to in (True, False):
                try:
                    view = peek(payload, need_to)
                except DecodeError as exc:
                    assert "must be a string" in exc.description
                else:
                    assert not need_to and view.to is None  # not read when routed by its link
