"""The hot path's writing side: transfer, flow and disposition frames written without building
performative objects (reading them is fastparse.py's and fastparse_fields.py's).

Owns: the encoded performatives and frame headers of those three, common outcomes precompiled,
the constant part of a link's transfer frames (transfer_middle) so that a transfer frame is a
few concatenations, and which pieces a transfer of the router's own tag is queued as
(queue_transfer_own_tag appends them to the output list it is given).
Must not touch: connection/session/link state (the engine calls these functions).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final

from mypy_extensions import i64

from .encode import encode_value
from .messaging import Accepted, Released

if TYPE_CHECKING:
    from .messaging import DeliveryState

_pack_header: Final = struct.Struct(">IBBH").pack
_pack_I: Final = struct.Struct(">I").pack
_pack_II: Final = struct.Struct(">II").pack


def _uint(value: int) -> bytes:
    if 0 <= value < 256:
        return _SMALL_UINTS[value]
    return b"\x70" + _pack_I(value)


def _list(descriptor: bytes, count: int, body: bytes) -> bytes:
    if len(body) < 255:
        return descriptor + bytes((0xC0, len(body) + 1, count)) + body
    return descriptor + b"\xd0" + _pack_II(len(body) + 4, count) + body


_TRUE_FALSE: Final[tuple[bytes, ...]] = (b"\x42", b"\x41")
# Final: compiled, a plain module constant is a dict lookup on every use.
_TRANSFER_DESCRIPTOR: Final = b"\x00\x53\x14"
_FLOW_DESCRIPTOR: Final = b"\x00\x53\x13"
_DISPOSITION_DESCRIPTOR: Final = b"\x00\x53\x15"
_ACCEPTED: Final = b"\x00\x53\x24\x45"
_RELEASED: Final = b"\x00\x53\x26\x45"
# A uint below 256 as encoded (uint0 for 0, smalluint otherwise): no tuple and bytes per field.
_SMALL_UINTS: Final[tuple[bytes, ...]] = (b"\x43",) + tuple(bytes((0x52, v)) for v in range(1, 256))


def transfer_performative(
    handle: int,
    delivery_id: int,
    tag: bytes,
    message_format: int,
    settled: bool,
    more: bool,
    aborted: bool = False,
    state: DeliveryState | None = None,
    rcv_settle_mode: int | None = None,
) -> bytes:
    """The encoded transfer performative (transport §2.7.5), without frame header or payload."""
    if len(tag) < 256:
        tag_bytes = bytes((0xA0, len(tag))) + tag
    else:
        tag_bytes = b"\xb0" + _pack_I(len(tag)) + tag
    body = (
        _uint(handle) + _uint(delivery_id) + tag_bytes + _uint(message_format)
        + _TRUE_FALSE[settled] + _TRUE_FALSE[more]
    )  # fmt: skip
    count = 6
    if aborted or state is not None or rcv_settle_mode is not None:
        extra = bytearray(b"\x40" if rcv_settle_mode is None else bytes((0x50, rcv_settle_mode)))  # ubyte
        encode_value(extra, state)
        extra += b"\x42" + _TRUE_FALSE[aborted]  # resume, aborted
        body += extra
        count = 10
    return _list(_TRANSFER_DESCRIPTOR, count, body)


# The common transfer frame (handle < 256, tag < 200 bytes, message-format 0, no state):
#   size(4) | doff 2, type 0, channel(2) | descriptor 00 53 14 | list8 size, count 6 |
#   smalluint handle | 0x70 delivery-id(4) | vbin8 tag | uint0 format, settled, more
# The bytes between size and delivery-id depend only on the link and the tag's length, so a
# sender keeps them (transfer_middle) and each transfer is one concatenation of six pieces.
# Indexed by 2 * settled + more. Typed as a variable-length tuple: mypyc keeps a fixed-shape tuple
# constant as a C struct and builds Python tuples from it again on every indexed read.
_TRANSFER_TAILS: Final[tuple[bytes, ...]] = (
    b"\x43\x42\x42", b"\x43\x42\x41",  # settled=False: more False/True
    b"\x43\x41\x42", b"\x43\x41\x41",  # settled=True
)  # fmt: skip


def transfer_middle(channel: int, handle: int, tag_length: int) -> bytes:
    """The bytes after the frame size and before the delivery-id of a common transfer frame on
    this channel and handle with a tag of this length; b"" when such a transfer is not the
    common kind."""
    if handle > 255 or tag_length > 200:
        return b""
    # list8 size counts the count byte: handle(2) + delivery-id(5) + tag(2+n) + tail(3) + 1
    return bytes((2, 0, channel >> 8, channel & 0xFF, 0x00, 0x53, 0x14, 0xC0, 13 + tag_length, 6,
                  0x52, handle, 0x70))  # fmt: skip


def transfer_frame(
    middle: bytes, delivery_id: int, tag: bytes, settled: bool, more: bool, payload_size: int
) -> bytes:
    """Frame header and performative of a common transfer, from its link's `middle`."""
    return transfer_frame_id(middle, delivery_id.to_bytes(4, "big"), tag, settled, more, payload_size)


