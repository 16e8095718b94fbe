"""Message annotations at the byte level: the scanning and writing router annotations need.

Owns: the router keys (`x-opt-qd.*`) and their encoded forms, locating the entries of a
message-annotations section without decoding them (router keys recognised by their bytes,
every value only skipped, bounds-checked), reading the string and list-of-strings values of
router keys, and writing strings, lists of strings and whole sections by hand (the general
decoder and encoder cost about 20 us per hop).
Must not touch: what the annotations mean (annotate.py), routing, links.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from ..amqp.decode import decode_at, skip_value
from ..amqp.errors import DecodeError
from ..amqp.message import section_descriptor
from .delivery import Payload

PREFIX = "x-opt-qd."
TO = "x-opt-qd.to"
INGRESS = "x-opt-qd.ingress"
TRACE = "x-opt-qd.trace"
FLOW_TRACE = "x-opt-qd.flow-trace"  # the trace id of a delivery's hop records (docs/flow-records.md)
CLIENT_TRACE = "x-opt-router-trace"  # a client's flag: hop records for this message (not a router key)
TRACE_MAX = 1024  # a longer trace is malformed (the radius check drops far shorter ones)
SECTION = b"\x00\x53\x72"  # described by smallulong 0x72: message-annotations (messaging §3.2.3)

Entry = tuple[int, int, int, int]  # (kind, key offset, value offset, end)
OTHER, KEY_TO, KEY_INGRESS, KEY_TRACE, KEY_ROUTER, KEY_FLOW_TRACE = 0, 1, 2, 3, 4, 5  # kinds of entries
KINDS = {TO.encode(): KEY_TO, INGRESS.encode(): KEY_INGRESS, TRACE.encode(): KEY_TRACE,
         FLOW_TRACE.encode(): KEY_FLOW_TRACE}  # fmt: skip
PREFIX_BYTES = PREFIX.encode()
_SHORT = frozenset((0xA0, 0xA1, 0xA3, 0xC0, 0xC1))  # one length byte follows the constructor
_LONG = frozenset((0xB0, 0xB1, 0xB3, 0xD0, 0xD1))  # four length bytes follow
_EMPTY = frozenset((0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x56))  # no bytes follow (null, true, ...)


def _sym(name: str) -> bytes:
    data = name.encode("ascii")
    return b"\xa3" + bytes((len(data),)) + data


K_TO, K_INGRESS, K_TRACE, K_FLOW_TRACE = _sym(TO), _sym(INGRESS), _sym(TRACE), _sym(FLOW_TRACE)
K_CLIENT_TRACE = _sym(CLIENT_TRACE)


def skip(payload: Payload, pos: int, stop: int) -> int:
    """The end of the value at `pos`: common encodings inline, the rest by skip_value."""
    code = payload[pos]
    if code in _SHORT and pos + 2 <= stop:
        end = pos + 2 + payload[pos + 1]
    elif code in _LONG and pos + 5 <= stop:
        end = pos + 5 + int.from_bytes(payload[pos + 1 : pos + 5], "big")
    elif code in _EMPTY:
        end = pos + 1
    else:
        return skip_value(payload, pos, stop)
    if end > stop:
        raise DecodeError(f"truncated value at offset {pos}")
    return end


def entries(data: bytes, span: tuple[int, int]) -> list[Entry]:
    """The entries of the message-annotations map in `span`, located without decoding them:
    router keys are recognised by their bytes, every value is only skipped (bounds-checked)."""
    start, stop = span
    _, pos = section_descriptor(data, start + 1, stop)
    if pos + 3 <= stop and data[pos] == 0xC1:
        count, pos = data[pos + 2], pos + 3
    elif pos + 9 <= stop and data[pos] == 0xD1:
        count, pos = int.from_bytes(data[pos + 5 : pos + 9], "big"), pos + 9
    else:
        raise DecodeError("message-annotations must be a map")
    if count % 2:
        raise DecodeError("message-annotations map has an odd number of items")
    entries: list[Entry] = []
    for _ in range(count // 2):
        if pos >= stop:
            raise DecodeError("message-annotations map is truncated")
        kind = OTHER
        if data[pos] == 0xA3:  # a symbol key (the usual one); ulong keys (§3.2.10) are kept as they are
            value_at = pos + 2 + data[pos + 1]
            if data.startswith(PREFIX_BYTES, pos + 2):
                kind = KINDS.get(data[pos + 2 : value_at], KEY_ROUTER)
        else:
            value_at = skip(data, pos, stop)
            if data[pos] == 0xB3 and data.startswith(PREFIX_BYTES, pos + 5):
                kind = KINDS.get(data[pos + 5 : value_at], KEY_ROUTER)
        if value_at >= stop:
            raise DecodeError("message-annotations value is missing")
        end = skip(data, value_at, stop)
        entries.append((kind, pos, value_at, end))
        pos = end
    if pos != stop:
        raise DecodeError("message-annotations map size does not match its items")
    return entries


def head(payload: Payload, span: tuple[int, int]) -> bytes:
    """The bytes up to the end of the annotations (a large first frame may be a memoryview)."""
    return payload if type(payload) is bytes else bytes(payload[: span[1]])


def read_string(payload: Payload, pos: int, end: int) -> Any:
    if payload[pos] == 0xA1 and end == pos + 2 + payload[pos + 1]:
        return bytes(payload[pos + 2 : end]).decode("utf-8")
    value, _ = decode_at(payload, pos, end)  # any other encoding: the general decoder
    return value


def read_strings(payload: Payload, pos: int, end: int) -> Any:
    code = payload[pos]
    if code == 0x45:
        return []
    if code == 0xC0 or code == 0xD0:
        wide = code == 0xD0
        count = int.from_bytes(payload[pos + 5 : pos + 9], "big") if wide else payload[pos + 2]
        pos += 9 if wide else 3
        items = []
        for _ in range(min(count, TRACE_MAX + 1)):
            stop = skip(payload, pos, end)
            items.append(read_string(payload, pos, stop))
            pos = stop
        return items
    value, _ = decode_at(payload, pos, end)
    return value


@lru_cache(maxsize=4096)
def write_string(text: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) < 256:
        return b"\xa1" + bytes((len(data),)) + data
    return b"\xb1" + len(data).to_bytes(4, "big") + data


@lru_cache(maxsize=4096)
def write_strings(items: tuple[str, ...]) -> bytes:
    body = b"".join(write_string(item) for item in items)
    if len(body) < 255 and len(items) < 256:
        return b"\xc0" + bytes((len(body) + 1, len(items))) + body
    return b"\xd0" + (len(body) + 4).to_bytes(4, "big") + len(items).to_bytes(4, "big") + body


def section(pieces: list[bytes], pairs: int) -> bytes:
    body = b"".join(pieces)
    if len(body) < 255 and 2 * pairs < 256:
        return SECTION + b"\xc1" + bytes((len(body) + 1, 2 * pairs)) + body
    return SECTION + b"\xd1" + (len(body) + 4).to_bytes(4, "big") + (2 * pairs).to_bytes(4, "big") + body
