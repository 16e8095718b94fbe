"""The hot path's reading of flow and disposition performatives (transport §2.7.4, §2.7.6)
straight from the receive buffer: credit and settlement, the frames that answer transfers.

Owns: read_fields (a performative's field list, for the encodings peers use: null, uint,
boolean, binary8 and outcomes with no fields), the flow read through it and checked, the
disposition every client sends read inline (no field list), and any other disposition read
through read_fields. Anything unusual goes to the general decoder (fastparse.parse_general),
which validates every field and names what is wrong.
Must not touch: connection/session/link state (the engine calls these functions), transfers
(fastparse.py).
"""

from __future__ import annotations

from typing import Any, Final

from mypy_extensions import i64

from .errors import DecodeError
from .fastparse import parse_general, u32
from .messaging import ACCEPTED, RELEASED, Modified, Rejected
from .performatives import Disposition, Flow


# Outcomes whose fields are all absent, as peers send them (messaging §3.4): described list0.
_EMPTY_OUTCOMES: Final[dict[int, Any]] = {
    0x24: ACCEPTED,
    0x25: Rejected(),
    0x26: RELEASED,
    0x27: Modified(),
}


# The only described values read_fields gives (other states take the general decoder).
_OUTCOME_TYPES: Final = frozenset(type(state) for state in _EMPTY_OUTCOMES.values())


def read_fields(buf: bytes, pos: int, end: int) -> tuple[list[Any], int] | None:
    """The fields of the list at `pos` (a performative's body) and the offset after the list.

    Only null, uint, boolean and binary8 fields are read here, which is every field of a
    typical flow or disposition. None means some field has another encoding: the
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


FlowFields = tuple["int | None", int, int, int, "int | None", "int | None", "int | None",
                   "int | None", bool, bool]


def parse_flow(buf: bytes, pos: int, end: int) -> FlowFields:
    """(next-incoming-id, incoming-window, next-outgoing-id, outgoing-window, handle,
    delivery-count, link-credit, available, drain, echo) of a flow (transport §2.7.4)."""
    parsed = read_fields(buf, pos, end)
    if parsed is None:
        fl, _ = parse_general(buf, pos, end, Flow)
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
            parse_general(buf, pos, end, Flow)  # raises, naming the field
            raise DecodeError("flow field has the wrong type or a mandatory field is missing")
    # properties (a map) is never among the encodings read_fields reads, so must be absent
    if type(drain) is not bool or type(echo) is not bool or (len(f) > 10 and f[10] is not None):
        parse_general(buf, pos, end, Flow)
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
        d, _ = parse_general(buf, pos, end, Disposition)
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
        parse_general(buf, pos, end, Disposition)  # raises, naming the field
        raise DecodeError("disposition field has the wrong type or is missing")
    return (role, first, last, settled, state)
