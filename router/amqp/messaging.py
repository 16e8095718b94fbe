"""Messaging types (messaging §3.4-§3.5): delivery states, outcomes, source, target, lifetime
policies, and the message sections (messaging §3.2) as frozen dataclasses.

Owns: these types' fields and descriptors, and the outcome helpers the router needs.
Must not touch: message byte layout (message.py), link behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Final

from .composite import composite, restricted
from .performatives import Error, Fields, Symbols


# --- delivery states, messaging §3.4 ------------------------------------------------------------


_STATE: Final = ("delivery-state",)
_OUTCOME: Final = ("delivery-state", "outcome")


@composite(0x23, "amqp:received:list", "uint!", "ulong!", provides=_STATE)
@dataclass(frozen=True, slots=True, kw_only=True)
class Received:
    DESCRIPTOR_CODE: ClassVar[int]
    section_number: int
    section_offset: int


@composite(0x24, "amqp:accepted:list", provides=_OUTCOME)
@dataclass(frozen=True, slots=True, kw_only=True)
class Accepted:
    DESCRIPTOR_CODE: ClassVar[int]


@composite(0x25, "amqp:rejected:list", "error", provides=_OUTCOME)
@dataclass(frozen=True, slots=True, kw_only=True)
class Rejected:
    DESCRIPTOR_CODE: ClassVar[int]
    error: Error | None = None


@composite(0x26, "amqp:released:list", provides=_OUTCOME)
@dataclass(frozen=True, slots=True, kw_only=True)
class Released:
    DESCRIPTOR_CODE: ClassVar[int]


@composite(0x27, "amqp:modified:list", "boolean", "boolean", "fields", provides=_OUTCOME)
@dataclass(frozen=True, slots=True, kw_only=True)
class Modified:
    DESCRIPTOR_CODE: ClassVar[int]
    delivery_failed: bool | None = None
    undeliverable_here: bool | None = None
    message_annotations: Fields | None = None


# The outcomes of messaging §3.4 (terminal: see is_terminal). What a peer may put where the
# spec says delivery-state or outcome also includes the transaction types: DeliveryState and
# AnyOutcome, after them below.
Outcome = Accepted | Rejected | Released | Modified
ACCEPTED: Final = Accepted()
RELEASED: Final = Released()
OUTCOME_SYMBOLS: Final = (
    "amqp:accepted:list",
    "amqp:rejected:list",
    "amqp:released:list",
    "amqp:modified:list",
)


def is_terminal(state: object) -> bool:
    """True for outcomes (messaging §3.4): the delivery's fate is decided."""
    return isinstance(state, (Accepted, Rejected, Released, Modified))


# --- lifetime policies, messaging §3.5.10-§3.5.13 -----------------------------------------------


@composite(0x2B, "amqp:delete-on-close:list")
@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteOnClose:
    DESCRIPTOR_CODE: ClassVar[int]


@composite(0x2C, "amqp:delete-on-no-links:list")
@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteOnNoLinks:
    DESCRIPTOR_CODE: ClassVar[int]


@composite(0x2D, "amqp:delete-on-no-messages:list")
@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteOnNoMessages:
    DESCRIPTOR_CODE: ClassVar[int]


@composite(0x2E, "amqp:delete-on-no-links-or-messages:list")
@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteOnNoLinksOrMessages:
    DESCRIPTOR_CODE: ClassVar[int]


# --- terminus, messaging §3.5.3-§3.5.4 ----------------------------------------------------------
# An address is `*` requiring the archetype "address", which only address-string (messaging
# §3.2.15) provides: an address of another type (binary, say) is a decode error like any field of
# the wrong type. A source's filter is a filter-set, its default outcome an outcome.


@composite(
    0x28, "amqp:source:list",
    "string", "uint", "symbol", "uint", "boolean", "fields", "symbol", "filter-set", "outcome",
    "symbol*", "symbol*", provides=("source",),
)  # fmt: skip
@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    DESCRIPTOR_CODE: ClassVar[int]
    address: str | None = None
    durable: int = 0
    expiry_policy: str = "session-end"
    timeout: int = 0
    dynamic: bool = False
    dynamic_node_properties: Fields | None = None
    distribution_mode: str | None = None
    filter: dict[Any, Any] | None = None
    default_outcome: AnyOutcome | None = None
    outcomes: Symbols | None = None
    capabilities: Symbols | None = None


@composite(
    0x29, "amqp:target:list", "string", "uint", "symbol", "uint", "boolean", "fields", "symbol*",
    provides=("target",),
)  # fmt: skip
@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    DESCRIPTOR_CODE: ClassVar[int]
    address: str | None = None
    durable: int = 0
    expiry_policy: str = "session-end"
    timeout: int = 0
    dynamic: bool = False
    dynamic_node_properties: Fields | None = None
    capabilities: Symbols | None = None


