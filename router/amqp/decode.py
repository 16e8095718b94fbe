"""AMQP 1.0 decoder for every primitive type (types §1.6) and described values.

Owns: turning bytes into values, and the header checks of arrays (`array_header`,
`check_array_count`, `array_element_ok`) that the skipper of router/amqp/sections.py shares.
Finding where an encoded value ends without building it is sections.py's `skip_value`.
Decoders never trust lengths: every read is bounds-checked against `end`, sizes and counts are
checked for consistency, nesting depth is capped, and all failures raise DecodeError
(`amqp:decode-error`), never IndexError or struct.error.
Composite types register a constructor keyed by descriptor with `register_described`.
Must not touch: encoding, framing.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any, Final

from .errors import DecodeError
from .types import (
    Array,
    Byte,
    Char,
    Decimal32,
    Decimal64,
    Decimal128,
    Described,
    Float,
    Int,
    Long,
    Short,
    Symbol,
    Timestamp,
    UByte,
    UInt,
    ULong,
    UShort,
)

MAX_DEPTH: Final = 64
# An array of zero-width elements (null, true, uint0 ...) costs nothing on the wire; cap their
# count so a few hostile bytes cannot make us build billions of objects. The cap is for the whole
# value being decoded, not per array: a list of many small arrays would otherwise multiply it.
MAX_ZERO_WIDTH_COUNT: Final = 65536
# Zero-width elements still allowed in the value being decoded; reset by each top-level decode_at
# (depth 0). Module state is safe because decoding, like the rest of this sans-IO package, runs to
# completion in one thread; two threads decoding at once could only share one allowance.
_zero_width_left = [MAX_ZERO_WIDTH_COUNT]

Buffer = bytes | bytearray | memoryview  # what decoders read from (indexing gives ints)
BodyDecoder = Callable[[Buffer, int, int, int], tuple[Any, int]]

_B = struct.Struct(">B").unpack_from
_H = struct.Struct(">H").unpack_from
_I = struct.Struct(">I").unpack_from
_Q = struct.Struct(">Q").unpack_from
_b = struct.Struct(">b").unpack_from
_h = struct.Struct(">h").unpack_from
_i = struct.Struct(">i").unpack_from
_q = struct.Struct(">q").unpack_from
_f = struct.Struct(">f").unpack_from
_d = struct.Struct(">d").unpack_from
_II = struct.Struct(">II").unpack_from

_DESCRIBED: dict[Any, Callable[[Any], Any]] = {}


def register_described(descriptors: tuple[Any, ...], build: Callable[[Any], Any]) -> None:
    """Decode values described by any of `descriptors` with `build(undescribed_value)`."""
    for descriptor in descriptors:
        _DESCRIBED[descriptor] = build


def _need(pos: int, n: int, end: int) -> None:
    if pos + n > end:
        raise DecodeError(f"truncated value: need {n} bytes at offset {pos}, have {end - pos}")


def _fixed(width: int, unpack: Callable[[Buffer, int], tuple[Any, ...]], wrap: Any) -> BodyDecoder:
    def body(buf: Buffer, pos: int, end: int, depth: int) -> tuple[Any, int]:
        if pos + width > end:
            _need(pos, width, end)
        return wrap(unpack(buf, pos)[0]), pos + width

    return body


def _constant(value: Any) -> BodyDecoder:
    def body(buf: Buffer, pos: int, end: int, depth: int) -> tuple[Any, int]:
        return value, pos

    return body


def _boolean(buf: Buffer, pos: int, end: int, depth: int) -> tuple[Any, int]:
    _need(pos, 1, end)
    octet = buf[pos]
    if octet > 1:
        raise DecodeError(f"boolean octet must be 0 or 1, got {octet}")
    return octet == 1, pos + 1


def _char(buf: Buffer, pos: int, end: int, depth: int) -> tuple[Any, int]:
    _need(pos, 4, end)
    code = _I(buf, pos)[0]
    if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        raise DecodeError(f"char is not a Unicode scalar value: {code:#x}")
    return Char(chr(code)), pos + 4


def _uuid(buf: Buffer, pos: int, end: int, depth: int) -> tuple[Any, int]:
    _need(pos, 16, end)
    return uuid.UUID(bytes=bytes(buf[pos : pos + 16])), pos + 16


def _decimal128(buf: Buffer, pos: int, end: int, depth: int) -> tuple[Any, int]:
    _need(pos, 16, end)
    return Decimal128(bytes(buf[pos : pos + 16])), pos + 16


def _span(buf: Buffer, pos: int, end: int, wide: bool) -> tuple[int, int]:
    """(start, stop) of a variable-width value's bytes after its size prefix."""
    if wide:
        _need(pos, 4, end)
        size = _I(buf, pos)[0]
        pos += 4
    else:
        _need(pos, 1, end)
        size = buf[pos]
        pos += 1
    _need(pos, size, end)
    return pos, pos + size


