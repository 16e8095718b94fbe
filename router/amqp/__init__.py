"""AMQP 1.0 as a sans-IO library: the type system and codec (types §1), framing (transport §2.3),
the connection, session and link engine (transport §2.4-§2.7), messages and their sections
(messaging §3), SASL (security §5.3), and what a router reads from and rewrites in a message.

Owns: the protocol rules. No I/O, no clock (time comes in as `now`), no routing decisions.

The names below are the supported face of the package (other projects and the router's own
outer layers import them from here); the modules hold more, for the router's internals and
tests, without a promise of stability:

    from router.amqp import Connection, ConnectionConfig, Message, Source, Target, events

    client = Connection(ConnectionConfig(container_id="me"))
    client.open()
    transport.write(client.data_to_send())      # bytes to the peer
    client.receive_data(transport.read(), now)  # bytes from the peer, `now` from your clock
    for event in client.events(): ...           # events.RemoteOpen, events.TransferReceived, ...
"""

from __future__ import annotations

from . import errors, events
from .connection import Connection, ConnectionConfig
from .errors import AmqpError, DecodeError, EncodeError, LocalUsageError, ProtocolError
from .events import Event
from .link import Link
from .message import Message, decode_message, encode_message
from .messaging import (
    ACCEPTED,
    RELEASED,
    Accepted,
    AmqpSequence,
    AmqpValue,
    AnyOutcome,
    ApplicationProperties,
    Data,
    DeliveryState,
    Header,
    MessageAnnotations,
    Modified,
    Outcome,
    Properties,
    Received,
    Rejected,
    Released,
    Source,
    Target,
    is_terminal,
)
from .performatives import RECEIVER, SENDER, Error, Performative
from .sasl import SaslClientConfig, SaslServerConfig
from .session import Session
from .types import Symbol

__all__ = [
    "ACCEPTED", "RECEIVER", "RELEASED", "SENDER",
    "Accepted", "AmqpError", "AmqpSequence", "AmqpValue", "AnyOutcome", "ApplicationProperties",
    "Connection", "ConnectionConfig", "Data", "DecodeError", "DeliveryState", "EncodeError",
    "Error", "Event", "Header", "Link", "LocalUsageError", "Message", "MessageAnnotations",
    "Modified", "Outcome", "Performative", "Properties", "ProtocolError", "Received", "Rejected",
    "Released", "SaslClientConfig", "SaslServerConfig", "Session", "Source", "Symbol", "Target",
    "decode_message", "encode_message", "errors", "events", "is_terminal",
]  # fmt: skip
