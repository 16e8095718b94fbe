"""The AMQP frame bodies: transport performatives (transport §2.7), error, and SASL frames
(security §5.3.3) as frozen, slotted, keyword-only dataclasses with their descriptors.

Owns: field names, kinds and defaults exactly as the spec declares them (a field of a described
type names it, e.g. attach's "source", so decoding checks it: see composite.py).
Must not touch: what the engine does with them (connection.py, session.py, link.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Final

from .composite import composite

SENDER: Final = False  # role, transport §2.8.1
RECEIVER: Final = True

SND_UNSETTLED: Final = 0  # sender-settle-mode, transport §2.8.2
SND_SETTLED: Final = 1
SND_MIXED: Final = 2
RCV_FIRST: Final = 0  # receiver-settle-mode, transport §2.8.3
RCV_SECOND: Final = 1
SND_MODES: Final = (SND_UNSETTLED, SND_SETTLED, SND_MIXED)  # the modes that exist
RCV_MODES: Final = (RCV_FIRST, RCV_SECOND)

Symbols = tuple[str, ...]
Fields = dict[Any, Any]



@composite(0x1D, "amqp:error:list", "symbol!", "string", "fields")
@dataclass(frozen=True, slots=True, kw_only=True)
class Error:
    """transport §2.8.14"""

    DESCRIPTOR_CODE: ClassVar[int]
    condition: str
    description: str | None = None
    info: Fields | None = None


@composite(
    0x10, "amqp:open:list",
    "string!", "string", "uint", "ushort", "uint", "symbol*", "symbol*", "symbol*", "symbol*",
    "fields",
)  # fmt: skip
@dataclass(frozen=True, slots=True, kw_only=True)
class Open:
    """transport §2.7.1"""

    DESCRIPTOR_CODE: ClassVar[int]
    container_id: str
    hostname: str | None = None
    max_frame_size: int = 0xFFFFFFFF
    channel_max: int = 0xFFFF
    idle_time_out: int | None = None
    outgoing_locales: Symbols | None = None
    incoming_locales: Symbols | None = None
    offered_capabilities: Symbols | None = None
    desired_capabilities: Symbols | None = None
    properties: Fields | None = None


@composite(
    0x11, "amqp:begin:list",
    "ushort", "uint!", "uint!", "uint!", "uint", "symbol*", "symbol*", "fields",
)  # fmt: skip
@dataclass(frozen=True, slots=True, kw_only=True)
class Begin:
    """transport §2.7.2"""

    DESCRIPTOR_CODE: ClassVar[int]
    remote_channel: int | None = None
    next_outgoing_id: int
    incoming_window: int
    outgoing_window: int
    handle_max: int = 0xFFFFFFFF
    offered_capabilities: Symbols | None = None
    desired_capabilities: Symbols | None = None
    properties: Fields | None = None


@composite(
    0x12, "amqp:attach:list",
    "string!", "uint!", "boolean!", "ubyte", "ubyte", "source", "target", "unsettled", "boolean", "uint",
    "ulong", "symbol*", "symbol*", "fields",
)  # fmt: skip
@dataclass(frozen=True, slots=True, kw_only=True)
class Attach:
    """transport §2.7.3"""

    DESCRIPTOR_CODE: ClassVar[int]
    name: str
    handle: int
    role: bool
    snd_settle_mode: int = SND_MIXED
    rcv_settle_mode: int = RCV_FIRST
    source: Any = None
    target: Any = None
    unsettled: dict[Any, Any] | None = None
    incomplete_unsettled: bool = False
    initial_delivery_count: int | None = None
    max_message_size: int | None = None
    offered_capabilities: Symbols | None = None
    desired_capabilities: Symbols | None = None
    properties: Fields | None = None


@composite(
    0x13, "amqp:flow:list",
    "uint", "uint!", "uint!", "uint!", "uint", "uint", "uint", "uint", "boolean", "boolean",
    "fields",
)  # fmt: skip
@dataclass(frozen=True, slots=True, kw_only=True)
class Flow:
    """transport §2.7.4"""

    DESCRIPTOR_CODE: ClassVar[int]
    next_incoming_id: int | None = None
    incoming_window: int
    next_outgoing_id: int
    outgoing_window: int
    handle: int | None = None
    delivery_count: int | None = None
    link_credit: int | None = None
    available: int | None = None
    drain: bool = False
    echo: bool = False
    properties: Fields | None = None


@composite(
    0x14, "amqp:transfer:list",
    "uint!", "uint", "binary", "uint", "boolean", "boolean", "ubyte", "delivery-state", "boolean", "boolean",
    "boolean",
)  # fmt: skip
@dataclass(frozen=True, slots=True, kw_only=True)
class Transfer:
    """transport §2.7.5 (the engine's hot path uses fastparse.py and fastpath.py instead of this class)."""

    DESCRIPTOR_CODE: ClassVar[int]
    handle: int
    delivery_id: int | None = None
    delivery_tag: bytes | None = None
    message_format: int | None = None
    settled: bool | None = None
    more: bool = False
    rcv_settle_mode: int | None = None
    state: Any = None
    resume: bool = False
    aborted: bool = False
    batchable: bool = False


@composite(
    0x15, "amqp:disposition:list", "boolean!", "uint!", "uint", "boolean", "delivery-state", "boolean",
)
@dataclass(frozen=True, slots=True, kw_only=True)
class Disposition:
    """transport §2.7.6"""

    DESCRIPTOR_CODE: ClassVar[int]
    role: bool
    first: int
    last: int | None = None
    settled: bool = False
    state: Any = None
    batchable: bool = False


@composite(0x16, "amqp:detach:list", "uint!", "boolean", "error")
@dataclass(frozen=True, slots=True, kw_only=True)
class Detach:
    """transport §2.7.7"""

    DESCRIPTOR_CODE: ClassVar[int]
    handle: int
    closed: bool = False
    error: Error | None = None


@composite(0x17, "amqp:end:list", "error")
@dataclass(frozen=True, slots=True, kw_only=True)
class End:
    """transport §2.7.8"""

    DESCRIPTOR_CODE: ClassVar[int]
    error: Error | None = None


@composite(0x18, "amqp:close:list", "error")
@dataclass(frozen=True, slots=True, kw_only=True)
class Close:
    """transport §2.7.9"""

    DESCRIPTOR_CODE: ClassVar[int]
    error: Error | None = None


# --- SASL frames, security §5.3.3 ---------------------------------------------------------------

SASL_OK: Final = 0  # sasl-code, security §5.3.3.6
SASL_AUTH: Final = 1
SASL_SYS: Final = 2
SASL_SYS_PERM: Final = 3
SASL_SYS_TEMP: Final = 4


@composite(0x40, "amqp:sasl-mechanisms:list", "symbol*!")
@dataclass(frozen=True, slots=True, kw_only=True)
class SaslMechanisms:
    DESCRIPTOR_CODE: ClassVar[int]
    sasl_server_mechanisms: Symbols


@composite(0x41, "amqp:sasl-init:list", "symbol!", "binary", "string")
@dataclass(frozen=True, slots=True, kw_only=True)
class SaslInit:
    DESCRIPTOR_CODE: ClassVar[int]
    mechanism: str
    initial_response: bytes | None = None
    hostname: str | None = None


@composite(0x42, "amqp:sasl-challenge:list", "binary!")
@dataclass(frozen=True, slots=True, kw_only=True)
class SaslChallenge:
    DESCRIPTOR_CODE: ClassVar[int]
    challenge: bytes


@composite(0x43, "amqp:sasl-response:list", "binary!")
@dataclass(frozen=True, slots=True, kw_only=True)
class SaslResponse:
    DESCRIPTOR_CODE: ClassVar[int]
    response: bytes


@composite(0x44, "amqp:sasl-outcome:list", "ubyte!", "binary")
@dataclass(frozen=True, slots=True, kw_only=True)
class SaslOutcome:
    DESCRIPTOR_CODE: ClassVar[int]
    code: int
    additional_data: bytes | None = None


AMQP_PERFORMATIVES: Final = (Open, Begin, Attach, Flow, Transfer, Disposition, Detach, End, Close)
SASL_PERFORMATIVES: Final = (SaslMechanisms, SaslInit, SaslChallenge, SaslResponse, SaslOutcome)
Performative = Open | Begin | Attach | Flow | Transfer | Disposition | Detach | End | Close
SaslFrame = SaslMechanisms | SaslInit | SaslChallenge | SaslResponse | SaslOutcome


# The described types these frames name (source, target, delivery-state ...) are defined in
# messaging.py, which imports Error from here: import it last so that decoding a performative
# always knows them, whichever module was imported first.
from . import messaging as _messaging  # noqa: E402,F401
