"""The hot path's reading side: the fields of transfer, flow and disposition performatives
straight from the receive buffer (writing them is fastpath.py's).

Owns: reading those three performatives' fields with inline branches for the encodings peers
use (scalars inline, anything unusual handed to the general decoder, which validates every field
and names what is wrong). The message payload of a transfer is never decoded: it is the slice
after the performative. Measured on a minimal relay: a generic recursive decoder here cost 3x in
forwarding rate, so keep this path free of per-field objects and calls where an inline branch
will do.
Must not touch: connection/session/link state (the engine calls these functions).
"""

from __future__ import annotations

from typing import Any, Final

from mypy_extensions import i64

from .decode import decode_at
from .errors import DecodeError
from .messaging import ACCEPTED, RELEASED, Modified, Rejected
from .performatives import Disposition, Flow, Transfer

DESCRIPTOR_TRANSFER: Final = 0x14
DESCRIPTOR_FLOW: Final = 0x13
DESCRIPTOR_DISPOSITION: Final = 0x15


# Outcomes whose fields are all absent, as peers send them (messaging §3.4): described list0.
_EMPTY_OUTCOMES: Final[dict[int, Any]] = {
    0x24: ACCEPTED,
    0x25: Rejected(),
    0x26: RELEASED,
    0x27: Modified(),
}


# The only described values read_fields gives (other states take the general decoder).
_OUTCOME_TYPES: Final = frozenset(type(state) for state in _EMPTY_OUTCOMES.values())


def u32(buf: bytes, pos: i64) -> i64:
    """The big-endian uint32 at `pos`. Byte reads of a `bytes` compile to plain loads (mypyc),
    where struct.unpack_from costs a call and a tuple per field."""
    b0: i64 = buf[pos]
    b1: i64 = buf[pos + 1]
    b2: i64 = buf[pos + 2]
    b3: i64 = buf[pos + 3]
    return (b0 << 24) | (b1 << 16) | (b2 << 8) | b3


def read_fields(buf: bytes, pos: int, end: int) -> tuple[list[Any], int] | None:
    """The fields of the list at `pos` (a performative's body) and the offset after the list.

    Only null, uint, boolean and binary8 fields are read here, which is every field of a
    typical transfer, flow or disposition. None means some field has another encoding: the
    caller then decodes the performative with the general, validating decoder.
    Raises DecodeError on any inconsistency.
    """
    try:
        code = buf[pos]
        if code == 0xC0:
            size, count = buf[pos + 1], buf[pos + 2]
            stop, pos = pos + 2 + size, pos + 3
        elif code == 0xD0:
            count, stop, pos = u32(buf, pos + 5), pos + 5 + u32(buf, pos + 1), pos + 9
        elif code == 0x45:
            return [], pos + 1
        else:
            raise DecodeError(f"performative body must be a list, got constructor {code:#04x}")
        if stop > end:
            raise DecodeError("performative list overruns its frame")
        fields: list[Any] = []
        append = fields.append
        for _ in range(count):
            code = buf[pos]
            if code == 0x40:
                append(None)
                pos += 1
            elif code == 0x52:
                append(buf[pos + 1])
                pos += 2
            elif code == 0x43:
                append(0)
                pos += 1
            elif code == 0x70:
                append(u32(buf, pos + 1))
                pos += 5
            elif code == 0x41:
                append(True)
                pos += 1
            elif code == 0x42:
                append(False)
                pos += 1
            elif code == 0xA0:
                n = buf[pos + 1]
                append(buf[pos + 2 : pos + 2 + n])
                pos += 2 + n
            elif code == 0x00 and buf[pos + 1] == 0x53 and buf[pos + 3] == 0x45:
                state = _EMPTY_OUTCOMES.get(buf[pos + 2])
                if state is None:
                    return None
                append(state)
                pos += 4
            else:
                return None
        if pos != stop:
            raise DecodeError("performative list size disagrees with its fields")
        return fields, stop
    except IndexError:
        raise DecodeError("truncated performative") from None


def _general(buf: bytes, pos: int, end: int, cls: type) -> Any:
    value, stop = decode_at(buf, pos - 3, end)
    if type(value) is not cls:
        raise DecodeError(f"expected a {cls.__name__} performative")
    return value, stop


# The delivery-id is -1 when absent (an Optional int would box every delivery-id parsed). The
# tag: the fast parser gives where it starts in the frame's buffer (`tag_at`; its vbin8 length
# byte is the one before) and None for the bytes, so that a tag nobody reads (the router's
# anycast path never does) is never sliced; the general decoder gives the bytes, tag_at -1.
# Both None and -1: the transfer has no tag.
TransferFields = tuple[int, int, "bytes | None", i64, int, "bool | None", bool, "int | None", Any, bool, bool, int]


def tag_in(buf: bytes, tag_at: i64) -> bytes:
    """The vbin8 delivery-tag whose bytes start at `tag_at` in `buf` (its length the byte before),
    where parse_transfer found it."""
    return buf[tag_at : tag_at + buf[tag_at - 1]]


