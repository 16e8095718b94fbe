"""Filter-sets (router.amqp.filters) and the message fields they read (router.amqp.msgfields)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.amqp import filters as F
from router.amqp.message import Message, encode_message
from router.amqp.messaging import AmqpValue, Header, Properties
from router.amqp.msgfields import MessageFields
from router.amqp.types import Described, Symbol, UByte, ULong


def described(kind: str, value: Any) -> Described:
    return Described(Symbol(kind), value)


def fields(subject: str | None = None, props: dict[str, Any] | None = None, **more: Any) -> MessageFields:
    message = Message(properties=Properties(subject=subject, **more.get("properties", {})),
                      header=more.get("header"), message_annotations=more.get("annotations"),
                      application_properties=props, body=AmqpValue(value="body"))  # fmt: skip
    return MessageFields(encode_message(message))


def one(kind: str, value: Any) -> F.ConsumerFilter:
    result, echo = F.parse_filter_set({Symbol("f"): described(kind, value)})
    assert result is not None and echo == {Symbol("f"): described(kind, value)}
    return result


def test_direct_binding_is_subject_equals() -> None:
    f = one(F.DIRECT, "orders.eu")
    assert f.matches(fields("orders.eu"))
    assert not f.matches(fields("orders.us"))
    assert not f.matches(fields(None))


@pytest.mark.parametrize(
    "pattern, subject, expected",
    [("*.stock.#", "usd.stock", True), ("*.stock.#", "eur.stock.db", True), ("*.stock.#", "stock.nasdaq", False),
     ("#", None, True), ("*", None, False), ("a.#.b", "a.b", True), ("a.#.b", "a.x.y.b", True), ("a.*", "a.b.c", False)],
)  # fmt: skip
def test_topic_binding(pattern: str, subject: str | None, expected: bool) -> None:
    assert one(F.TOPIC, pattern).matches(fields(subject)) is expected


def _reference(pattern: list[str], words: list[str]) -> bool:
    regex = r"\.".join("[^.]*" if p == "*" else ".*" if p == "#" else re.escape(p) for p in pattern)
    # '#' matches zero or more words: written as regex alternatives over the joined subject
    parts = []
    for p in pattern:
        parts.append(None if p == "#" else p)
    del regex

    def match(pi: int, wi: int) -> bool:
        if pi == len(pattern):
            return wi == len(words)
        if pattern[pi] == "#":
            return any(match(pi + 1, k) for k in range(wi, len(words) + 1))
        return wi < len(words) and (pattern[pi] == "*" or pattern[pi] == words[wi]) and match(pi + 1, wi + 1)

    return match(0, 0)


_words = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=7)


@given(st.lists(st.sampled_from(["a", "b", "*", "#"]), min_size=1, max_size=6), _words)
def test_topic_matching_agrees_with_the_definition(pattern: list[str], words: list[str]) -> None:
    assert F.topic_matches(pattern, words) is _reference(pattern, words)


def test_topic_matching_stays_fast_on_hostile_patterns() -> None:
    pattern = ["#", "a"] * 20 + ["b"]
    assert not F.topic_matches(pattern, ["a"] * 5000)
    wide = ["#"] + ["*", "a"] * 500 + ["b", "#"]  # backtracking would take 30,000 * 1,000 steps
    assert not F.topic_matches(wide, ["a"] * 30_000)
    assert F.topic_matches(wide, ["a"] * 30_000 + ["b"])


def test_headers_binding_all_and_any() -> None:
    all_ = one(F.HEADERS, {Symbol("x-match"): Symbol("all"), "color": "red", "size": None, "x-other": 1})
    assert all_.matches(fields(props={"color": "red", "size": 3}))
    assert not all_.matches(fields(props={"color": "red"}))
    assert not all_.matches(fields(props={"color": "blue", "size": 3}))
    any_ = one(F.HEADERS, {"x-match": Symbol("any"), "color": "red", "size": 3})
    assert any_.matches(fields(props={"size": 3}))
    assert not any_.matches(fields(props={"size": 4}))
    assert not any_.matches(fields(props={"size": 3.0}))  # the same value and type


def test_selector_reads_headers_properties_and_annotations() -> None:
    f = one(F.SELECTOR, "JMSPriority > 5 AND amqp.subject = 's' AND JMSMessageID = 'm1' AND color = 'red' "
                        "AND JMSType = 't' AND JMSDeliveryMode = 'PERSISTENT' AND NOT JMSRedelivered")
    good = fields("s", {"color": "red"}, header=Header(priority=UByte(7), durable=True),
                  properties={"message_id": "m1"}, annotations={Symbol("x-opt-jms-type"): "t"})  # fmt: skip
    assert f.matches(good)
    assert not f.matches(fields("s", {"color": "red"}, header=Header(priority=UByte(7)),
                                properties={"message_id": "m1"}, annotations={Symbol("x-opt-jms-type"): "t"}))
    assert one(F.SELECTOR, "JMSPriority = 4 AND amqp.durable = FALSE").matches(fields("s"))  # the defaults


def test_fields_are_read_lazily_and_never_from_the_body() -> None:
    payload = encode_message(Message(properties=Properties(subject="s"), application_properties={"a": 1},
                                     body=AmqpValue(value="x")))  # fmt: skip
    body_at = payload.rindex(b"\x00\x53\x77")
    broken = payload[:body_at] + b"\x00\x53\x77\xff\xff"  # a body no decoder would take
    got = MessageFields(broken)
    assert not got.unreadable and got.selector_value("a") == 1
    cut = MessageFields(payload[: body_at - 3])  # a first frame cut inside application-properties
    assert cut.unreadable
    assert not one(F.SELECTOR, "a IS NULL").matches(cut)  # unreadable: not matched


def test_unknown_filters_are_left_out_and_known_ones_echoed_as_keyed() -> None:
    selector = Described(ULong(0x0000468C_00000004), "a = 1")
    result, echo = F.parse_filter_set({Symbol("sel"): selector, Symbol("mine"): described("example:x", "y"),
                                       Symbol("nl"): described(F.NO_LOCAL, [])})  # fmt: skip
    assert result is not None and result.no_local and result.selector is not None
    assert echo == {Symbol("sel"): selector, Symbol("nl"): described(F.NO_LOCAL, [])}
    assert F.parse_filter_set({Symbol("mine"): described("example:x", "y")}) == (None, None)
    assert F.parse_filter_set(None) == (None, None)


@pytest.mark.parametrize(
    "filter_set, words",
    [
        ({Symbol("s"): described(F.SELECTOR, "a = ")}, "position 4"),
        ({Symbol("s"): described(F.SELECTOR, 5)}, "needs a string"),
        ({Symbol("d"): described(F.DIRECT, ["x"])}, "needs a string"),
        ({Symbol("h"): described(F.HEADERS, "x")}, "needs a map"),
        ({Symbol("h"): described(F.HEADERS, {"a": 1})}, "x-match"),
        ({Symbol("h"): described(F.HEADERS, {"x-match": "all", "a": [1]})}, "simple value"),
        ({Symbol("h"): described(F.HEADERS, {"x-match": "all", **{f"k{i}": i for i in range(100)}})}, "more than"),
        ({Symbol(f"f{i}"): described(F.DIRECT, "x") for i in range(20)}, "at most"),
        ({Symbol("a"): described(F.DIRECT, "x"), Symbol("b"): described(F.DIRECT, "y")}, "second"),
        ({Symbol("t"): described(F.TOPIC, "a." * 5000)}, "longer than"),
    ],
)
def test_malformed_known_filters_are_refused(filter_set: dict[Any, Any], words: str) -> None:
    with pytest.raises(F.FilterError, match=words):
        F.parse_filter_set(filter_set)


# --- hypothesis: MessageFields reads what was encoded, and takes any bytes without raising ---------

_app_values = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**63 - 1),
                        st.text(max_size=10), st.floats(allow_nan=False))  # fmt: skip


@given(st.one_of(st.none(), st.text(max_size=12)),
       st.dictionaries(st.text(min_size=1, max_size=6), _app_values, max_size=5),
       st.one_of(st.none(), st.integers(min_value=0, max_value=255)))  # fmt: skip
def test_fields_read_back_what_was_encoded(subject: str | None, props: dict[str, Any], priority: int | None) -> None:
    header = Header(priority=UByte(priority)) if priority is not None else None
    got = fields(subject, props or None, header=header)
    assert not got.unreadable
    assert got.selector_value("amqp.subject") == subject
    assert got.selector_value("JMSPriority") == (4 if priority is None else priority)
    for key, value in props.items():
        assert got.selector_value(key) == value


@given(st.binary(max_size=200))
def test_any_bytes_are_read_or_unreadable_never_an_error(payload: bytes) -> None:
    got = MessageFields(payload)
    f = one(F.SELECTOR, "a = 1 OR JMSPriority > 1 OR amqp.subject IS NULL")
    assert f.matches(got) in (True, False)
    if got.unreadable:
        assert not f.matches(got)


_VALID = encode_message(Message(header=Header(priority=UByte(5)), properties=Properties(subject="a.b", message_id="m"),
                                message_annotations={Symbol("x-opt-jms-type"): "t"},
                                application_properties={"a": 1, "s": "x"}, body=AmqpValue(value="body")))  # fmt: skip


@given(st.lists(st.tuples(st.integers(min_value=0, max_value=len(_VALID) - 1), st.integers(0, 255)), max_size=4),
       st.integers(min_value=0, max_value=len(_VALID)))  # fmt: skip
def test_damaged_messages_are_read_or_unreadable_never_an_error(changes: list[tuple[int, int]], cut: int) -> None:
    payload = bytearray(_VALID)
    for at, value in changes:
        payload[at] = value
    got = MessageFields(bytes(payload[:cut]))
    f = one(F.SELECTOR, "a = 1 AND JMSType = 't' AND JMSPriority > 1 AND amqp.subject LIKE 'a%' AND s IN ('x')")
    assert f.matches(got) in (True, False)
    if not changes and cut == len(_VALID):
        assert f.matches(got)


# --- hypothesis: any filter-set is applied, left out or refused with FilterError, nothing else -----

from tests import strategies as amqp_values  # noqa: E402

_known = st.sampled_from([F.DIRECT, F.TOPIC, F.HEADERS, F.NO_LOCAL, F.SELECTOR, "example:other"]).map(Symbol)
_filter_values = st.one_of(
    amqp_values.scalars, st.text(max_size=30), st.lists(amqp_values.scalars, max_size=3),
    st.dictionaries(st.one_of(st.just("x-match"), st.text(max_size=5)),
                    st.one_of(amqp_values.scalars, st.sampled_from(["any", "all"]).map(Symbol)), max_size=5),
)  # fmt: skip


@given(st.dictionaries(st.text(st.characters(max_codepoint=0x7F), max_size=6).map(Symbol),
                       st.one_of(st.none(), st.builds(Described, st.one_of(_known, amqp_values.descriptors), _filter_values)),
                       max_size=6))  # fmt: skip
def test_any_filter_set_is_applied_left_out_or_refused(filter_set: dict[Any, Any]) -> None:
    try:
        applied, echo = F.parse_filter_set(filter_set)
    except F.FilterError as exc:
        assert str(exc)
        return
    assert (applied is None) == (echo is None)
    if echo is not None:
        assert all(filter_set[key] is value for key, value in echo.items())  # as received
        assert applied is not None and applied.matches(fields("s", {"a": 1})) in (True, False)


def test_a_view_of_a_frame_is_copied_only_up_to_the_body() -> None:
    payload = encode_message(Message(properties=Properties(subject="s"), application_properties={"a": 1},
                                     body=AmqpValue(value="x" * 10_000)))  # fmt: skip
    got = MessageFields(memoryview(payload))
    assert type(got.payload) is bytes and len(got.payload) < 100
    assert got.selector_value("a") == 1 and got.property("subject") == "s"
