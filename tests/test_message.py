"""Message sections (messaging §3.2): Message encode/decode, the span scan and lazy section
access, checked against our codec and against Proton. (What the router reads and rewrites in a
message, router.amqp.sections and peek: tests/test_message_layer.py.)"""

from __future__ import annotations

import uuid
from typing import Any

import proton
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router.amqp.decode import decode
from router.amqp.encode import encode
from router.amqp.errors import DecodeError, EncodeError
from router.amqp.message import (
    Message,
    MessageLayout,
    decode_message,
    encode_message,
    scan_sections,
)
from router.amqp.messaging import (
    AmqpSequence,
    AmqpValue,
    ApplicationProperties,
    Data,
    DeliveryAnnotations,
    Footer,
    Header,
    MessageAnnotations,
    Properties,
)
from router.amqp.peek import peek
from router.amqp.types import Described, Symbol, Timestamp, UInt, ULong

SECTIONS = (
    "header", "delivery_annotations", "message_annotations", "properties",
    "application_properties", "body", "footer",
)  # fmt: skip

# --- strategies ---------------------------------------------------------------------------------

ascii_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=12)
longs = st.integers(-(2**63), 2**63 - 1)
uints = st.integers(0, 2**32 - 1)
scalars = st.one_of(
    st.none(), st.booleans(), longs, st.floats(allow_nan=False), st.text(max_size=20),
    st.binary(max_size=20), ascii_text.map(Symbol), st.uuids(), uints.map(UInt),
    st.integers(0, 2**64 - 1).map(ULong), longs.map(Timestamp),
)  # fmt: skip
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
annotation_keys = ascii_text.map(Symbol) | st.integers(0, 2**64 - 1).map(ULong)
annotation_maps = st.dictionaries(annotation_keys, values, max_size=4)
message_ids = st.one_of(
    st.integers(0, 2**64 - 1).map(ULong), st.uuids(), st.binary(max_size=16), st.text(max_size=16)
)
opt = st.none
headers = st.builds(
    Header, durable=opt() | st.booleans(), priority=opt() | st.integers(0, 255),
    ttl=opt() | uints, first_acquirer=opt() | st.booleans(), delivery_count=opt() | uints,
)  # fmt: skip
properties = st.builds(
    Properties, message_id=opt() | message_ids, user_id=opt() | st.binary(max_size=8),
    to=opt() | st.text(max_size=20), subject=opt() | st.text(max_size=8),
    reply_to=opt() | st.text(max_size=8), correlation_id=opt() | message_ids,
    content_type=opt() | ascii_text.map(Symbol), content_encoding=opt() | ascii_text.map(Symbol),
    absolute_expiry_time=opt() | longs.map(Timestamp), creation_time=opt() | longs.map(Timestamp),
    group_id=opt() | st.text(max_size=8), group_sequence=opt() | uints,
    reply_to_group_id=opt() | st.text(max_size=8),
)  # fmt: skip
bodies = st.one_of(
    st.none(),
    values.map(lambda v: AmqpValue(value=v)),
    st.lists(st.binary(max_size=300).map(lambda b: Data(value=b)), min_size=1, max_size=3),
    st.lists(
        st.lists(values, max_size=3).map(lambda v: AmqpSequence(value=v)), min_size=1, max_size=3
    ),
)
messages = st.builds(
    Message, header=opt() | headers, delivery_annotations=opt() | annotation_maps,
    message_annotations=opt() | annotation_maps, properties=opt() | properties,
    application_properties=opt() | st.dictionaries(st.text(max_size=8), scalars, max_size=4),
    body=bodies, footer=opt() | annotation_maps,
)  # fmt: skip


def section_objects(message: Message) -> dict[str, Any]:
    """Each present section of `message` as the messaging.py object it encodes as."""
    wrap = {
        "delivery_annotations": DeliveryAnnotations, "message_annotations": MessageAnnotations,
        "application_properties": ApplicationProperties, "footer": Footer,
    }  # fmt: skip
    out = {}
    for name in SECTIONS:
        value = getattr(message, name)
        if value is not None:
            out[name] = wrap[name](value=value) if name in wrap else value
    return out


# --- Message objects ----------------------------------------------------------------------------


@given(messages)
def test_round_trip(message: Message) -> None:
    payload = encode_message(message)
    decoded = decode_message(payload)
    assert decoded == message
    assert encode_message(decoded) == payload


