"""The control messages between an edge router and its interiors (docs/mesh.md, "Edge routers").

Owns: encoding and checking them. Each is an AMQP message with application property `opcode`
and an amqp-value map body carrying `op` (the same opcode) and `pv` (its version; a newer one is
ignored, as the topology messages are):

- EDGE-ADDRESSES (edge -> its active uplink): `{id, seq, addresses}`, the mobile addresses with
  consumers on the edge, the whole set.
- MESH-ADDRESSES (interior -> each edge connected to it): `{id, seq, full, add, remove}`, the
  mobile addresses that have a destination in the mesh other than that edge (consumers on any
  router or on another edge, in-process endpoints). `full`: `add` is the whole set (on connect
  and on request); otherwise a change against the previous message (`seq` one higher).
- MESH-ADDRESSES-REQUEST (edge -> interior): `{id}`, send the whole set again (the edge missed
  a change: a control message dropped from a full queue).

Must not touch: what the routers do with them (edge.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from ..amqp.errors import DecodeError
from ..amqp.message import Message, decode_message, encode_message

EDGE_ADDRESSES: Final = "EDGE-ADDRESSES"
MESH_ADDRESSES: Final = "MESH-ADDRESSES"
MESH_REQUEST: Final = "MESH-ADDRESSES-REQUEST"
VERSION: Final = 1
MAX_ADDRESSES: Final = 1_000_000


def _encode(op: str, **fields: Any) -> bytes:
    body = {"op": op, "pv": VERSION, **fields}
    return encode_message(Message.value(body, application_properties={"opcode": op}))


def encode_addresses(edge_id: str, seq: int, addresses: list[str]) -> bytes:
    return _encode(EDGE_ADDRESSES, id=edge_id, seq=seq, addresses=addresses)


def encode_mesh_addresses(interior_id: str, seq: int, full: bool, add: list[str], remove: list[str]) -> bytes:
    return _encode(MESH_ADDRESSES, id=interior_id, seq=seq, full=full, add=add, remove=remove)


def encode_request(edge_id: str) -> bytes:
    return _encode(MESH_REQUEST, id=edge_id)


@dataclass(frozen=True, slots=True)
class MeshAddresses:
    seq: int
    full: bool
    add: list[str]
    remove: list[str]


def decode(payload: bytes) -> tuple[str, Any] | None:
    """(op, what it says) for a well-formed message of a version we speak: EDGE-ADDRESSES ->
    the address list, MESH-ADDRESSES -> MeshAddresses, MESH-ADDRESSES-REQUEST -> None.
    ("", None) for a newer version (ignored); None when malformed."""
    try:
        body = decode_message(payload).body_value
    except (DecodeError, TypeError):
        return None
    if not isinstance(body, dict):
        return None
    op, version = body.get("op"), body.get("pv")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        return None
    if version > VERSION:
        return "", None
    if op == EDGE_ADDRESSES:
        addresses = _addresses(body.get("addresses"))
        return None if addresses is None else (op, addresses)
    if op == MESH_ADDRESSES:
        seq, full = body.get("seq"), body.get("full")
        add, remove = _addresses(body.get("add")), _addresses(body.get("remove"))
        if isinstance(seq, bool) or not isinstance(seq, int) or not isinstance(full, bool) or add is None or remove is None:
            return None
        return op, MeshAddresses(seq, full, add, remove)
    if op == MESH_REQUEST:
        return op, None
    return None


def decode_addresses(payload: bytes) -> list[str] | None:
    """The address set of an EDGE-ADDRESSES message; None for another (or newer) message."""
    decoded = decode(payload)
    if decoded is None or decoded[0] != EDGE_ADDRESSES:
        return None
    addresses: list[str] = decoded[1]
    return addresses


def _addresses(value: Any) -> list[str] | None:
    if not isinstance(value, list) or len(value) > MAX_ADDRESSES:
        return None
    if not all(isinstance(a, str) and a for a in value):
        return None
    return [str(a) for a in value]