def transfer_tag(buf: bytes, tag: bytes | None, tag_at: i64) -> bytes | None:
    """The delivery-tag of TransferFields' (tag, tag_at) in the frame's buffer `buf`."""
    return tag if tag_at < 0 else tag_in(buf, tag_at)


def parse_transfer(buf: bytes, pos: i64, end: i64) -> TransferFields:
    """(handle, delivery-id, tag, format, settled, more, rcv-settle-mode, state, resume, aborted,
    payload offset) of the transfer whose list starts at `pos` (just after its descriptor).

    Unrolled for the encodings peers use (uint as uint0/smalluint/uint, tag as vbin8, booleans
    as true/false/null, trailing fields null); anything else goes to the general decoder, which
    validates every field. This runs once per transfer frame: keep it branchy, not loopy.
    Offsets and codes are native 64-bit ints (i64): compiled, their arithmetic and comparisons
    are plain machine operations where a Python int's take overflow checks and calls.
    """
    try:
        p = pos
        code: i64 = buf[p]
        count: i64
        stop: i64
        if code == 0xC0:
            count, stop = buf[p + 2], p + 2 + buf[p + 1]
            p += 3
        elif code == 0xD0:
            count, stop = u32(buf, p + 5), p + 5 + u32(buf, p + 1)
            p += 9
        else:
            return _transfer_general(buf, pos, end)
        if stop > end or count == 0:
            return _transfer_general(buf, pos, end)
        c: i64 = buf[p]
        handle: i64
        if c == 0x52:
            handle = buf[p + 1]
            p += 2
        elif c == 0x43:
            handle = 0
            p += 1
        elif c == 0x70:
            handle = u32(buf, p + 1)
            p += 5
        else:
            return _transfer_general(buf, pos, end)
        delivery_id: i64 = -1
        tag_at: i64 = -1
        message_format: i64 = 0
        settled: bool | None = None
        more = aborted = resume = False
        if count > 1:
            c = buf[p]
            if c == 0x52:
                delivery_id = buf[p + 1]
                p += 2
            elif c == 0x70:
                delivery_id = u32(buf, p + 1)
                p += 5
            elif c == 0x43:
                delivery_id = 0
                p += 1
            elif c == 0x40:
                p += 1
            else:
                return _transfer_general(buf, pos, end)
        if count > 2:
            c = buf[p]
            if c == 0xA0:
                tag_at = p + 2
                p = tag_at + buf[p + 1]
            elif c == 0x40:
                p += 1
            else:
                return _transfer_general(buf, pos, end)
        if count > 3:
            c = buf[p]
            if c == 0x43 or c == 0x40:
                p += 1
            elif c == 0x52:
                message_format = buf[p + 1]
                p += 2
            elif c == 0x70:
                message_format = u32(buf, p + 1)
                p += 5
            else:
                return _transfer_general(buf, pos, end)
        if count > 4:
            c = buf[p]
            if c == 0x41:
                settled = True
            elif c == 0x42:
                settled = False
            elif c != 0x40:
                return _transfer_general(buf, pos, end)
            p += 1
        if count > 5:
            c = buf[p]
            if c == 0x41:
                more = True
            elif c != 0x42 and c != 0x40:
                return _transfer_general(buf, pos, end)
            p += 1
        if count > 6:
            # rcv-settle-mode, state, resume, aborted, batchable: only the null/boolean forms are
            # read here; a state or a settle mode (rare) takes the general path.
            index: i64 = 6
            while index < count and index < 11:
                c = buf[p]
                if c == 0x40 or (c == 0x42 and index >= 8):  # false is a boolean's only
                    p += 1
                elif c == 0x41 and index >= 8:
                    if index == 9:
                        aborted = True
                    elif index == 8:
                        resume = True
                    p += 1
                else:
                    return _transfer_general(buf, pos, end)
                index += 1
            if count > 11:
                return _transfer_general(buf, pos, end)
        if p != stop:
            raise DecodeError("transfer list size disagrees with its fields")
        return (handle, delivery_id, None, tag_at, message_format, settled, more, None, None,
                resume, aborted, stop)
    except IndexError:
        raise DecodeError("truncated transfer") from None


def _transfer_general(buf: bytes, pos: int, end: int) -> TransferFields:
    t, stop = _general(buf, pos, end, Transfer)
    return transfer_fields(t, stop)


def transfer_fields(t: Transfer, stop: int) -> TransferFields:
    """The fields of a transfer the general decoder read, as the fast parser gives them."""
    delivery_id = -1 if t.delivery_id is None else t.delivery_id
    return (t.handle, delivery_id, t.delivery_tag, -1, t.message_format or 0, t.settled,
            t.more, t.rcv_settle_mode, t.state, t.resume, t.aborted, stop)


FlowFields = tuple["int | None", int, int, int, "int | None", "int | None", "int | None",
                   "int | None", bool, bool]