def test_sections_are_written_in_spec_order() -> None:
    message = Message.value(
        "hi", header=Header(durable=True), delivery_annotations={"d": 1},
        message_annotations={"m": 2}, properties=Properties(to="q"),
        application_properties={"a": 3}, footer={"f": 4},
    )  # fmt: skip
    payload = encode_message(message)
    codes = [decode(payload[s:e]).DESCRIPTOR_CODE for s, e in _spans(scan_sections(payload))]
    assert codes == [0x70, 0x71, 0x72, 0x73, 0x74, 0x77, 0x78]


def _spans(layout: MessageLayout) -> list[tuple[int, int]]:
    return [span for span in layout[:7] if span is not None]


def test_convenience_constructors_and_accessors() -> None:
    assert Message.value({"k": [1]}).body_value == {"k": [1]}
    assert Message().body_value is None
    data = Message.data(b"ab", b"cd")
    assert data.body == (Data(value=b"ab"), Data(value=b"cd"))
    assert data.body_bytes == b"abcd"
    assert Message.sequence([1, 2], [3]).body_sequence == [1, 2, 3]
    assert Message(body=[Data(value=b"x")]) == Message(body=(Data(value=b"x"),))
    with pytest.raises(TypeError):
        data.body_value
    with pytest.raises(TypeError):
        Message.value(b"x").body_bytes
    with pytest.raises(TypeError):
        data.body_sequence


@pytest.mark.parametrize(
    "body", [[], [Data(value=b"a"), AmqpSequence(value=[])], [AmqpValue(value=1)], "text", [b"a"]]
)
def test_invalid_bodies_are_refused(body: Any) -> None:
    with pytest.raises(EncodeError):
        Message(body=body)


def test_annotation_keys_are_written_as_symbols() -> None:
    payload = encode_message(Message.value(1, message_annotations={"x-opt-a": 1}))
    (key,) = decode_message(payload).message_annotations or {}
    assert type(key) is Symbol  # a string key would decode as str


@pytest.mark.interop
def test_missing_body_is_tolerated() -> None:
    # Proton sends a header and properties but no body section for a message without a body.
    payload = proton.Message(address="q").encode()
    message = decode_message(payload)
    assert message.body is None and message.properties == Properties(to="q")
    assert decode_message(b"") == Message()


# --- interop with Proton ------------------------------------------------------------------------

IDS = [7, uuid.UUID(int=0x1234), b"\x00bin", "text-id"]
PROTON_BODIES: list[tuple[Any, bool, Any]] = [
    ("hello", False, AmqpValue(value="hello")),
    (b"bytes", False, AmqpValue(value=b"bytes")),
    ([1, "two", 3.5], False, AmqpValue(value=[1, "two", 3.5])),
    ({"k": {"n": [True, None]}}, False, AmqpValue(value={"k": {"n": [True, None]}})),
    (b"raw", True, (Data(value=b"raw"),)),
    ([1, "x"], True, (AmqpSequence(value=[1, "x"]),)),
]


@pytest.mark.interop
@pytest.mark.parametrize("message_id", IDS)
@pytest.mark.parametrize(("body", "inferred", "expected_body"), PROTON_BODIES)
def test_proton_to_ours(message_id: Any, body: Any, inferred: bool, expected_body: Any) -> None:
    pm = proton.Message(
        body=body, inferred=inferred, id=message_id, correlation_id=message_id, address="q/1",
        reply_to="r", ttl=1.5, durable=True, priority=7, user_id=b"u", subject="s",
        content_type="text/plain", creation_time=12.5, group_id="g", group_sequence=4,
        instructions={proton.symbol("x-d"): 1},
        annotations={proton.symbol("x-opt-qd.trace"): ["R1"], proton.symbol("x-n"): None},
        properties={"p": 3, "s": "v"},
    )  # fmt: skip
    payload = pm.encode()
    message = decode_message(payload)
    assert message.header == Header(durable=True, priority=7, ttl=1500)
    props = message.properties
    assert props is not None
    assert (props.message_id, props.correlation_id) == (message_id, message_id)
    assert type(props.message_id) is {int: ULong, uuid.UUID: uuid.UUID, bytes: bytes, str: str}[
        type(message_id)
    ]
    assert (props.to, props.reply_to, props.user_id, props.subject) == ("q/1", "r", b"u", "s")
    assert (props.content_type, props.creation_time, props.group_id) == ("text/plain", 12500, "g")
    assert props.group_sequence == 4
    assert message.delivery_annotations == {"x-d": 1}
    assert message.message_annotations == {"x-opt-qd.trace": ["R1"], "x-n": None}
    assert message.application_properties == {"p": 3, "s": "v"}
    assert message.body == expected_body
    layout = scan_sections(payload)
    assert peek(payload).to == "q/1"
    assert layout.header(payload) == message.header
    assert layout.properties(payload) == props
    assert layout.message_annotations(payload) == message.message_annotations


