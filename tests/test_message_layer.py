"""What the router reads from and rewrites in a message (router.amqp.sections, router.amqp.peek,
router.core.annotate and annotparse on top): the one skipper against the full decoder as its oracle, hostile
bytes in every reader, and the annotations rewritten with the bare message's bytes untouched
(messaging §3.2), also as Proton reads them."""

from __future__ import annotations

from typing import Any

import proton
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router.amqp.decode import decode_at
from router.amqp.encode import encode
from router.amqp.errors import DecodeError
from router.amqp.message import Message, decode_message, encode_message, scan_sections
from router.amqp.messaging import DeliveryAnnotations, Header, MessageAnnotations, Properties
from router.amqp.msgfields import MessageFields
from router.amqp.peek import peek
from router.amqp.sections import annotation_entries, header_ttl_at, read_strings, skip_value, with_ttl
from router.amqp.types import Array, Described, Symbol, ULong
from router.core import annotate, annotparse

# --- the skipper against the decoder ------------------------------------------------------------

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=20),
    st.binary(max_size=300), st.builds(Symbol, st.text(st.characters(max_codepoint=127), max_size=8)),
)  # fmt: skip
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(st.text(max_size=5), inner, max_size=4),
        st.builds(Described, st.builds(ULong, st.integers(0, 2**64 - 1)), inner),
        st.builds(lambda items: Array("int", items), st.lists(st.integers(-(2**31), 2**31 - 1), max_size=4)),
    ),
    max_leaves=12,
)


def _oracle(data: bytes, pos: int, end: int) -> None:
    """skip_value ends where decode_at ends whenever decode_at succeeds; otherwise both raise
    DecodeError or the skipper ends inside `end` (it does not read strings' contents or items);
    `headers=False` ends at the same place whenever the checked skip does."""
    try:
        _, stop = decode_at(data, pos, end)
    except DecodeError:
        stop = -1
    try:
        skipped = skip_value(data, pos, end)
    except DecodeError:
        assert stop == -1, "the skipper refused what the decoder reads"
        skipped = -1
    else:
        assert pos < skipped <= end
        if stop >= 0:
            assert skipped == stop
    try:
        shallow = skip_value(data, pos, end, 0, False)
    except DecodeError:
        assert skipped == -1, "bounds only refused what the checked skip takes"
    else:
        assert skipped in (-1, shallow) and pos < shallow <= end


@given(st.lists(values, min_size=1, max_size=3), st.binary(max_size=6), st.binary(max_size=6))
def test_the_skipper_ends_where_the_decoder_ends(items: list[Any], before: bytes, after: bytes) -> None:
    buf = before + b"".join(encode(item) for item in items) + after
    pos, end = len(before), len(buf) - len(after)
    for item in items:
        _oracle(buf, pos, end)
        pos = skip_value(buf, pos, end)
    assert pos == end


@given(values, st.data())
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_the_skipper_on_damaged_encodings_agrees_with_the_decoder(value: Any, data: st.DataObject) -> None:
    buf = bytearray(encode(value))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(buf)))
        op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if op == "flip" and at < len(buf):
            buf[at] = data.draw(st.integers(0, 255))
        elif op == "cut":
            del buf[at:]
        else:
            buf[at:at] = data.draw(st.binary(min_size=1, max_size=4))
    raw = bytes(buf)
    for end in {len(raw), max(0, len(raw) - 1)}:
        _oracle(raw, 0, end)


@given(st.binary(max_size=40))
def test_the_skipper_on_garbage_agrees_with_the_decoder(garbage: bytes) -> None:
    _oracle(garbage, 0, len(garbage))