def transfer_frame_id(
    middle: bytes, id_bytes: bytes, tag: bytes, settled: bool, more: bool, payload_size: int
) -> bytes:
    """transfer_frame with the delivery-id already as its four big-endian bytes (a sender that
    uses them as the delivery's tag too makes them once)."""
    n = len(tag)
    # header(8) + descriptor(3) + list8 head(3) + handle(2) + id(5) + tag(2+n) + tail(3)
    size = 26 + n + payload_size
    tail = _TRANSFER_TAILS[(2 if settled else 0) + (1 if more else 0)]
    if size < _BE32_CACHED:
        return b"%b%b%b%b%b%b" % (_BE32[size], middle, id_bytes, _VBIN8_HEADS[n], tag, tail)
    # A larger frame's size as four one-byte pieces: int.to_bytes costs ~330 instructions
    # (a frame is below 2**32: the peer's max-frame-size bounds it)
    return b"%b%b%b%b%b%b%b%b%b" % (
        BYTES[size >> 24], BYTES[(size >> 16) & 0xFF], BYTES[(size >> 8) & 0xFF], BYTES[size & 0xFF],
        middle, id_bytes, _VBIN8_HEADS[n], tag, tail,
    )


def transfer_frame_own_tag(
    middle: bytes, id_prefix: bytes, id_low: i64, settled: bool, more: bool, payload_size: int
) -> bytes:
    """transfer_frame of a delivery whose tag is its delivery-id's four bytes (the router's
    own deliveries), from the id's top three bytes and its last (0-255): the four bytes are
    never joined into an object of their own (~200 instructions per message), and the bytes
    around the id's last byte come from tables (six pieces joined where there were eight)."""
    size = 30 + payload_size  # (26 + a four-byte tag)
    if size < _BE32_CACHED:
        tail = _OWN_TAG_TAILS[(((2 if settled else 0) + (1 if more else 0)) << 8) + id_low]
        return b"%b%b%b%b%b%b" % (_BE32[size], middle, id_prefix, _OWN_TAG_HEADS[id_low], id_prefix, tail)
    own = id_prefix + BYTES[id_low]  # (one join is nothing beside a payload of 2 KiB or more)
    return transfer_frame_id(middle, own, own, settled, more, payload_size)


def queue_transfer_own_tag(
    out: list[bytes | memoryview], middle: bytes, middle_id: bytes, id_prefix: bytes, id_low: i64,
    settled: bool, more: bool, payload: bytes | memoryview, payload_size: i64,
) -> None:  # fmt: skip
    """transfer_frame_own_tag's frame and its payload appended to `out` (a connection output's
    pieces, joined once per write). A small payload in bytes is formatted into the frame: one
    piece per message, where the payload as a piece of its own cost the output's append, join
    and chunking ~110 instructions, more than copying up to 2 KiB once more. A view (a large
    payload handed on uncopied) stays a piece of its own, after its frame. (The frame's six
    pieces queued apart, no frame object made, cost more than formatting it: the join paid ~55
    instructions a piece.) `middle_id` is `middle` + `id_prefix`, which a sender keeps for its
    next 256 transfers: a piece fewer to format (~55 instructions)."""
    size: i64 = 30 + payload_size
    if size < _BE32_CACHED and type(payload) is bytes:
        row: i64 = 0  # (native ints, no conditional expression: no tagged arithmetic)
        if settled:
            row = 512
        if more:
            row += 256
        tail = _OWN_TAG_TAILS[row + id_low]
        out.append(b"%b%b%b%b%b%b" % (
            _BE32[size], middle_id, _OWN_TAG_HEADS[id_low], id_prefix, tail, payload
        ))  # fmt: skip
        return
    out.append(transfer_frame_own_tag(middle, id_prefix, id_low, settled, more, payload_size))
    out.append(payload)


