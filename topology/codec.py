"""Control-message bodies: the AMQP map each message of messages.py travels in, both ways.

Owns: `to_map`/`encode_body` and `from_map`/`decode_body` (string keys, as the anchors' bodies:
reference §3.2), the validation of untrusted bodies and `MalformedMessage`. Must not touch: the
messages themselves (messages.py), protocol state (node.py), route computation, the AMQP message
around the body (the network layer puts the encoded map in an amqp-value section and may copy
`op` to an application property `opcode` for tools built for the anchors) or any I/O.

Decoding never trusts its input: a body that is not a map, or a field of the wrong type or range,
raises MalformedMessage (`amqp:decode-error`). A body with a newer protocol version or an opcode we
do not know is not an error: it decodes to `Unsupported`, which the receiver counts and ignores
(the anchors' `isCompatibleVersion`: reference §3.2). Unknown keys are ignored, so version 1 can
grow optional fields. Every field is described in docs/mesh-protocol.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from router.amqp.decode import decode
from router.amqp.encode import encode
from router.amqp.errors import DecodeError
from router.amqp.types import Array

from .graph import COST_MAX, LinkState
from .messages import DIGEST_SIZE, PROTOCOL_VERSION, ControlMessage, Hello, LinkStateRequest, LinkStateUpdate
from .messages import MobileAddressRequest, MobileAddressUpdate, RouterAdvert, Unsupported

SEQ_MAX: Final = 2**63 - 1  # seqs, instances and intervals are non-negative AMQP longs
ID_MAX_LENGTH: Final = 255


class MalformedMessage(DecodeError):
    """A control-message body that breaks this module's schema (condition amqp:decode-error)."""


# --- body -> fields ----------------------------------------------------------------------------


def _get(body: Mapping[str, Any], key: str) -> Any:
    if key not in body:
        raise MalformedMessage(f"missing field {key!r}")
    return body[key]


def _id(value: Any, what: str) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= ID_MAX_LENGTH:
        raise MalformedMessage(f"{what} must be a string of 1..{ID_MAX_LENGTH} characters: {value!r}")
    return str(value)


def _count(value: Any, what: str, low: int = 0, high: int = SEQ_MAX) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise MalformedMessage(f"{what} must be an integer in [{low}, {high}]: {value!r}")
    return int(value)


def _strings(value: Any, what: str) -> tuple[str, ...]:
    items = value.elements if isinstance(value, Array) else value
    if not isinstance(items, (list, tuple)):
        raise MalformedMessage(f"{what} must be a list of strings, got {type(value).__name__}")
    out = []
    for item in items:
        if not isinstance(item, str) or not item:
            raise MalformedMessage(f"{what} must hold non-empty strings: {item!r}")
        out.append(str(item))
    if len(set(out)) != len(out):
        raise MalformedMessage(f"{what} repeats an entry")
    return tuple(out)


def _digest(value: Any) -> bytes:
    if not isinstance(value, (bytes, bytearray)) or len(value) != DIGEST_SIZE:
        raise MalformedMessage(f"digest must be {DIGEST_SIZE} bytes of binary: {value!r}")
    return bytes(value)