@pytest.mark.parametrize(
    "data",
    [
        b"\xc0\x00",  # list8 of size 0: no room for its count
        b"\xc0\x02\x05\x40",  # count 5 in one byte
        b"\xc1\x03\x01\x40\x40",  # a map of an odd count
        b"\xd0\x00\x00\x00\x02\x00\x00",  # list32 smaller than its count field
        b"\xd0\x00\x00\x00\x05\xff\xff\xff\xff\x40",  # list32 count beyond its bytes
        b"\xe0\x02\x01\x57",  # array of an invalid element constructor
        b"\xe0\x02\x01\x00",  # array of a described element with nothing after
        b"\xe0\x03\x09\x71\x00",  # 9 ints in 2 bytes
        b"\xa1\x05abc",  # str8 past the end
        b"\xb0\xff\xff\xff\xff",  # vbin32 of 4 GiB
        b"\x00" * 100 + b"\x40",  # described, nested deeper than MAX_DEPTH
        b"\x57",  # an unknown constructor
    ],
)
def test_hostile_values_are_decode_errors_for_both(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_at(data, 0, len(data))
    with pytest.raises(DecodeError):
        skip_value(data, 0, len(data))


# --- the annotations map at the byte level ------------------------------------------------------

_KINDS = {b"p.to": 1, b"p.ingress": 2}  # whole keys, looked up once the prefix matched


def _section(entries: bytes, count: int) -> bytes:
    return b"\x00\x53\x72\xc1" + bytes((len(entries) + 1, count)) + entries


def test_entries_sort_prefixed_keys_by_kind_and_keep_others() -> None:
    data = encode(MessageAnnotations(value={Symbol("p.to"): "a", Symbol("p.x"): 1, Symbol("q"): [1], ULong(5): None}))
    found = annotation_entries(data, (0, len(data)), b"p.", _KINDS, 9)
    assert [kind for kind, _, _, _ in found] == [1, 9, 0, 0]
    assert found[-1][3] == len(data)
    for _, key, value_at, end in found:
        assert decode_at(data, value_at, end)[1] == end and key < value_at


def test_a_boolean_in_its_one_byte_encoding_is_skipped_as_two_bytes() -> None:
    """0x56 is a boolean with a value octet (types §1.6.2): skipped as a null, it used to put
    the next key one byte early and refuse a well-formed section."""
    data = _section(b"\xa3\x01a\x56\x01\xa3\x01b\x40", 4)
    found = annotation_entries(data, (0, len(data)), b"p.", _KINDS, 9)
    assert [(value_at, end) for _, _, value_at, end in found] == [(9, 11), (14, 15)]
    assert decode_message(data + encode_message(Message.value(1))).message_annotations == {"a": True, "b": None}


@given(st.binary(max_size=40), st.integers(0, 255))
def test_entries_of_garbage_are_decode_errors_only(garbage: bytes, count: int) -> None:
    for data in (b"\x00\x53\x72" + garbage, _section(garbage[:250], count)):
        try:
            annotation_entries(data, (0, len(data)), b"x-opt-qd.", _KINDS, 9)
        except DecodeError:
            pass


def test_values_are_copied_by_their_size_alone() -> None:
    """An annotation's value passes through as it came (never decoded): a list whose header
    disagrees with its size is still copied, as before sections.py."""
    odd = b"\xc0\x01\x05"  # list8, size 1, count 5
    data = _section(b"\xa3\x01a" + odd, 2)
    ((_, _, value_at, end),) = annotation_entries(data, (0, len(data)), b"p.", _KINDS, 9)
    assert data[value_at:end] == odd


def test_read_strings_reads_at_most_limit_plus_one() -> None:
    data = encode([f"R{i}" for i in range(50)])
    assert read_strings(data, 0, len(data), 10) == [f"R{i}" for i in range(11)]


# --- every reader of message bytes takes hostile bytes with DecodeError only ---------------------


@given(st.binary(max_size=60))
def test_every_reader_refuses_garbage_with_decode_error(garbage: bytes) -> None:
    for payload in (garbage, b"\x00\x53\x72" + garbage, b"\x00\x53\x73" + garbage, b"\x00\x53\x70" + garbage):
        for read in (peek, scan_sections):
            try:
                read(payload)
            except DecodeError:
                pass
        fields = MessageFields(memoryview(payload))  # never raises: unreadable instead
        assert fields.unreadable or fields.payload == payload[: len(fields.payload)]


# --- the router's rewrite keeps the bare message ------------------------------------------------

short = st.text(max_size=12)
messages = st.builds(
    lambda body, **kw: Message.value(body, **kw),
    st.one_of(short, st.binary(max_size=300)),
    header=st.none() | st.builds(Header, durable=st.booleans(), ttl=st.none() | st.integers(1, 2**31)),
    delivery_annotations=st.none() | st.dictionaries(st.just("x-d"), st.integers(0, 9), max_size=1),
    message_annotations=st.none() | st.dictionaries(
        st.sampled_from(["x-opt-a", "x-opt-b", "x-opt-qd.trace", "x-opt-qd.ingress"]), short, max_size=3),
    properties=st.none() | st.builds(Properties, to=st.none() | short, subject=st.none() | short),
    application_properties=st.none() | st.dictionaries(short, st.integers(0, 9), max_size=2),
    footer=st.none() | st.dictionaries(st.just("x-f"), st.integers(0, 9), max_size=1),
)  # fmt: skip


def _bare(message: Message) -> bytes:
    """The bare message and footer: everything from the properties on (messaging §3.2)."""
    kept = Message(properties=message.properties, application_properties=message.application_properties,
                   body=message.body, footer=message.footer)  # fmt: skip
    return encode_message(kept)


@given(messages)
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_a_client_message_is_annotated_for_the_next_router_and_stripped_for_a_consumer(message: Message) -> None:
    payload = encode_message(message)
    view = peek(payload)
    if view.annotations_span is not None:  # what a client sends: its router keys removed on ingress
        stripped, view = annotate.strip_client(payload, view)
        payload = bytes(stripped)
    own = {k: v for k, v in (message.message_annotations or {}).items() if not k.startswith("x-opt-qd.")}
    routed = annotate.for_router(payload, annotate.for_client_delivery(view, "a/b", True), "R1")
    assert routed.endswith(_bare(message))  # the bare message keeps its exact bytes
    got = decode_message(routed)
    assert got.message_annotations == {**own, "x-opt-qd.ingress": "R1", "x-opt-qd.trace": ["R1"], "x-opt-qd.to": "a/b"}
    assert (got.header, got.delivery_annotations, got.properties) == (message.header, message.delivery_annotations, message.properties)
    meta = annotparse.parse(routed, peek(routed), "R1")
    assert (meta.to, meta.ingress, meta.trace) == ("a/b", "R1", ("R1",))
    clean = bytes(annotate.strip(routed, meta))
    assert clean.endswith(_bare(message))
    assert decode_message(clean).message_annotations == (own or None)


def test_annotations_go_in_their_place_when_a_message_has_none() -> None:
    header, da = encode(Header(durable=True)), encode(DeliveryAnnotations(value={Symbol("d"): 1}))
    props, body = encode(Properties(to="q")), encode_message(Message.value(1))
    section = encode(MessageAnnotations(value={Symbol("x-opt-qd.ingress"): "R1", Symbol("x-opt-qd.trace"): ["R1"]}))
    for before, after in [(b"", body), (header, body), (header + da, props + body), (da, body), (header, props)]:
        payload = before + after
        routed = annotate.for_router(payload, annotate.for_client_delivery(peek(payload), None, False), "R1")
        assert routed == before + section + after


@pytest.mark.interop
@pytest.mark.parametrize("had_annotations", [False, True])
def test_proton_reads_what_the_router_wrote(had_annotations: bool) -> None:
    pm = proton.Message(
        body=b"\x00" * 1000, inferred=True, address="q", durable=True, instructions={"x-d": 1},
        annotations={"x-opt-app": "v"} if had_annotations else None, properties={"k": "v"},
    )  # fmt: skip
    payload = pm.encode()
    meta = annotate.for_client_delivery(peek(payload), "q", True)
    routed = annotate.for_router(payload, meta, "R1")
    out = proton.Message()
    out.decode(routed)
    expected = {"x-opt-qd.ingress": "R1", "x-opt-qd.trace": ["R1"], "x-opt-qd.to": "q"}
    assert out.annotations == ({"x-opt-app": "v", **expected} if had_annotations else expected)
    assert (out.address, out.durable, out.instructions, out.properties) == ("q", True, {"x-d": 1}, {"k": "v"})
    parsed = annotparse.parse(routed, peek(routed), "R1")
    back = proton.Message()
    back.decode(bytes(annotate.strip(routed, parsed)))
    assert back.annotations == ({"x-opt-app": "v"} if had_annotations else None)
    assert bytes(back.body) == b"\x00" * 1000


def test_a_first_frame_seen_through_a_memoryview_is_rewritten_like_bytes() -> None:
    for header in (None, Header(durable=True)):
        payload = encode_message(Message.value("b" * 3000, header=header, message_annotations={"x-opt-a": 1}))
        view = peek(payload)
        meta = annotate.for_client_delivery(view, "q", True)
        routed = annotate.for_router(payload, meta, "R1")
        assert annotate.for_router(memoryview(payload), annotate.for_client_delivery(view, "q", True), "R1") == routed
        parsed = annotparse.parse(routed, peek(routed), "R1")
        again = annotparse.parse(routed, peek(routed), "R1")
        assert bytes(annotate.strip(memoryview(routed), parsed)) == bytes(annotate.strip(routed, again)) == payload


# --- the header's ttl (the reduced ttl, messaging §3.2.1) -----------------------------------------

# A ttl's encodings a peer may send (composite.py reads any integer that fits a uint): the
# constructor, the value's width, and the largest value it holds.
TTL_ENCODINGS = [(0x70, 4, 2**32 - 1), (0x52, 1, 255), (0x80, 8, 2**32 - 1), (0x53, 1, 255), (0x71, 4, 2**31 - 1),
                 (0x54, 1, 127)]  # fmt: skip


def _header(durable: bool | None, priority: int | None, ttl: tuple[int, int, int], count: int, wide: bool) -> bytes:
    """A header section in the encoding asked for: its ttl as `ttl` (constructor, width, value),
    `count` fields (3 to 5), in a list32 when `wide`."""
    code, width, value = ttl
    fields = [
        b"\x40" if durable is None else (b"\x41" if durable else b"\x42"),
        b"\x40" if priority is None else b"\x50" + bytes((priority,)),
        bytes((code,)) + value.to_bytes(width, "big"),
        b"\x42",  # first-acquirer false
        b"\x52\x03",  # delivery-count 3
    ][:count]
    body = b"".join(fields)
    if wide:
        listed = b"\xd0" + (len(body) + 4).to_bytes(4, "big") + count.to_bytes(4, "big") + body
    else:
        listed = b"\xc0" + bytes((len(body) + 1, count)) + body
    return b"\x00\x53\x70" + listed


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(TTL_ENCODINGS), st.data(), st.booleans(), st.integers(3, 5),
       st.one_of(st.none(), st.booleans()), st.one_of(st.none(), st.integers(0, 9)))  # fmt: skip