@pytest.mark.interop
@pytest.mark.parametrize("message_id", IDS)
@pytest.mark.parametrize(("body", "inferred", "our_body"), PROTON_BODIES)
def test_ours_to_proton(message_id: Any, body: Any, inferred: bool, our_body: Any) -> None:
    message = Message(
        header=Header(durable=True, priority=2, ttl=2500, delivery_count=3),
        delivery_annotations={"x-d": 1},
        message_annotations={"x-opt-qd.ingress": "R0", "x-opt-qd.trace": ["R0", "R1"]},
        properties=Properties(
            message_id=ULong(message_id) if type(message_id) is int else message_id,
            correlation_id=message_id, to="q/2", reply_to="r", user_id=b"u",
            content_type=Symbol("application/octet-stream"), creation_time=Timestamp(1500),
        ),
        application_properties={"p": 3, "s": "v", "l": [1, 2]},
        body=our_body,
    )  # fmt: skip
    pm = proton.Message()
    pm.decode(encode_message(message))
    assert (pm.durable, pm.priority, pm.ttl, pm.delivery_count) == (True, 2, 2.5, 3)
    assert (pm.id, pm.correlation_id) == (message_id, message_id)
    assert (pm.address, pm.reply_to, pm.user_id, pm.creation_time) == ("q/2", "r", b"u", 1.5)
    assert pm.content_type == "application/octet-stream"
    assert pm.instructions == {"x-d": 1}
    assert pm.annotations == {"x-opt-qd.ingress": "R0", "x-opt-qd.trace": ["R0", "R1"]}
    assert pm.properties == {"p": 3, "s": "v", "l": [1, 2]}
    assert pm.inferred is inferred
    got = bytes(pm.body) if isinstance(pm.body, memoryview) else pm.body
    assert got == body


@pytest.mark.interop
@given(
    app=st.dictionaries(st.text(max_size=8), scalars, max_size=4),
    ann=st.dictionaries(ascii_text.map(Symbol), values, max_size=4),
    body=values,
)
@settings(max_examples=50)
def test_ours_to_proton_generated(app: dict[str, Any], ann: dict[Any, Any], body: Any) -> None:
    pm = proton.Message()
    message = Message.value(body, application_properties=app, message_annotations=ann)
    pm.decode(encode_message(message))
    assert pm.properties == app
    assert dict(pm.annotations or {}) == ann
    assert _plain(pm.body) == _plain(body)


def _plain(value: Any) -> Any:
    """Proton hands binaries back as memoryviews."""
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value


# --- scan_sections and lazy access --------------------------------------------------------------


@given(messages)
def test_spans_decode_to_exactly_the_sections_present(message: Message) -> None:
    payload = encode_message(message)
    layout = scan_sections(payload)
    present = section_objects(message)
    for name in SECTIONS:
        span = getattr(layout, f"{name}_span")
        assert (span is None) == (name not in present), name
        if span is None or name == "body":
            continue
        assert decode(payload[span[0] : span[1]]) == present[name]
    if message.body is not None:
        assert layout.body_span is not None
        s, e = layout.body_span
        sections = message.body if isinstance(message.body, tuple) else (message.body,)
        assert payload[s:e] == b"".join(encode(section) for section in sections)
        assert layout.body_code == sections[0].DESCRIPTOR_CODE
    else:
        assert layout.body_code == 0
    # the spans tile the payload, in order
    assert b"".join(payload[s:e] for s, e in _spans(layout)) == payload
    assert layout.header(payload) == message.header
    assert layout.properties(payload) == message.properties
    assert layout.message_annotations(payload) == message.message_annotations
    expected_to = None if message.properties is None else message.properties.to
    assert peek(payload).to == expected_to


def test_to_address_without_properties_or_without_to() -> None:
    for message in (
        Message.value(1),
        Message.value(1, properties=Properties()),
        Message.value(1, properties=Properties(message_id="m")),
        Message.value(1, properties=Properties(subject="only-later-fields")),
    ):
        payload = encode_message(message)
        assert peek(payload).to is None