# --- the transaction types a link or a delivery may carry, transactions §4.5 ---------------------
# Known so that a coordinator target or a transactional state is a valid field (the router refuses
# coordinator links itself, router/core/links.py) rather than an unknown described value.


@composite(0x30, "amqp:coordinator:list", "symbol*", provides=("target",))
@dataclass(frozen=True, slots=True, kw_only=True)
class Coordinator:
    DESCRIPTOR_CODE: ClassVar[int]
    capabilities: Symbols | None = None


@composite(0x33, "amqp:declared:list", "binary!", provides=_OUTCOME)
@dataclass(frozen=True, slots=True, kw_only=True)
class Declared:
    DESCRIPTOR_CODE: ClassVar[int]
    txn_id: bytes


@composite(0x34, "amqp:transactional-state:list", "binary!", "outcome", provides=_STATE)
@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionalState:
    DESCRIPTOR_CODE: ClassVar[int]
    txn_id: bytes
    outcome: AnyOutcome | None = None


# What the archetypes admit (composite.py checks every decoded field against them): an outcome
# (messaging §3.4, transactions §4.5.5 declared) and a delivery-state (transport §2.7.3 and
# messaging §3.4.1 received, transactions §4.5.8 transactional-state).
AnyOutcome = Outcome | Declared
DeliveryState = Received | AnyOutcome | TransactionalState


# --- message sections, messaging §3.2 -----------------------------------------------------------


@composite(0x70, "amqp:header:list", "boolean", "ubyte", "uint", "boolean", "uint")
@dataclass(frozen=True, slots=True, kw_only=True)
class Header:
    DESCRIPTOR_CODE: ClassVar[int]
    durable: bool | None = None
    priority: int | None = None
    ttl: int | None = None
    first_acquirer: bool | None = None
    delivery_count: int | None = None


@restricted(0x71, "amqp:delivery-annotations:map", "map")
@dataclass(frozen=True, slots=True, kw_only=True)
class DeliveryAnnotations:
    DESCRIPTOR_CODE: ClassVar[int]
    value: dict[Any, Any]


@restricted(0x72, "amqp:message-annotations:map", "map")
@dataclass(frozen=True, slots=True, kw_only=True)
class MessageAnnotations:
    DESCRIPTOR_CODE: ClassVar[int]
    value: dict[Any, Any]


@composite(
    0x73, "amqp:properties:list",
    "*", "binary", "*", "string", "*", "*", "symbol", "symbol", "timestamp", "timestamp",
    "string", "uint", "string",
)  # fmt: skip
@dataclass(frozen=True, slots=True, kw_only=True)
class Properties:
    DESCRIPTOR_CODE: ClassVar[int]
    message_id: Any = None
    user_id: bytes | None = None
    to: str | None = None
    subject: str | None = None
    reply_to: str | None = None
    correlation_id: Any = None
    content_type: str | None = None
    content_encoding: str | None = None
    absolute_expiry_time: int | None = None
    creation_time: int | None = None
    group_id: str | None = None
    group_sequence: int | None = None
    reply_to_group_id: str | None = None


@restricted(0x74, "amqp:application-properties:map", "map")
@dataclass(frozen=True, slots=True, kw_only=True)
class ApplicationProperties:
    DESCRIPTOR_CODE: ClassVar[int]
    value: dict[Any, Any]


@restricted(0x75, "amqp:data:binary", "binary")
@dataclass(frozen=True, slots=True, kw_only=True)
class Data:
    DESCRIPTOR_CODE: ClassVar[int]
    value: bytes


@restricted(0x76, "amqp:amqp-sequence:list", "list")
@dataclass(frozen=True, slots=True, kw_only=True)
class AmqpSequence:
    DESCRIPTOR_CODE: ClassVar[int]
    value: list[Any]


@restricted(0x77, "amqp:amqp-value:*", "*")
@dataclass(frozen=True, slots=True, kw_only=True)
class AmqpValue:
    DESCRIPTOR_CODE: ClassVar[int]
    value: Any


@restricted(0x78, "amqp:footer:map", "map")
@dataclass(frozen=True, slots=True, kw_only=True)
class Footer:
    DESCRIPTOR_CODE: ClassVar[int]
    value: dict[Any, Any]


# descriptor code -> section class, in the order sections must appear (messaging §3.2)
SECTION_ORDER: Final = (
    Header, DeliveryAnnotations, MessageAnnotations, Properties, ApplicationProperties,
    Data, AmqpSequence, AmqpValue, Footer,
)  # fmt: skip