def test_a_reduced_ttl_changes_the_header_alone(encoding: tuple[int, int, int], data: st.DataObject, wide: bool,
                                                count: int, durable: bool | None, priority: int | None) -> None:  # fmt: skip
    code, width, largest = encoding
    ttl = data.draw(st.integers(2, largest))
    reduced = data.draw(st.integers(1, ttl - 1))
    header = _header(durable, priority, (code, width, ttl), count, wide)
    rest = encode_message(Message.value("v", message_annotations={"x-opt-app": 1}, properties=Properties(to="q")))
    payload = header + rest
    at = header_ttl_at(payload)
    assert at is not None and at[:2] == (0, len(header))
    rewritten = with_ttl(payload, at, reduced)
    message = decode_message(rewritten)
    assert message.header is not None and message.header.ttl == reduced
    original = decode_message(payload).header
    assert original is not None and message.header == Header(
        durable=original.durable, priority=original.priority, ttl=reduced,
        first_acquirer=original.first_acquirer, delivery_count=original.delivery_count)  # fmt: skip
    assert rewritten.endswith(rest)  # the annotations and the bare message: their exact bytes
    if code in (0x70, 0x52):  # a uint keeps its width: only the value's bytes differ
        value_end = at[2] + 1 + width
        assert len(rewritten) == len(payload)
        assert rewritten[: at[2] + 1] == payload[: at[2] + 1] and rewritten[value_end:] == payload[value_end:]
    out = proton.Message()
    out.decode(rewritten)
    assert round(out.ttl * 1000) == reduced


