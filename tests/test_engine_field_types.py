"""Every field of every frame, given a value of any type, through the engine: a frame whose
fields do not have their spec types (transport §2.7, security §5.3.3, the described types inside
them) is amqp:decode-error, answered with a close carrying it; whatever the value, nothing but
events and frames comes out of the engine (never another exception), and nothing of a wrong type
reaches the application.

The contexts put each frame where it is otherwise valid (a transfer on an attached link with
credit, a detach of an attached handle ...), so only the field under test can be at fault.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.amqp import errors as E
from router.amqp import performatives as p
from router.amqp.connection import Connection, ConnectionConfig
from router.amqp.decode import decode
from router.amqp.encode import encode
from router.amqp.errors import DecodeError
from router.amqp.events import ProtocolViolation, RemoteClose, RemoteDetach, RemoteEnd
from router.amqp.framing import AMQP_HEADER, FRAME_AMQP, FRAME_SASL, SASL_HEADER
from router.amqp.messaging import Accepted, Source, Target
from router.amqp.sasl import SaslServerConfig
from router.amqp.types import Described, UInt, ULong

from router.testing.enginepair import parse_wire
from .strategies import values
from .test_engine_violations import Server

# A valid field list for each frame in its context below (null fields are absent).
VALID: dict[type, list[Any]] = {
    p.Open: ["client"],
    p.Begin: [None, UInt(0), UInt(100), UInt(100)],
    p.Attach: ["x", UInt(1), False, None, None, Source(address="q"), Target(address="q"), None, None, UInt(0)],
    p.Flow: [UInt(0), UInt(100), UInt(0), UInt(100)],
    p.Transfer: [UInt(0), UInt(0), b"t", UInt(0), False, False],
    p.Disposition: [True, UInt(0), UInt(0), True, Accepted()],
    p.Detach: [UInt(0), True, None],
    p.End: [None],
    p.Close: [None],
}
FIELDS = [
    (cls, index)
    for cls in p.AMQP_PERFORMATIVES
    for index in range(len(dataclasses.fields(cls)))
]  # fmt: skip


def _raw_frame(channel: int, cls: type, items: list[Any], frame_type: int = FRAME_AMQP) -> bytes:
    body = encode(Described(ULong(cls.DESCRIPTOR_CODE), items))  # type: ignore[attr-defined]
    return (8 + len(body)).to_bytes(4, "big") + bytes((2, frame_type)) + channel.to_bytes(2, "big") + body


def _with(cls: type, index: int, value: Any) -> list[Any]:
    items = VALID[cls] + [None] * (len(dataclasses.fields(cls)) - len(VALID[cls]))
    items[index] = value
    return items


def _context(cls: type) -> Server:
    """A server engine where a `cls` frame on channel 0 is valid."""
    server = Server(handshake=cls is not p.Open)
    if cls is p.Open:
        server.feed(AMQP_HEADER)
        server.engine.open()
    elif cls not in (p.Begin, p.Close):
        server.begin(0)
        if cls in (p.Transfer, p.Detach):
            server.attach_sender(0, 0)
    server.out()
    server.peer.take_events()
    return server


def _decodes(cls: type, items: list[Any]) -> bool:
    try:
        decode(encode(Described(ULong(cls.DESCRIPTOR_CODE), items)))  # type: ignore[attr-defined]
    except DecodeError:
        return False
    return True


@pytest.mark.parametrize(("cls", "index"), FIELDS, ids=[f"{c.__name__}.{dataclasses.fields(c)[i].name}" for c, i in FIELDS])
@settings(max_examples=25)
@given(value=values | st.none())
def test_a_field_of_any_value_is_decoded_or_refused_with_decode_error(cls: type, index: int, value: Any) -> None:
    server = _context(cls)
    items = _with(cls, index, value)
    data = _raw_frame(0, cls, items)
    server.feed(data)  # raises nothing, whatever the value
    out = server.out()
    violations = server.violations()
    if len(data) > server.engine.config.max_frame_size:  # refused before decoding
        assert [(v.condition, v.scope) for v in violations] == [(E.FRAMING_ERROR, "connection")]
    elif not _decodes(cls, items):
        assert [(v.condition, v.scope) for v in violations] == [(E.DECODE_ERROR, "connection")]
        closes = [b for b in out if isinstance(b, p.Close)]
        assert len(closes) == 1 and closes[0].error is not None
        assert closes[0].error.condition == E.DECODE_ERROR
        assert isinstance(closes[0].error.description, str) and closes[0].error.description
    else:  # a valid frame: any violation it causes is answered on the wire with its condition
        for violation in violations:
            answers = [b.error for b in out if isinstance(b, (p.Close, p.End, p.Detach)) and b.error is not None]
            assert violation.condition in {str(e.condition) for e in answers}


@pytest.mark.parametrize(
    ("cls", "field", "value"),
    [
        (p.Close, "error", True),  # issue: a 40-byte input whose close.error is a boolean
        (p.Close, "error", "text"),
        (p.Close, "error", UInt(7)),
        (p.End, "error", Accepted()),
        (p.Detach, "error", {"condition": "x"}),
        (p.Attach, "source", Target(address="q")),  # a target where a source belongs
        (p.Attach, "target", "q"),
        (p.Attach, "unsettled", {"tag": None}),  # keys are delivery-tags (binary)
        (p.Transfer, "state", b"accepted"),
        (p.Disposition, "state", True),
        (p.Disposition, "state", Source()),
        (p.Disposition, "state", Described(ULong(0x99), [])),  # no delivery-state of ours
    ],
)
def test_a_wrongly_typed_field_closes_with_decode_error_and_reaches_nobody(cls: type, field: str, value: Any) -> None:
    server = _context(cls)
    index = [f.name for f in dataclasses.fields(cls)].index(field)
    server.feed(_raw_frame(0, cls, _with(cls, index, value)))
    events = server.peer.take_events()
    # the application never sees the frame: no RemoteClose/End/Detach holding the bad value
    assert not [e for e in events if isinstance(e, (RemoteClose, RemoteEnd, RemoteDetach))]
    (violation,) = [e for e in events if isinstance(e, ProtocolViolation)]
    assert (violation.condition, violation.scope) == (E.DECODE_ERROR, "connection")
    assert field.replace("_", "-") in violation.description
    (close,) = [b for b in server.out() if isinstance(b, p.Close)]
    assert close.error is not None and close.error.condition == E.DECODE_ERROR


@pytest.mark.parametrize(
    ("items"),
    [
        [b"ANONYMOUS"],  # mechanism: a symbol, not binary
        ["ANONYMOUS", "not binary"],
        ["ANONYMOUS", b"x", UInt(1)],  # hostname: a string
        [None],
    ],
)
def test_a_wrongly_typed_sasl_init_ends_the_exchange_cleanly(items: list[Any]) -> None:
    engine = Connection(
        ConnectionConfig(container_id="server", server=True, sasl_server=SaslServerConfig(mechanisms=("ANONYMOUS",)))
    )
    engine.receive_data(SASL_HEADER + _raw_frame(0, p.SaslInit, items, FRAME_SASL), 0.0)
    out = parse_wire(engine.data_to_send())
    events = engine.events()
    assert out[0] == SASL_HEADER and isinstance(out[1].body, p.SaslMechanisms)  # type: ignore[union-attr]
    (violation,) = [e for e in events if isinstance(e, ProtocolViolation)]
    assert "SASL" in violation.description and engine.finished


SASL_FIELDS = [(p.SaslInit, i) for i in range(3)]


@pytest.mark.parametrize(("cls", "index"), SASL_FIELDS, ids=[f"SaslInit.{dataclasses.fields(p.SaslInit)[i].name}" for _, i in SASL_FIELDS])
@settings(max_examples=25)
@given(value=values | st.none())
def test_a_sasl_init_field_of_any_value_is_read_or_ends_the_exchange(cls: type, index: int, value: Any) -> None:
    engine = Connection(ConnectionConfig(container_id="server", server=True, sasl_server=SaslServerConfig(mechanisms=("ANONYMOUS",))))
    items: list[Any] = ["ANONYMOUS", None, None]
    items[index] = value
    data = _raw_frame(0, cls, items, FRAME_SASL)
    engine.receive_data(SASL_HEADER + data, 0.0)  # raises nothing, whatever the value
    events = engine.events()
    if len(data) <= engine.config.max_frame_size and not _decodes(cls, items):
        (violation,) = [e for e in events if isinstance(e, ProtocolViolation)]
        assert engine.finished and violation.scope == "connection"