def test_to_address_in_a_list32_properties() -> None:
    props = Properties(message_id="m" * 300, to="far/away", subject="s")
    payload = encode_message(Message.value(1, properties=props))
    assert payload[3] == 0xD0
    assert peek(payload).to == "far/away"


def test_to_address_must_be_a_string() -> None:
    payload = encode_message(Message.value(1, properties=Properties(to=5)))
    with pytest.raises(DecodeError, match="must be a string"):
        peek(payload)


def test_symbolic_and_wide_descriptors_are_understood() -> None:
    props = encode(Described(Symbol("amqp:properties:list"), [None, None, "sym/addr"]))
    body = b"\x00\x80" + (0x77).to_bytes(8, "big") + encode("v")  # ulong, not smallulong
    payload = encode(Header(durable=True)) + props + body
    layout = scan_sections(payload)
    assert peek(payload).to == "sym/addr"
    assert layout.properties(payload) == Properties(to="sym/addr")
    assert decode_message(payload) == Message.value(
        "v", header=Header(durable=True), properties=Properties(to="sym/addr")
    )


H, P, V = encode(Header()), encode(Properties(to="q")), encode(AmqpValue(value=1))
D, S = encode(Data(value=b"d")), encode(AmqpSequence(value=[1]))
MA, F = encode(MessageAnnotations(value={Symbol("a"): 1})), encode(Footer(value={}))


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        (P + H + V, "after the properties"),
        (H + H + V, "repeated"),
        (MA + MA + V, "repeated"),
        (V + MA, "after the body"),
        (F + V, "after the footer"),
        (V + V, "cannot follow"),
        (D + S, "cannot follow"),
        (S + V, "cannot follow"),
        (V + D, "cannot follow"),
        (encode("not described"), "expected a described section"),
        (b"\x00\x53\x79\x45", "not a message section"),
        (encode(Described(ULong(0x23), [])), "not a message section"),
        (encode(Described(Symbol("amqp:nope:list"), [])), "not a message section"),
        (encode(Described("amqp:header:list", [])), "not a message section"),  # a string
        (b"\x00\x53\x70\x40", "wrong value type"),  # null header
        (b"\x00\x53\x75\xa1\x01x", "wrong value type"),  # data holding a string
        (b"\x00\x53\x72\x45", "wrong value type"),  # message-annotations holding a list
        (b"\x00\x53\x73", "wrong value type"),  # no value at all
        (H + V[:-1], "truncated"),
    ],
)
def test_bad_layouts_raise_decode_error(payload: bytes, problem: str) -> None:
    with pytest.raises(DecodeError, match=problem):
        scan_sections(payload)
    with pytest.raises(DecodeError):
        decode_message(payload)


def test_several_data_and_sequence_sections_make_one_body_span() -> None:
    for payload in (H + D + D + D + F, S + S):
        layout = scan_sections(payload)
        assert layout.body_span is not None
        assert payload[layout.body_span[0] : layout.body_span[1]] in (D * 3, S * 2)


def _exercise(payload: bytes) -> None:
    """Everything the router and clients may call on untrusted bytes."""
    try:
        layout = scan_sections(payload)
        layout.header(payload)
        layout.properties(payload)
        layout.message_annotations(payload)
    except DecodeError:
        pass
    try:
        peek(payload)
    except DecodeError:
        pass
    try:
        decode_message(payload)
    except DecodeError:
        pass


@given(messages, st.data())
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_hostile_payloads_raise_decode_error_only(message: Message, data: st.DataObject) -> None:
    payload = bytearray(encode_message(message))
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "truncate", "insert", "delete", "splice"]))
        at = data.draw(st.integers(0, len(payload)))
        if op == "flip" and at < len(payload):
            payload[at] = data.draw(st.integers(0, 255))
        elif op == "truncate":
            del payload[at:]
        elif op == "insert":
            payload[at:at] = data.draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del payload[at : at + data.draw(st.integers(1, 8))]
        else:  # move a tail of the message to the front: sections out of order
            payload[:] = payload[at:] + payload[:at]
    _exercise(bytes(payload))


@given(st.binary(max_size=64))
def test_garbage_raises_decode_error_only(garbage: bytes) -> None:
    _exercise(garbage)
    _exercise(b"\x00\x53\x73" + garbage)
    _exercise(b"\x00\x53\x73\xc0" + garbage)