def parse_flow(buf: bytes, pos: int, end: int) -> FlowFields:
    """(next-incoming-id, incoming-window, next-outgoing-id, outgoing-window, handle,
    delivery-count, link-credit, available, drain, echo) of a flow (transport §2.7.4)."""
    parsed = read_fields(buf, pos, end)
    if parsed is None:
        fl, _ = _general(buf, pos, end, Flow)
        return (fl.next_incoming_id, fl.incoming_window, fl.next_outgoing_id,
                fl.outgoing_window, fl.handle, fl.delivery_count, fl.link_credit, fl.available,
                fl.drain, fl.echo)
    f, _ = parsed
    f += [None] * (10 - len(f))
    ints = (f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7])
    drain = False if f[8] is None else f[8]  # not `or`: a uint0 must fail the check below
    echo = False if f[9] is None else f[9]
    for i, v in enumerate(ints):
        if (v is None and 1 <= i <= 3) or (v is not None and type(v) is not int):
            _general(buf, pos, end, Flow)  # raises, naming the field
            raise DecodeError("flow field has the wrong type or a mandatory field is missing")
    # properties (a map) is never among the encodings read_fields reads, so must be absent
    if type(drain) is not bool or type(echo) is not bool or (len(f) > 10 and f[10] is not None):
        _general(buf, pos, end, Flow)
        raise DecodeError("flow.drain, flow.echo or flow.properties has the wrong type")
    return (f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], drain, echo)


DispositionFields = tuple[bool, int, "int | None", bool, Any]


def _uint_at(buf: bytes, p: i64) -> tuple[i64, i64]:
    """(value, offset after it) of a uint as peers write it (uint0, smalluint, uint); (-1, p)
    for any other constructor."""
    code: i64 = buf[p]
    if code == 0x52:
        return buf[p + 1], p + 2
    if code == 0x43:
        return 0, p + 1
    if code == 0x70:
        return u32(buf, p + 1), p + 5
    return -1, p


def _common_disposition(buf: bytes, pos: i64, end: i64) -> DispositionFields | None:
    """The disposition every client sends (a list8 of role, first, last or null, settled or
    null, then null, accepted or released, then a null or boolean batchable), read without a
    field list; None for any other shape or any inconsistency: the caller then reads it the
    general way, which also names what is wrong. Never raises."""
    try:
        if buf[pos] != 0xC0:
            return None
        stop: i64 = pos + 2 + buf[pos + 1]
        count: i64 = buf[pos + 2]
        if stop > end or count < 2 or count > 6:
            return None
        p = pos + 3
        code: i64 = buf[p]
        if code != 0x41 and code != 0x42:
            return None
        role = code == 0x41
        first, p = _uint_at(buf, p + 1)
        if first < 0:
            return None
        last: int | None = None
        settled = False
        state: Any = None
        if count >= 3:
            if buf[p] == 0x40:
                p += 1
            else:
                value, p = _uint_at(buf, p)
                if value < 0:
                    return None
                last = value
        if count >= 4:
            code = buf[p]
            if code == 0x41:
                settled = True
            elif code != 0x42 and code != 0x40:
                return None
            p += 1
        if count >= 5:
            code = buf[p]
            if code == 0x00:
                if buf[p + 1] != 0x53 or buf[p + 3] != 0x45:
                    return None
                outcome = buf[p + 2]
                if outcome == 0x24:
                    state = ACCEPTED
                elif outcome == 0x26:
                    state = RELEASED
                else:
                    return None
                p += 4
            elif code == 0x40:
                p += 1
            else:
                return None
        if count == 6:
            code = buf[p]
            if code != 0x40 and code != 0x41 and code != 0x42:
                return None
            p += 1
        if p != stop:
            return None
        return (role, first, last, settled, state)
    except IndexError:
        return None


def parse_disposition(buf: bytes, pos: int, end: int) -> DispositionFields:
    """(role, first, last, settled, state) of a disposition (transport §2.7.6)."""
    common = _common_disposition(buf, pos, end)
    if common is not None:
        return common
    parsed = read_fields(buf, pos, end)
    if parsed is None:
        d, _ = _general(buf, pos, end, Disposition)
        return (d.role, d.first, d.last, d.settled, d.state)
    f, _ = parsed
    f += [None] * (5 - len(f))
    role, first, last, settled, state = f[0], f[1], f[2], f[3], f[4]
    if settled is None:
        settled = False
    if (
        type(role) is not bool or type(first) is not int or type(settled) is not bool
        or (last is not None and type(last) is not int)
        or (state is not None and type(state) not in _OUTCOME_TYPES)  # int, bool or binary
        or (len(f) > 5 and f[5] is not None and type(f[5]) is not bool)  # batchable
    ):  # fmt: skip
        _general(buf, pos, end, Disposition)  # raises, naming the field
        raise DecodeError("disposition field has the wrong type or is missing")
    return (role, first, last, settled, state)
