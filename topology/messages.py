"""Control messages of the inter-router protocol.

Owns: one frozen, slotted, keyword-only dataclass per message (HELLO, RA, LSR, LSU, MAR, MAU), each
carrying its opcode, the protocol version, the router id and instance it speaks for; `Unsupported`,
what a body we must ignore decodes to; the protocol version and the digest size. Must not touch:
the body each message travels in and the validation of untrusted bodies (codec.py), protocol state
(node.py), route computation or any I/O. Every field is described in docs/mesh-protocol.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final

from .graph import LinkState

PROTOCOL_VERSION: Final = 1
DIGEST_SIZE: Final = 16  # bytes of the address-set digest (mobile.py)


@dataclass(frozen=True, slots=True, kw_only=True)
class Hello:
    """HELLO, one hop, every hello interval: the ids of the neighbours I hear. A neighbour is
    two-way once its HELLO lists me (reference §3.2)."""

    OPCODE: ClassVar[str] = "HELLO"
    router_id: str
    instance: int
    seen: tuple[str, ...] = ()
    hello_interval_ms: int = 1000  # the sender's interval: receivers scale its dead time from it
    version: int = PROTOCOL_VERSION


@dataclass(frozen=True, slots=True, kw_only=True)
class RouterAdvert:
    """RA, flooded: the sequence numbers of my link state and mobile addresses, and the digest of
    my address set (anti-entropy). `ra_seq` grows with every RA so floods can be de-duplicated."""

    OPCODE: ClassVar[str] = "RA"
    router_id: str
    instance: int
    ra_seq: int
    ls_seq: int
    mobile_seq: int
    digest: bytes
    version: int = PROTOCOL_VERSION


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkStateRequest:
    """LSR, hop by hop towards `target`: send me its link state at (target_instance, ls_seq) or
    newer. Any router holding such a copy may answer; `router_id` is the requester."""

    OPCODE: ClassVar[str] = "LSR"
    router_id: str
    instance: int
    target: str
    target_instance: int
    ls_seq: int
    version: int = PROTOCOL_VERSION


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkStateUpdate:
    """LSU, the answer to an LSR, sent back along the request's path: the link state of
    `router_id` (the owner, whoever relays it), with the owner's mobile seq and digest so that a
    router that learns of the owner this way can fetch its addresses without waiting for an RA."""

    OPCODE: ClassVar[str] = "LSU"
    router_id: str
    instance: int
    link_state: LinkState
    mobile_seq: int
    digest: bytes
    version: int = PROTOCOL_VERSION


@dataclass(frozen=True, slots=True, kw_only=True)
class MobileAddressRequest:
    """MAR, hop by hop towards `target`: send me its whole address set at (target_instance,
    mobile_seq) or newer; I hold `have_seq`. A router holding a verified copy may answer."""

    OPCODE: ClassVar[str] = "MAR"
    router_id: str
    instance: int
    target: str
    target_instance: int
    mobile_seq: int
    have_seq: int
    version: int = PROTOCOL_VERSION


@dataclass(frozen=True, slots=True, kw_only=True)
class MobileAddressUpdate:
    """MAU of `router_id`'s addresses at `mobile_seq`, with the digest of the set at that seq.
    Differential (`exist` is None): flooded, `added`/`removed` take seq N-1 to N. Full (`exist` is
    the whole set): the answer to a MAR, sent back along the request's path."""

    OPCODE: ClassVar[str] = "MAU"
    router_id: str
    instance: int
    mobile_seq: int
    digest: bytes
    exist: tuple[str, ...] | None = None
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    version: int = PROTOCOL_VERSION

    @property
    def is_full(self) -> bool:
        return self.exist is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class Unsupported:
    """A body we do not understand and must ignore: a newer version or an unknown opcode."""

    opcode: str
    version: int
    router_id: str | None
    reason: str


ControlMessage = (
    Hello | RouterAdvert | LinkStateRequest | LinkStateUpdate | MobileAddressRequest | MobileAddressUpdate
)