def _variable(convert: Callable[[bytes], Any], wide: bool) -> BodyDecoder:
    def body(buf: Buffer, pos: int, end: int, depth: int) -> tuple[Any, int]:
        start, stop = _span(buf, pos, end, wide)
        return convert(bytes(buf[start:stop])), stop

    return body


def _utf8(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"string is not valid UTF-8: {exc.reason}") from None


def _ascii_symbol(data: bytes) -> Symbol:
    try:
        return Symbol(data.decode("ascii"))
    except UnicodeDecodeError:
        raise DecodeError("symbol is not ASCII") from None


def _compound_header(buf: Buffer, pos: int, end: int, wide: bool) -> tuple[int, int, int]:
    """(count, first item offset, stop) of a list/map body, checking size against count."""
    if wide:
        _need(pos, 8, end)
        size, count = _II(buf, pos)
        if size < 4:
            raise DecodeError(f"compound size {size} smaller than its count field")
        stop = pos + 4 + size
        pos += 8
    else:
        _need(pos, 2, end)
        size, count = buf[pos], buf[pos + 1]
        if size < 1:
            raise DecodeError("compound size 0 leaves no room for its count")
        stop = pos + 1 + size
        pos += 2
    if stop > end:
        raise DecodeError(f"compound of {size} bytes overruns its container at offset {pos}")
    if count > stop - pos:  # every item takes at least its constructor byte
        raise DecodeError(f"compound count {count} cannot fit in {stop - pos} bytes")
    return count, pos, stop


def _items(buf: Buffer, pos: int, stop: int, count: int, depth: int) -> list[Any]:
    if depth >= MAX_DEPTH:
        raise DecodeError(f"nesting deeper than {MAX_DEPTH}")
    items = []
    for _ in range(count):
        item, pos = decode_at(buf, pos, stop, depth + 1)
        items.append(item)
    if pos != stop:
        raise DecodeError(f"compound size disagrees with its {count} items")
    return items


def _list0(buf: Buffer, pos: int, end: int, depth: int) -> tuple[Any, int]:
    return [], pos  # a fresh list each time: callers may keep and mutate it


def _list(wide: bool) -> BodyDecoder:
    def body(buf: Buffer, pos: int, end: int, depth: int) -> tuple[Any, int]:
        count, pos, stop = _compound_header(buf, pos, end, wide)
        return _items(buf, pos, stop, count, depth), stop

    return body


def _map(wide: bool) -> BodyDecoder:
    def body(buf: Buffer, pos: int, end: int, depth: int) -> tuple[Any, int]:
        count, pos, stop = _compound_header(buf, pos, end, wide)
        if count % 2:
            raise DecodeError(f"map has an odd number of items ({count})")
        items = _items(buf, pos, stop, count, depth)
        result: dict[Any, Any] = {}
        for i in range(0, count, 2):
            key = items[i]
            try:
                result[key] = items[i + 1]
            except TypeError:
                raise DecodeError(f"map key of type {type(key).__name__} is not supported") from None
        return result, stop

    return body


def _array(wide: bool) -> BodyDecoder:
    def body(buf: Buffer, pos: int, end: int, depth: int) -> tuple[Any, int]:
        count, pos, stop = array_header(buf, pos, end, wide)
        if depth >= MAX_DEPTH:
            raise DecodeError(f"nesting deeper than {MAX_DEPTH}")
        descriptor = None
        _need(pos, 1, stop)
        if buf[pos] == 0x00:
            descriptor, pos = decode_at(buf, pos + 1, stop, depth + 1)
            _need(pos, 1, stop)
        code = buf[pos]
        element = _BODIES[code]
        element_type = _TYPE_NAMES.get(code)
        if element is None or element_type is None:
            raise DecodeError(f"invalid array element constructor {code:#04x}")
        pos += 1
        check_array_count(code, count, stop - pos)
        if _ZERO_WIDTH[code]:
            _zero_width_left[0] -= count
            if _zero_width_left[0] < 0:
                raise DecodeError(f"more than {MAX_ZERO_WIDTH_COUNT} zero-width elements refused")
        elements = []
        for _ in range(count):
            item, pos = element(buf, pos, stop, depth + 1)
            elements.append(item)
        if pos != stop:
            raise DecodeError(f"array size disagrees with its {count} elements")
        return Array(element_type, elements, descriptor), stop

    return body


def check_array_count(code: int, count: int, room: int) -> None:
    """Refuse an array count its element constructor and remaining bytes cannot hold."""
    if _ZERO_WIDTH[code]:
        if count > MAX_ZERO_WIDTH_COUNT:
            raise DecodeError(f"array of {count} zero-width elements refused")
    elif count > room:  # every element takes at least one byte
        raise DecodeError(f"array count {count} cannot fit in {room} bytes")