_VBIN8_HEADS: Final = tuple(bytes((0xA0, n)) for n in range(201))
# Frame sizes of small transfers as their four header bytes, made once: int.to_bytes per frame
# boxed the int, converted it and allocated the bytes (~250 instructions). 2 KiB of sizes
# (about 70 KiB of bytes objects) covers every frame of a message up to about 1.9 KiB.
_BE32_CACHED: Final = 2048
_BE32: Final[tuple[bytes, ...]] = tuple(n.to_bytes(4, "big") for n in range(_BE32_CACHED))
BYTES: Final[tuple[bytes, ...]] = tuple(bytes((n,)) for n in range(256))  # each byte value as bytes
# An own-tagged transfer's bytes around its delivery-id's last byte: that byte and the tag's
# vbin8 head (the id ends where the tag starts), and that byte again with the fields after the
# tag, for each (settled, more). 1,280 small bytes objects, ~50 KiB.
_OWN_TAG_HEADS: Final[tuple[bytes, ...]] = tuple(bytes((n, 0xA0, 4)) for n in range(256))
_OWN_TAG_TAILS: Final[tuple[bytes, ...]] = tuple(bytes((n,)) + tail for tail in _TRANSFER_TAILS for n in range(256))


def frame_header(size: int, channel: int) -> bytes:
    return _pack_header(size, 2, 0, channel)


def flow_performative(
    next_incoming_id: int | None,
    incoming_window: int,
    next_outgoing_id: int,
    outgoing_window: int,
    handle: int | None = None,
    delivery_count: int | None = None,
    link_credit: int | None = None,
    available: int | None = None,
    drain: bool = False,
    echo: bool = False,
) -> bytes:
    """The encoded flow performative (transport §2.7.4)."""
    body = (
        (b"\x40" if next_incoming_id is None else _uint(next_incoming_id))
        + _uint(incoming_window) + _uint(next_outgoing_id) + _uint(outgoing_window)
    )  # fmt: skip
    count = 4
    if handle is not None:
        body += (
            _uint(handle)
            + (b"\x40" if delivery_count is None else _uint(delivery_count))
            + (b"\x40" if link_credit is None else _uint(link_credit))
            + (b"\x40" if available is None else _uint(available))
            + _TRUE_FALSE[drain] + _TRUE_FALSE[echo]
        )  # fmt: skip
        count = 10
    elif echo:
        body += b"\x40\x40\x40\x40\x42\x41"
        count = 10
    return _list(_FLOW_DESCRIPTOR, count, body)


_COMMON_STATES: Final[tuple[bytes, ...]] = (b"\x40", _ACCEPTED, _RELEASED)  # by _state_row


def _common_state(state: DeliveryState | None) -> bytes:
    """A disposition's state precompiled (none, accepted, released), or b"" for any other."""
    row = _state_row(state)
    return b"" if row < 0 else _COMMON_STATES[row]


# The outcome classes as module constants: compiled, they are C statics, where the imported names
# were looked up in the module's dict on every frame.
_ACCEPTED_CLASS: Final = Accepted
_RELEASED_CLASS: Final = Released


def _state_row(state: DeliveryState | None) -> i64:
    """The precompiled states as 0 (none), 1 (accepted), 2 (released); -1 for any other."""
    if state is None:
        return 0
    kind = type(state)
    if kind is _ACCEPTED_CLASS:
        return 1
    if kind is _RELEASED_CLASS:
        return 2
    return -1


