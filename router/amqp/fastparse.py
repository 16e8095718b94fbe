"""The hot path's reading side: the fields of transfer performatives straight from the receive
buffer, and the uint32 read every reader of frames shares (u32). Flow and disposition are
fastparse_fields.py's; writing all three is fastpath.py's.

Owns: reading a transfer's fields with inline branches for the encodings peers use (scalars
inline, anything unusual handed to the general decoder, which validates every field and names
what is wrong), the tag's place in the frame, and that fallback to the general decoder for all
three performatives (parse_general). The message payload of a transfer is never decoded: it is
the slice after the performative. Measured on a minimal relay: a generic recursive decoder here
cost 3x in forwarding rate, so keep this path free of per-field objects and calls where an
inline branch will do.
Must not touch: connection/session/link state (the engine calls these functions).
"""

from __future__ import annotations

from typing import Any

from mypy_extensions import i64

from .decode import decode_at
from .errors import DecodeError
from .performatives import Transfer

def u32(buf: bytes, pos: i64) -> i64:
    """The big-endian uint32 at `pos`. Byte reads of a `bytes` compile to plain loads (mypyc),
    where struct.unpack_from costs a call and a tuple per field."""
    b0: i64 = buf[pos]
    b1: i64 = buf[pos + 1]
    b2: i64 = buf[pos + 2]
    b3: i64 = buf[pos + 3]
    return (b0 << 24) | (b1 << 16) | (b2 << 8) | b3


def parse_general(buf: bytes, pos: int, end: int, cls: type) -> Any:
    """(performative, offset after it) by the general, validating decoder, for a performative
    whose list starts at `pos` (its descriptor the three bytes before); DecodeError when it is
    not a `cls`."""
    value, stop = decode_at(buf, pos - 3, end)
    if type(value) is not cls:
        raise DecodeError(f"expected a {cls.__name__} performative")
    return value, stop


# The delivery-id is -1 when absent (an Optional int would box every delivery-id parsed). The
# tag: the fast parser gives where it starts in the frame's buffer (`tag_at`; its vbin8 length
# byte is the one before) and None for the bytes, so that a tag nobody reads (the router's
# anycast path never does) is never sliced; the general decoder gives the bytes, tag_at -1.
# Both None and -1: the transfer has no tag.
TransferFields = tuple[i64, i64, "bytes | None", i64, i64, "bool | None", bool, "int | None", Any, bool, bool, i64]


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
    t, stop = parse_general(buf, pos, end, Transfer)
    return transfer_fields(t, stop)


def transfer_fields(t: Transfer, stop: int) -> TransferFields:
    """The fields of a transfer the general decoder read, as the fast parser gives them."""
    delivery_id = -1 if t.delivery_id is None else t.delivery_id
    return (t.handle, delivery_id, t.delivery_tag, -1, t.message_format or 0, t.settled,
            t.more, t.rcv_settle_mode, t.state, t.resume, t.aborted, stop)