def test_a_message_without_a_header_ttl_has_no_ttl_to_rewrite() -> None:
    for payload in (
        encode_message(Message.value("no header")),
        encode_message(Message.value("no ttl", header=Header(durable=True, priority=4))),
        b"\x00\x53\x70\x45" + encode_message(Message.value("list0")),
        b"\x00\x53\x70\xc0\x04\x03\x41\x40\x40" + encode_message(Message.value("null ttl")),
    ):
        assert header_ttl_at(payload) is None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_whatever_header_peek_reads_a_ttl_from_the_rewrite_can_rewrite(data: st.DataObject) -> None:
    """A peer's header bytes, mutated anywhere: when peek accepts the message and reads a ttl
    from it (so the router may hold it and reduce that ttl), header_ttl_at finds that ttl and
    with_ttl rewrites it into a message peek reads the new ttl from, everything after the header
    unchanged; otherwise the message is refused at peek (DecodeError) and never waits."""
    header = _header(True, 4, (0x70, 4, 60_000), data.draw(st.integers(3, 5)), data.draw(st.booleans()))
    mutated = bytearray(header)
    for _ in range(data.draw(st.integers(1, 3))):
        mutated[data.draw(st.integers(3, len(mutated) - 1))] = data.draw(st.integers(0, 255))
    rest = encode_message(Message.value("v", properties=Properties(to="q")))
    payload = bytes(mutated) + rest
    try:
        view = peek(payload)
    except DecodeError:
        return
    if not view.ttl_ms:
        return
    at = header_ttl_at(payload)
    assert at is not None
    rewritten = with_ttl(payload, at, 1)
    assert peek(rewritten).ttl_ms == 1
    assert rewritten[at[0] :].endswith(payload[at[1] :])