def array_header(buf: Buffer, pos: int, end: int, wide: bool) -> tuple[int, int, int]:
    if wide:
        _need(pos, 8, end)
        size, count = _II(buf, pos)
        if size < 4:
            raise DecodeError(f"array size {size} smaller than its count field")
        stop, pos = pos + 4 + size, pos + 8
    else:
        _need(pos, 2, end)
        size, count = buf[pos], buf[pos + 1]
        if size < 1:
            raise DecodeError("array size 0 leaves no room for its count")
        stop, pos = pos + 1 + size, pos + 2
    if stop > end:
        raise DecodeError(f"array of {size} bytes overruns its container")
    return count, pos, stop


def _described(buf: Buffer, pos: int, end: int, depth: int) -> tuple[Any, int]:
    if depth >= MAX_DEPTH:
        raise DecodeError(f"nesting deeper than {MAX_DEPTH}")
    descriptor, pos = decode_at(buf, pos, end, depth + 1)
    value, pos = decode_at(buf, pos, end, depth + 1)
    # Only ulong and symbol descriptors name a type (types §1.5): a long 0x10 or the *string*
    # "amqp:open:list" is some other, unknown described value, not an open.
    build = _DESCRIBED.get(descriptor) if type(descriptor) in (ULong, Symbol) else None
    if build is None:
        return Described(descriptor, value), pos
    return build(value), pos


_BODIES: list[BodyDecoder | None] = [None] * 256
_TYPE_NAMES: dict[int, str] = {}
_ZERO_WIDTH: dict[int, bool] = {}


def _define(code: int, name: str, body: BodyDecoder, zero_width: bool = False) -> None:
    _BODIES[code] = body
    _TYPE_NAMES[code] = name
    _ZERO_WIDTH[code] = zero_width


_define(0x40, "null", _constant(None), True)
_define(0x41, "boolean", _constant(True), True)
_define(0x42, "boolean", _constant(False), True)
_define(0x56, "boolean", _boolean)
_define(0x50, "ubyte", _fixed(1, _B, UByte))
_define(0x60, "ushort", _fixed(2, _H, UShort))
_define(0x70, "uint", _fixed(4, _I, UInt))
_define(0x52, "uint", _fixed(1, _B, UInt))
_define(0x43, "uint", _constant(UInt(0)), True)
_define(0x80, "ulong", _fixed(8, _Q, ULong))
_define(0x53, "ulong", _fixed(1, _B, ULong))
_define(0x44, "ulong", _constant(ULong(0)), True)
_define(0x51, "byte", _fixed(1, _b, Byte))
_define(0x61, "short", _fixed(2, _h, Short))
_define(0x71, "int", _fixed(4, _i, Int))
_define(0x54, "int", _fixed(1, _b, Int))
_define(0x81, "long", _fixed(8, _q, Long))
_define(0x55, "long", _fixed(1, _b, Long))
_define(0x72, "float", _fixed(4, _f, Float))
_define(0x82, "double", _fixed(8, _d, float))
_define(0x74, "decimal32", _fixed(4, _I, Decimal32))
_define(0x84, "decimal64", _fixed(8, _Q, Decimal64))
_define(0x94, "decimal128", _decimal128)
_define(0x73, "char", _char)
_define(0x83, "timestamp", _fixed(8, _q, Timestamp))
_define(0x98, "uuid", _uuid)
_define(0xA0, "binary", _variable(bytes, False))
_define(0xB0, "binary", _variable(bytes, True))
_define(0xA1, "string", _variable(_utf8, False))
_define(0xB1, "string", _variable(_utf8, True))
_define(0xA3, "symbol", _variable(_ascii_symbol, False))
_define(0xB3, "symbol", _variable(_ascii_symbol, True))
_define(0x45, "list", _list0, True)
_define(0xC0, "list", _list(False))
_define(0xD0, "list", _list(True))
_define(0xC1, "map", _map(False))
_define(0xD1, "map", _map(True))
_define(0xE0, "array", _array(False))
_define(0xF0, "array", _array(True))
_BODIES[0x00] = _described


def array_element_ok(code: int) -> bool:
    """Whether `code` may construct an array's elements (types §1.6.26-27: a primitive)."""
    return _BODIES[code] is not None and code in _TYPE_NAMES


def decode_at(buf: Buffer, pos: int, end: int, depth: int = 0) -> tuple[Any, int]:
    """Decode one value starting at `pos`, not reading at or past `end`: (value, next offset)."""
    if depth == 0:
        _zero_width_left[0] = MAX_ZERO_WIDTH_COUNT
    if pos >= end:
        raise DecodeError(f"truncated: expected a value at offset {pos}")
    body = _BODIES[buf[pos]]
    if body is None:
        raise DecodeError(f"invalid constructor {buf[pos]:#04x} at offset {pos}")
    return body(buf, pos + 1, end, depth)


def decode(data: bytes) -> Any:
    """Decode exactly one value that fills `data`."""
    value, pos = decode_at(data, 0, len(data))
    if pos != len(data):
        raise DecodeError(f"{len(data) - pos} trailing bytes after the value")
    return value
