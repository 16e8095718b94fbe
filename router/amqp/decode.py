"""AMQP 1.0 decoder for every primitive type (types §1.6) and described values.

Owns: turning bytes into values: the constructor table and its dispatch (`decode_at`), lists,
maps, arrays and described values, the nesting and zero-width caps, and the header checks of
arrays (`array_header`, `check_array_count`, `array_element_ok`) that the skipper of
router/amqp/sections.py shares. The scalars' bodies are decode_scalars.py's.
Finding where an encoded value ends without building it is sections.py's `skip_value`.
Decoders never trust lengths: every read is bounds-checked against `end`, sizes and counts are
checked for consistency, nesting depth is capped, and all failures raise DecodeError
(`amqp:decode-error`), never IndexError or struct.error.
Composite types register a constructor keyed by descriptor with `register_described`.
Must not touch: encoding, framing.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final

from .decode_scalars import SCALAR_BODIES, BodyDecoder, Buffer, need
from .errors import DecodeError
from .types import Array, Described, Symbol, ULong

MAX_DEPTH: Final = 64
# An array of zero-width elements (null, true, uint0 ...) costs nothing on the wire; cap their
# count so a few hostile bytes cannot make us build billions of objects. The cap is for the whole
# value being decoded, not per array: a list of many small arrays would otherwise multiply it.
MAX_ZERO_WIDTH_COUNT: Final = 65536
# Zero-width elements still allowed in the value being decoded; reset by each top-level decode_at
# (depth 0). Module state is safe because decoding, like the rest of this sans-IO package, runs to
# completion in one thread; two threads decoding at once could only share one allowance.
_zero_width_left = [MAX_ZERO_WIDTH_COUNT]

_II = struct.Struct(">II").unpack_from

_DESCRIBED: dict[Any, Callable[[Any], Any]] = {}


def register_described(descriptors: tuple[Any, ...], build: Callable[[Any], Any]) -> None:
    """Decode values described by any of `descriptors` with `build(undescribed_value)`."""
    for descriptor in descriptors:
        _DESCRIBED[descriptor] = build


def _compound_header(buf: Buffer, pos: int, end: int, wide: bool) -> tuple[int, int, int]:
    """(count, first item offset, stop) of a list/map body, checking size against count."""
    if wide:
        need(pos, 8, end)
        size, count = _II(buf, pos)
        if size < 4:
            raise DecodeError(f"compound size {size} smaller than its count field")
        stop = pos + 4 + size
        pos += 8
    else:
        need(pos, 2, end)
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
        need(pos, 1, stop)
        if buf[pos] == 0x00:
            descriptor, pos = decode_at(buf, pos + 1, stop, depth + 1)
            need(pos, 1, stop)
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
        need(pos, 8, end)
        size, count = _II(buf, pos)
        if size < 4:
            raise DecodeError(f"array size {size} smaller than its count field")
        stop, pos = pos + 4 + size, pos + 8
    else:
        need(pos, 2, end)
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


for scalar in SCALAR_BODIES:  # null, boolean, the numbers, char, timestamp, uuid, binary, string, symbol
    _define(*scalar)
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
