"""A message's encoded sections as a router sees them: walked, never decoded (messaging §3.2).

Owns: `skip_value`, the one bounds-checked skipper every reader of message bytes uses (peek.py's
routing view, scan_sections, MessageFields, policy, the annotations below); `section_descriptor`;
`section_spans`, the walk over a message's head that MessageFields and policy share;
the message-annotations map at the byte level: its entries located without decoding them
(`annotation_entries`, keys sorted into kinds by a table the caller gives), the string and
list-of-strings values read, and strings, lists of strings and whole sections written by hand
(the general decoder and encoder cost about 20 µs per hop); and the header's ttl located and
rewritten (`header_ttl_at`, `with_ttl`: the reduced ttl of messaging §3.2.1).
What a key means (the router's own `x-opt-qd.*` keys) is the core's: router/core/annotate.py.
Must not touch: decoding values (decode.py), encoding (encode.py), framing, routing.

The bounds rule, kept here only: a value's bytes (its constructor, its size or count fields and
its content) lie before `end`, the container's end, or the skip raises DecodeError
(`amqp:decode-error`), never IndexError; a list's, map's or array's header agrees with its size
as decode_at checks it (count fits, map parity, array element constructor) unless the caller asks
for bounds only; described values nest at most MAX_DEPTH deep. Typed `bytes` with int offsets so
that mypyc compiles it to plain loads (bench/README.md, "Counting instructions").
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Any, Final

from mypy_extensions import i64

from .decode import MAX_DEPTH, array_element_ok, array_header, check_array_count, decode_at
from .encode import encode
from .errors import DecodeError
from .fastparse import u32
from .messaging import SECTION_ORDER, Header
from .types import Symbol, ULong

# What follows a constructor (types §1.6), by constructor byte: a fixed width >= 0, or one of
# these. A flat tuple indexed by the byte: a dict lookup would box the key.
_INVALID: Final = -1
_SIZE8: Final = -2  # one size byte: vbin8, str8, sym8, list8, map8, array8
_SIZE32: Final = -3  # four size bytes: vbin32, str32, sym32, list32, map32, array32
_DESCRIBED: Final = -4  # a descriptor value, then the described value


def _width_of(code: int) -> int:
    fixed = {0x40: 0, 0x41: 0, 0x42: 0, 0x43: 0, 0x44: 0, 0x45: 0, 0x50: 1, 0x51: 1, 0x52: 1, 0x53: 1,
             0x54: 1, 0x55: 1, 0x56: 1, 0x60: 2, 0x61: 2, 0x70: 4, 0x71: 4, 0x72: 4, 0x73: 4, 0x74: 4,
             0x80: 8, 0x81: 8, 0x82: 8, 0x83: 8, 0x84: 8, 0x94: 16, 0x98: 16}  # fmt: skip
    if code in fixed:
        return fixed[code]
    if code in (0xA0, 0xA1, 0xA3, 0xC0, 0xC1, 0xE0):
        return _SIZE8
    if code in (0xB0, 0xB1, 0xB3, 0xD0, 0xD1, 0xF0):
        return _SIZE32
    return _DESCRIBED if code == 0x00 else _INVALID


_WIDTH: Final[tuple[int, ...]] = tuple(_width_of(code) for code in range(256))


def skip_value(buf: bytes, pos: i64, end: i64, depth: int = 0, headers: bool = True) -> i64:
    """The offset just past the encoded value at `pos`, not reading at or past `end`.

    Nothing is decoded: the contents of strings, symbols, booleans and chars and the items of
    lists and maps are not read, so those errors surface only when decoding. `headers=False`
    skips a list or map by its size alone (an annotation's value the router copies as it came).
    Offsets are native ints (i64): compiled, plain machine arithmetic (fastparse.parse_transfer).
    """
    if pos >= end:
        raise DecodeError(f"truncated: expected a value at offset {pos}")
    code: i64 = buf[pos]
    width: i64 = _WIDTH[code]
    stop: i64
    if width >= 0:
        if pos + 1 + width > end:
            raise DecodeError(f"truncated value: need {width} bytes at offset {pos + 1}, have {end - pos - 1}")
        return pos + 1 + width
    if width == _SIZE8:
        if pos + 2 > end:
            raise DecodeError(f"truncated value: no size at offset {pos + 1}")
        stop = pos + 2 + buf[pos + 1]
    elif width == _SIZE32:
        if pos + 5 > end:
            raise DecodeError(f"truncated value: no size at offset {pos + 1}")
        stop = pos + 5 + u32(buf, pos + 1)
    elif width == _DESCRIBED:
        if depth >= MAX_DEPTH:
            raise DecodeError(f"nesting deeper than {MAX_DEPTH}")
        return skip_value(buf, skip_value(buf, pos + 1, end, depth + 1), end, depth + 1)
    else:
        raise DecodeError(f"invalid constructor {code:#04x} at offset {pos}")
    if stop > end:
        raise DecodeError(f"value of {stop - pos} bytes overruns its container at offset {pos}")
    if code >= 0xE0:
        _check_array(buf, pos + 1, stop, code == 0xF0, depth)
    elif code >= 0xD0:
        if headers:
            _check_compound32(buf, pos + 1, stop, code)
    elif code >= 0xC0 and headers:  # list8, map8 (annotations, properties): checked inline
        size: i64 = buf[pos + 1]
        if size < 1:
            raise DecodeError("compound size 0 leaves no room for its count")
        count: i64 = buf[pos + 2]
        if count > size - 1:  # every item takes at least its constructor byte
            raise DecodeError(f"compound count {count} cannot fit in {size - 1} bytes")
        if code == 0xC1 and count & 1:
            raise DecodeError(f"map has an odd number of items ({count})")
    return stop


def _check_compound32(buf: bytes, pos: int, stop: int, code: int) -> None:
    """The header checks decode_at makes on a list32 or map32 (types §1.6.22-25), items unread."""
    if pos + 8 > stop:
        raise DecodeError("compound size smaller than its count field")
    count, first = u32(buf, pos + 4), pos + 8
    if count > stop - first:  # every item takes at least its constructor byte
        raise DecodeError(f"compound count {count} cannot fit in {stop - first} bytes")
    if code == 0xD1 and count % 2:
        raise DecodeError(f"map has an odd number of items ({count})")


def _check_array(buf: bytes, pos: int, stop: int, wide: bool, depth: int) -> None:
    """The header checks decode_at makes on an array (types §1.6.26-27), elements unread."""
    count, pos, stop = array_header(buf, pos, stop, wide)
    if pos >= stop:
        raise DecodeError("truncated array: no element constructor")
    if buf[pos] == 0x00:
        if depth >= MAX_DEPTH:
            raise DecodeError(f"nesting deeper than {MAX_DEPTH}")
        pos = skip_value(buf, pos + 1, stop, depth + 1)
        if pos >= stop:
            raise DecodeError("truncated array: no element constructor")
    if not array_element_ok(buf[pos]):
        raise DecodeError(f"invalid array element constructor {buf[pos]:#04x}")
    check_array_count(buf[pos], count, stop - pos - 1)


_CODE_BY_NAME: Final = {getattr(c, "DESCRIPTOR_NAME"): c.DESCRIPTOR_CODE for c in SECTION_ORDER}


def section_descriptor(payload: bytes, pos: int, end: int) -> tuple[int, int]:
    """(descriptor code, offset past it) of a section; symbolic descriptors are mapped to codes."""
    if pos + 2 <= end and payload[pos] == 0x53:  # smallulong: the usual encoding
        return payload[pos + 1], pos + 2
    descriptor, pos = decode_at(payload, pos, end)
    if type(descriptor) is ULong:
        return int(descriptor), pos
    if type(descriptor) is Symbol and descriptor in _CODE_BY_NAME:
        return _CODE_BY_NAME[descriptor], pos
    raise DecodeError(f"descriptor {descriptor!r} is not a message section")



def section_spans(data: bytes, last: int) -> tuple[list[tuple[int, int, int]], int]:
    """Where a message's sections lie, as (code, start, stop), up to the first section whose
    code is above `last` (found, not skipped: a reader of the head never walks the body), and
    the offset the walk stopped at. DecodeError when what comes first is not a section, is
    malformed, or is cut by the end of `data`. (peek.py's routing view and message.py's full
    scan walk on their own: each checks more per section.)"""
    spans: list[tuple[int, int, int]] = []
    pos, end = 0, len(data)
    try:
        while pos < end:
            if data[pos] != 0x00:
                raise DecodeError(f"expected a message section at offset {pos}")
            code, value_pos = section_descriptor(data, pos + 1, end)
            if code > last:
                break
            stop = skip_value(data, value_pos, end)
            spans.append((code, pos, stop))
            pos = stop
    except IndexError:
        raise DecodeError("message cut short inside its sections") from None
    return spans, pos

# --- the message-annotations map (messaging §3.2.3), at the byte level ---------------------------

ANNOTATIONS_SECTION: Final = b"\x00\x53\x72"  # described by smallulong 0x72
OTHER: Final = 0  # the kind of a key that does not start with the caller's prefix
Entry = tuple[int, int, int, int]  # (kind, key offset, value offset, end)


def head(payload: bytes | memoryview, stop: int) -> bytes:
    """The bytes up to `stop` (a large first frame may be a memoryview of a whole read)."""
    return payload if type(payload) is bytes else bytes(payload[:stop])


def annotation_entries(data: bytes, span: tuple[int, int], prefix: bytes, kinds: dict[bytes, int],
                       prefixed: int) -> list[Entry]:  # fmt: skip
    """The entries of the message-annotations section at `span`, located without decoding them:
    a symbol key starting with `prefix` gets its kind from `kinds` (`prefixed` if absent), any
    other key OTHER (ulong keys, messaging §3.2.10, are kept as they are); values are skipped by
    their size alone (they are copied, never decoded)."""
    start, stop = span
    _, pos = section_descriptor(data, start + 1, stop)
    if pos + 3 <= stop and data[pos] == 0xC1:
        count, pos = data[pos + 2], pos + 3
    elif pos + 9 <= stop and data[pos] == 0xD1:
        count, pos = u32(data, pos + 5), pos + 9
    else:
        raise DecodeError("message-annotations must be a map")
    if count % 2:
        raise DecodeError("message-annotations map has an odd number of items")
    found: list[Entry] = []
    for _ in range(count // 2):
        if pos >= stop:
            raise DecodeError("message-annotations map is truncated")
        kind = OTHER
        code = data[pos]
        if code == 0xA3 and pos + 2 <= stop:  # sym8, the usual key
            value_at = pos + 2 + data[pos + 1]
            if data.startswith(prefix, pos + 2) and value_at <= stop:
                kind = kinds.get(data[pos + 2 : value_at], prefixed)
        else:
            value_at = skip_value(data, pos, stop, 0, False)
            if code == 0xB3 and data.startswith(prefix, pos + 5):
                kind = kinds.get(data[pos + 5 : value_at], prefixed)
        if value_at >= stop:
            raise DecodeError("message-annotations value is missing")
        end = skip_value(data, value_at, stop, 0, False)
        found.append((kind, pos, value_at, end))
        pos = end
    if pos != stop:
        raise DecodeError("message-annotations map size does not match its items")
    return found


def read_string(data: bytes, pos: int, end: int) -> Any:
    """The value at `pos` (ending at `end`): a str8 inline, any other encoding decoded."""
    if data[pos] == 0xA1 and end == pos + 2 + data[pos + 1]:
        return data[pos + 2 : end].decode("utf-8")
    value, _ = decode_at(data, pos, end)
    return value


def read_strings(data: bytes, pos: int, end: int, limit: int) -> Any:
    """The list at `pos` as read_string reads its items (at most `limit` + 1 of them, enough to
    see it is too long), or whatever other value is there, decoded."""
    code = data[pos]
    if code == 0x45:
        return []
    if code == 0xC0 or code == 0xD0:
        wide = code == 0xD0
        count = int.from_bytes(data[pos + 5 : pos + 9], "big") if wide else data[pos + 2]
        pos += 9 if wide else 3
        items = []
        for _ in range(min(count, limit + 1)):
            stop = skip_value(data, pos, end, 0, False)
            items.append(read_string(data, pos, stop))
            pos = stop
        return items
    value, _ = decode_at(data, pos, end)
    return value


def symbol_bytes(name: str) -> bytes:
    """An ASCII symbol of fewer than 256 characters, encoded (sym8)."""
    data = name.encode("ascii")
    return b"\xa3" + bytes((len(data),)) + data


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


def annotations_section(pieces: list[bytes], pairs: int) -> bytes:
    """A message-annotations section of `pairs` entries, each piece one or more encoded entries."""
    body = b"".join(pieces)
    if len(body) < 255 and 2 * pairs < 256:
        return ANNOTATIONS_SECTION + b"\xc1" + bytes((len(body) + 1, 2 * pairs)) + body
    return (ANNOTATIONS_SECTION + b"\xd1" + (len(body) + 4).to_bytes(4, "big") + (2 * pairs).to_bytes(4, "big")
            + body)  # fmt: skip


# --- the header's ttl (messaging §3.2.1), at the byte level --------------------------------------

_HEADER: Final = 0x70
_MESSAGE_ANNOTATIONS: Final = 0x72  # the last section the header may be looked for before
_TTL_FIELD: Final = 2  # the header's third field: durable, priority, ttl
_UINT: Final = 0x70  # uint in four bytes (types §1.6.8)
_SMALLUINT: Final = 0x52  # uint in one byte


def header_ttl_at(data: bytes) -> tuple[int, int, int] | None:
    """(start, stop, ttl offset): where the header section of message head `data` lies and where
    its ttl's encoding starts; None when it has no header or its header no ttl. Only the
    sections before the properties are walked (the header is the first, messaging §3.2)."""
    spans, _ = section_spans(data, _MESSAGE_ANNOTATIONS)
    for code, start, stop in spans:
        if code == _HEADER:
            return _ttl_in(data, start, stop)
    return None


def _ttl_in(data: bytes, start: int, stop: int) -> tuple[int, int, int] | None:
    """header_ttl_at for the header section at data[start:stop] (a described list)."""
    _, pos = section_descriptor(data, start + 1, stop)
    if pos + 3 <= stop and data[pos] == 0xC0:  # list8, the usual encoding
        count, pos = data[pos + 2], pos + 3
    elif pos + 9 <= stop and data[pos] == 0xD0:
        count, pos = u32(data, pos + 5), pos + 9
    else:
        return None  # list0: no field at all
    if count <= _TTL_FIELD:
        return None
    for _ in range(_TTL_FIELD):
        pos = skip_value(data, pos, stop)
    if pos >= stop or data[pos] == 0x40:  # null: no ttl
        return None
    return start, stop, pos


def with_ttl(data: bytes, at: tuple[int, int, int], ttl_ms: int) -> bytes:
    """`data` with its header's ttl (where header_ttl_at found it: `at`) set to `ttl_ms`. The
    header is not part of the bare message (messaging §3.2): every other byte stays as it is.
    A uint ttl is overwritten where it is, in its own width when `ttl_ms` fits it (a reduced
    ttl always does: 0x70, four bytes, or 0x52, one, holding a larger value before), so the
    message keeps its length; a ttl in any other integer encoding (composite.py accepts any that
    fits: peers narrow and widen) has the header section encoded anew, its length may change."""
    start, stop, pos = at
    code = data[pos]
    if code == _UINT and 0 <= ttl_ms <= 0xFFFFFFFF:
        return b"".join((data[: pos + 1], ttl_ms.to_bytes(4, "big"), data[pos + 5 :]))
    if code == _SMALLUINT and 0 <= ttl_ms <= 0xFF:
        return b"".join((data[: pos + 1], bytes((ttl_ms,)), data[pos + 2 :]))
    header, _ = decode_at(data, start, stop)
    if type(header) is not Header:
        raise DecodeError("malformed header section")
    return b"".join((data[:start], encode(replace(header, ttl=ttl_ms)), data[stop:]))