# The common disposition frame (transport §2.7.6): accepted, released or no state, on a channel
# below 256, ids below 2**32: everything but the ids and the list's size comes from tables.
#   size(4) | doff 2, type 0, channel(2) | descriptor 00 53 15 | list8 size, count 5 |
#   role | first | last or null | settled | state
# A disposition of one delivery (most of a lone message's) is five pieces: size, channel, the
# list's head to the role (with first's uint constructor when it takes four bytes), first, and
# what follows it; a range has last before that.
_CHANNEL_HEADS: Final[tuple[bytes, ...]] = tuple(bytes((2, 0, 0, ch)) for ch in range(256))
# Indexed by 64 for role true + 32 for a four-byte first + the list8 size byte (1 + the body's
# length; a body is at most 1 + 5 + 5 + 1 + 4).
_DISPOSITION_HEADS: Final[tuple[bytes, ...]] = tuple(
    b"\x00\x53\x15\xc0" + bytes((n, 5)) + role + wide
    for role in _TRUE_FALSE for wide in (b"", b"\x70") for n in range(32)
)  # fmt: skip
# settled and the state, indexed by _state_row + 3 when settled; _DISPOSITION_ONE_TAILS with a
# null last before them.
_DISPOSITION_TAILS: Final[tuple[bytes, ...]] = tuple(
    flag + state for flag in _TRUE_FALSE for state in _COMMON_STATES
)  # fmt: skip
_DISPOSITION_ONE_TAILS: Final[tuple[bytes, ...]] = tuple(b"\x40" + tail for tail in _DISPOSITION_TAILS)


def disposition_frame(
    channel: int, role: bool, first: int, last: int | None, settled: bool, state: DeliveryState | None,
    first_prefix: bytes = b"",
) -> bytes:  # fmt: skip
    """Frame header and performative of a common disposition (see above) in one formatting, or
    b"" when it is not the common kind (disposition_performative and frame_header then).
    `first_prefix`: the top three of first's four bytes when the caller keeps them (a session
    does for the peer's ids, Session.in_id_prefix: made once per 256 ids), else b"" (made here)."""
    row = _state_row(state)
    if row < 0 or channel > 255 or first > 0xFFFFFFFF:
        return b""
    # (ifs, not conditional expressions: mixing i64 and int literals boxes, compiled)
    if settled:
        row += 3
    head: i64 = 0
    if role:
        head = 64
    body_size: i64 = 1  # the role
    if first < 256:
        first_bytes = _SMALL_UINTS[first]
    else:  # (its constructor, 0x70, ends the head: no concatenation per frame)
        if len(first_prefix) == 0:
            first_prefix = (first >> 8).to_bytes(3, "big")
        first_bytes = first_prefix + BYTES[first & 0xFF]
        head += 32
        body_size += 1
    body_size += len(first_bytes)
    if last is None or last == first:
        tail = _DISPOSITION_ONE_TAILS[row]
        body_size += len(tail)
        return b"%b%b%b%b%b" % (
            _BE32[14 + body_size], _CHANNEL_HEADS[channel], _DISPOSITION_HEADS[head + body_size + 1], first_bytes, tail,
        )  # fmt: skip
    if last > 0xFFFFFFFF:
        return b""
    last_bytes = _uint(last)
    tail = _DISPOSITION_TAILS[row]
    body_size += len(last_bytes) + len(tail)
    return b"%b%b%b%b%b%b" % (
        _BE32[14 + body_size], _CHANNEL_HEADS[channel], _DISPOSITION_HEADS[head + body_size + 1],
        first_bytes, last_bytes, tail,
    )  # fmt: skip


def disposition_performative(
    role: bool, first: int, last: int | None, settled: bool, state: DeliveryState | None
) -> bytes:
    """The encoded disposition performative (transport §2.7.6); common outcomes precompiled."""
    state_bytes = _common_state(state)
    if len(state_bytes) == 0:
        out = bytearray()
        encode_value(out, state)
        state_bytes = bytes(out)
    body = (
        _TRUE_FALSE[role] + _uint(first)
        + (b"\x40" if last is None or last == first else _uint(last))
        + _TRUE_FALSE[settled] + state_bytes
    )  # fmt: skip
    return _list(_DISPOSITION_DESCRIPTOR, 5, body)