def _peers(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        raise MalformedMessage(f"peers must be a map, got {type(value).__name__}")
    return {_id(k, "peer id"): _count(c, f"cost of {k!r}", 1, COST_MAX) for k, c in value.items()}


def _hello(b: Mapping[str, Any], rid: str, inst: int) -> Hello:
    ms = _count(_get(b, "hello_ms"), "hello_ms", 1, 2**31 - 1)
    return Hello(router_id=rid, instance=inst, seen=_strings(_get(b, "seen"), "seen"), hello_interval_ms=ms)


def _ra(b: Mapping[str, Any], rid: str, inst: int) -> RouterAdvert:
    return RouterAdvert(
        router_id=rid, instance=inst, ra_seq=_count(_get(b, "ra_seq"), "ra_seq"),
        ls_seq=_count(_get(b, "ls_seq"), "ls_seq"), mobile_seq=_count(_get(b, "mobile_seq"), "mobile_seq"),
        digest=_digest(_get(b, "digest")),
    )  # fmt: skip


def _lsr(b: Mapping[str, Any], rid: str, inst: int) -> LinkStateRequest:
    return LinkStateRequest(
        router_id=rid, instance=inst, target=_id(_get(b, "target"), "target"),
        target_instance=_count(_get(b, "target_instance"), "target_instance"),
        ls_seq=_count(_get(b, "ls_seq"), "ls_seq"),
    )  # fmt: skip


def _lsu(b: Mapping[str, Any], rid: str, inst: int) -> LinkStateUpdate:
    link_state = LinkState(seq=_count(_get(b, "ls_seq"), "ls_seq"), peers=_peers(_get(b, "peers")))
    return LinkStateUpdate(
        router_id=rid, instance=inst, link_state=link_state,
        mobile_seq=_count(_get(b, "mobile_seq"), "mobile_seq"), digest=_digest(_get(b, "digest")),
    )  # fmt: skip


def _mar(b: Mapping[str, Any], rid: str, inst: int) -> MobileAddressRequest:
    return MobileAddressRequest(
        router_id=rid, instance=inst, target=_id(_get(b, "target"), "target"),
        target_instance=_count(_get(b, "target_instance"), "target_instance"),
        mobile_seq=_count(_get(b, "mobile_seq"), "mobile_seq"), have_seq=_count(_get(b, "have_seq"), "have_seq"),
    )  # fmt: skip


def _mau(b: Mapping[str, Any], rid: str, inst: int) -> MobileAddressUpdate:
    seq, digest = _count(_get(b, "mobile_seq"), "mobile_seq"), _digest(_get(b, "digest"))
    if "exist" in b:
        if "add" in b or "del" in b:
            raise MalformedMessage("a MAU is either full (exist) or differential (add/del), not both")
        exist = _strings(b["exist"], "exist")
        return MobileAddressUpdate(router_id=rid, instance=inst, mobile_seq=seq, digest=digest, exist=exist)
    added, removed = _strings(_get(b, "add"), "add"), _strings(_get(b, "del"), "del")
    if set(added) & set(removed):
        raise MalformedMessage("a differential MAU adds and removes the same address")
    if seq < 1:
        raise MalformedMessage("a differential MAU has mobile_seq >= 1 (it goes from N-1 to N)")
    return MobileAddressUpdate(
        router_id=rid, instance=inst, mobile_seq=seq, digest=digest, added=added, removed=removed
    )


# The decode registry: built from an explicit list (architecture rule 2).
_DECODERS: Final[dict[str, Callable[[Mapping[str, Any], str, int], ControlMessage]]] = {
    Hello.OPCODE: _hello, RouterAdvert.OPCODE: _ra, LinkStateRequest.OPCODE: _lsr,
    LinkStateUpdate.OPCODE: _lsu, MobileAddressRequest.OPCODE: _mar, MobileAddressUpdate.OPCODE: _mau,
}  # fmt: skip


def from_map(body: Any) -> ControlMessage | Unsupported:
    """The message a decoded body map carries; Unsupported for newer versions/unknown opcodes."""
    if not isinstance(body, dict):
        raise MalformedMessage(f"a control message body is a map, got {type(body).__name__}")
    op = _get(body, "op")
    if not isinstance(op, str):
        raise MalformedMessage(f"op must be a string: {op!r}")
    version = _count(_get(body, "pv"), "pv", 1)
    rid = body.get("id")
    if version > PROTOCOL_VERSION or op not in _DECODERS:
        reason = "newer protocol version" if version > PROTOCOL_VERSION else "unknown opcode"
        return Unsupported(opcode=op, version=version, router_id=rid if isinstance(rid, str) else None, reason=reason)
    router_id = _id(_get(body, "id"), "id")
    return _DECODERS[op](body, router_id, _count(_get(body, "instance"), "instance"))


def decode_body(data: bytes) -> ControlMessage | Unsupported:
    """Decode an encoded body map (the bytes of the amqp-value) into a message."""
    try:
        body = decode(data)
    except MalformedMessage:
        raise
    except DecodeError as exc:
        raise MalformedMessage(f"control message body: {exc.description}") from exc
    return from_map(body)


# --- fields -> body ----------------------------------------------------------------------------


def to_map(message: ControlMessage) -> dict[str, Any]:
    """The body map of `message` (deterministic key order; lists of ids are kept as given)."""
    body: dict[str, Any] = {
        "op": message.OPCODE, "pv": message.version, "id": message.router_id, "instance": message.instance,
    }  # fmt: skip
    match message:
        case Hello():
            body.update(seen=list(message.seen), hello_ms=message.hello_interval_ms)
        case RouterAdvert():
            body.update(ra_seq=message.ra_seq, ls_seq=message.ls_seq, mobile_seq=message.mobile_seq)
            body.update(digest=message.digest)
        case LinkStateRequest():
            body.update(target=message.target, target_instance=message.target_instance, ls_seq=message.ls_seq)
        case LinkStateUpdate():
            body.update(ls_seq=message.link_state.seq, peers=dict(message.link_state.peers))
            body.update(mobile_seq=message.mobile_seq, digest=message.digest)
        case MobileAddressRequest():
            body.update(target=message.target, target_instance=message.target_instance)
            body.update(mobile_seq=message.mobile_seq, have_seq=message.have_seq)
        case MobileAddressUpdate():
            body.update(mobile_seq=message.mobile_seq, digest=message.digest)
            if message.exist is not None:
                body.update(exist=list(message.exist))
            else:
                body.update({"add": list(message.added), "del": list(message.removed)})
    return body


def encode_body(message: ControlMessage) -> bytes:
    """The AMQP encoding of `message`'s body map."""
    return encode(to_map(message))
