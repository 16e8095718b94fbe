"""Control-message bodies (topology/codec.py): every message survives encode -> decode, and
untrusted bodies give a message, `Unsupported` or MalformedMessage, never another exception."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.amqp.decode import decode
from router.amqp.encode import encode
from router.amqp.types import Array, Symbol
from topology.codec import ID_MAX_LENGTH, SEQ_MAX, MalformedMessage, decode_body, encode_body, from_map, to_map
from topology.graph import COST_MAX, LinkState
from topology.messages import (
    DIGEST_SIZE,
    PROTOCOL_VERSION,
    ControlMessage,
    Hello,
    LinkStateRequest,
    LinkStateUpdate,
    MobileAddressRequest,
    MobileAddressUpdate,
    RouterAdvert,
    Unsupported,
)

from . import strategies as amqp

ids = st.text(st.characters(codec="utf-8"), min_size=1, max_size=ID_MAX_LENGTH)
seqs = st.one_of(st.integers(0, 10), st.integers(0, SEQ_MAX))
digests = st.binary(min_size=DIGEST_SIZE, max_size=DIGEST_SIZE)
id_lists = st.lists(ids, max_size=8, unique=True).map(tuple)
common = {"router_id": ids, "instance": seqs}


def _mau(exist: tuple[str, ...] | None, added: tuple[str, ...], removed: tuple[str, ...], **kw: Any) -> MobileAddressUpdate:
    if exist is not None:
        return MobileAddressUpdate(exist=exist, **kw)
    removed = tuple(a for a in removed if a not in added)
    return MobileAddressUpdate(added=added, removed=removed, **{**kw, "mobile_seq": max(1, kw["mobile_seq"])})


messages: st.SearchStrategy[ControlMessage] = st.one_of(
    st.builds(Hello, **common, seen=id_lists, hello_interval_ms=st.integers(1, 2**31 - 1)),
    st.builds(RouterAdvert, **common, ra_seq=seqs, ls_seq=seqs, mobile_seq=seqs, digest=digests),
    st.builds(LinkStateRequest, **common, target=ids, target_instance=seqs, ls_seq=seqs),
    st.builds(
        LinkStateUpdate, **common, mobile_seq=seqs, digest=digests,
        link_state=st.builds(LinkState, seq=seqs, peers=st.dictionaries(ids, st.integers(1, COST_MAX), max_size=6)),
    ),  # fmt: skip
    st.builds(MobileAddressRequest, **common, target=ids, target_instance=seqs, mobile_seq=seqs, have_seq=seqs),
    st.builds(
        _mau, **common, mobile_seq=seqs, digest=digests,
        exist=st.none() | id_lists, added=id_lists, removed=id_lists,
    ),  # fmt: skip
)


@given(messages)
def test_round_trip(message: ControlMessage) -> None:
    assert decode_body(encode_body(message)) == message
    assert from_map(to_map(message)) == message


def decodes_or_rejects(data: bytes) -> None:
    try:
        result = decode_body(data)
    except MalformedMessage as exc:
        assert exc.condition == "amqp:decode-error"
        return
    assert isinstance(result, (Unsupported, *ControlMessage.__args__))  # type: ignore[attr-defined]


@given(amqp.values)
def test_any_amqp_value_decodes_or_is_malformed(value: Any) -> None:
    decodes_or_rejects(encode(value))


@given(st.binary(max_size=64))
def test_random_bytes_decode_or_are_malformed(data: bytes) -> None:
    decodes_or_rejects(data)


@given(messages, st.data())
def test_mutated_bodies_decode_or_are_malformed(message: ControlMessage, data: st.DataObject) -> None:
    body = to_map(message)
    keys = sorted(body)
    for _ in range(data.draw(st.integers(1, 3))):
        action = data.draw(st.sampled_from(("delete", "replace", "add", "list-item")))
        key = data.draw(st.sampled_from(keys))
        if action == "delete":
            body.pop(key, None)
        elif action == "replace":
            body[key] = data.draw(amqp.values)
        elif action == "add":
            body[data.draw(st.text(max_size=4))] = data.draw(amqp.values)
        elif isinstance(body.get(key), list):
            body[key] = [*body[key], data.draw(amqp.values)]
    decodes_or_rejects(encode(body))


@given(messages, st.data())
def test_truncated_bodies_are_malformed(message: ControlMessage, data: st.DataObject) -> None:
    encoded = encode_body(message)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(MalformedMessage):
        decode_body(encoded[:cut])


HELLO = Hello(router_id="A", instance=7, seen=("B", "C"))


def test_wire_shape_is_a_map_with_string_keys() -> None:
    body = decode(encode_body(HELLO))
    assert body == {"op": "HELLO", "pv": 1, "id": "A", "instance": 7, "seen": ["B", "C"], "hello_ms": 1000}
    assert list(body) == ["op", "pv", "id", "instance", "seen", "hello_ms"]


def test_newer_version_and_unknown_opcode_are_unsupported() -> None:
    newer = {**to_map(HELLO), "pv": PROTOCOL_VERSION + 1, "seen": "a newer shape"}
    assert decode_body(encode(newer)) == Unsupported(opcode="HELLO", version=2, router_id="A", reason="newer protocol version")
    unknown = {"op": "PING", "pv": 1, "id": "A"}
    assert decode_body(encode(unknown)) == Unsupported(opcode="PING", version=1, router_id="A", reason="unknown opcode")
    anonymous = {"op": "PING", "pv": 3}
    assert decode_body(encode(anonymous)).router_id is None  # type: ignore[union-attr]


def test_unknown_keys_are_ignored_so_version_1_can_grow() -> None:
    grown = {**to_map(HELLO), "colour": "blue", "area": "0"}
    assert decode_body(encode(grown)) == HELLO


def test_symbol_keys_and_arrays_are_accepted() -> None:
    body = {Symbol(k): v for k, v in to_map(HELLO).items()}
    body[Symbol("seen")] = Array("string", ("B", "C"))
    assert decode_body(encode(body)) == HELLO


MAU = MobileAddressUpdate(router_id="A", instance=1, mobile_seq=2, digest=bytes(16), added=("x",), removed=("y",))


@pytest.mark.parametrize(
    "body, why",
    [
        ([1, 2], "a control message body is a map"),
        ({"pv": 1, "id": "A"}, "missing field 'op'"),
        ({"op": 5, "pv": 1}, "op must be a string"),
        ({**to_map(HELLO), "pv": 0}, "pv must be an integer"),
        ({**to_map(HELLO), "pv": True}, "pv must be an integer"),
        ({**to_map(HELLO), "id": ""}, "id must be a string"),
        ({**to_map(HELLO), "id": "x" * (ID_MAX_LENGTH + 1)}, "id must be a string"),
        ({**to_map(HELLO), "instance": -1}, "instance must be an integer"),
        ({**to_map(HELLO), "seen": ["B", "B"]}, "seen repeats an entry"),
        ({**to_map(HELLO), "seen": [""]}, "non-empty strings"),
        ({**to_map(HELLO), "hello_ms": 0}, "hello_ms must be an integer"),
        ({k: v for k, v in to_map(HELLO).items() if k != "seen"}, "missing field 'seen'"),
        ({**to_map(MAU), "digest": b"short"}, "digest must be 16 bytes"),
        ({**to_map(MAU), "exist": []}, "either full (exist) or differential"),
        ({**to_map(MAU), "add": ["x"], "del": ["x"]}, "adds and removes the same address"),
        ({**to_map(MAU), "mobile_seq": 0}, "mobile_seq >= 1"),
        ({**to_map(MAU), "add": "x"}, "add must be a list of strings"),
        ({"op": "LSU", "pv": 1, "id": "A", "instance": 1, "ls_seq": 1, "peers": {"B": 0}, "mobile_seq": 0,
          "digest": bytes(16)}, "cost of 'B' must be an integer"),
        ({"op": "LSU", "pv": 1, "id": "A", "instance": 1, "ls_seq": 1, "peers": [], "mobile_seq": 0,
          "digest": bytes(16)}, "peers must be a map"),
    ],
)  # fmt: skip
def test_malformed_bodies_are_rejected_with_a_reason(body: Any, why: str) -> None:
    with pytest.raises(MalformedMessage, match=why.replace("(", r"\(").replace(")", r"\)")):
        decode_body(encode(body))
