"""AMQP 1.0 decoders of the scalar types' bodies (types §1.6): null, boolean, the integers,
floats, decimals, char, timestamp, uuid, and the variable-width binary, string and symbol.

Owns: each scalar's body decoder (what follows its constructor byte), `SCALAR_BODIES`, the
part of decode.py's constructor table for them, and `need`, the bounds check every decoder
makes before it reads: a body never reads at or past `end` (DecodeError, never IndexError).
Must not touch: lists, maps, arrays and described values, dispatching on the constructor
(decode.py), encoding, framing.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any, Final

from .errors import DecodeError
from .types import (
    Byte, Char, Decimal32, Decimal64, Decimal128, Float, Int, Long, Short, Symbol, Timestamp, UByte, UInt, ULong, UShort,
)  # fmt: skip

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


def need(pos: int, n: int, end: int) -> None:
    """Refuse (DecodeError) a read of `n` bytes at `pos` that would reach past `end`."""
    if pos + n > end:
        raise DecodeError(f"truncated value: need {n} bytes at offset {pos}, have {end - pos}")


def _fixed(width: int, unpack: Callable[[Buffer, int], tuple[Any, ...]], wrap: Any) -> BodyDecoder:
    def body(buf: Buffer, pos: int, end: int, depth: int) -> tuple[Any, int]:
        if pos + width > end:
            need(pos, width, end)
        return wrap(unpack(buf, pos)[0]), pos + width

    return body


def _constant(value: Any) -> BodyDecoder:
    def body(buf: Buffer, pos: int, end: int, depth: int) -> tuple[Any, int]:
        return value, pos

    return body


def _boolean(buf: Buffer, pos: int, end: int, depth: int) -> tuple[Any, int]:
    need(pos, 1, end)
    octet = buf[pos]
    if octet > 1:
        raise DecodeError(f"boolean octet must be 0 or 1, got {octet}")
    return octet == 1, pos + 1


def _char(buf: Buffer, pos: int, end: int, depth: int) -> tuple[Any, int]:
    need(pos, 4, end)
    code = _I(buf, pos)[0]
    if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        raise DecodeError(f"char is not a Unicode scalar value: {code:#x}")
    return Char(chr(code)), pos + 4


def _uuid(buf: Buffer, pos: int, end: int, depth: int) -> tuple[Any, int]:
    need(pos, 16, end)
    return uuid.UUID(bytes=bytes(buf[pos : pos + 16])), pos + 16


def _decimal128(buf: Buffer, pos: int, end: int, depth: int) -> tuple[Any, int]:
    need(pos, 16, end)
    return Decimal128(bytes(buf[pos : pos + 16])), pos + 16


def _span(buf: Buffer, pos: int, end: int, wide: bool) -> tuple[int, int]:
    """(start, stop) of a variable-width value's bytes after its size prefix."""
    if wide:
        need(pos, 4, end)
        size = _I(buf, pos)[0]
        pos += 4
    else:
        need(pos, 1, end)
        size = buf[pos]
        pos += 1
    need(pos, size, end)
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


# (constructor code, type name, body decoder, zero width: the constructor is the whole value)
SCALAR_BODIES: Final[tuple[tuple[int, str, BodyDecoder, bool], ...]] = (
    (0x40, "null", _constant(None), True),
    (0x41, "boolean", _constant(True), True),
    (0x42, "boolean", _constant(False), True),
    (0x56, "boolean", _boolean, False),
    (0x50, "ubyte", _fixed(1, _B, UByte), False),
    (0x60, "ushort", _fixed(2, _H, UShort), False),
    (0x70, "uint", _fixed(4, _I, UInt), False),
    (0x52, "uint", _fixed(1, _B, UInt), False),
    (0x43, "uint", _constant(UInt(0)), True),
    (0x80, "ulong", _fixed(8, _Q, ULong), False),
    (0x53, "ulong", _fixed(1, _B, ULong), False),
    (0x44, "ulong", _constant(ULong(0)), True),
    (0x51, "byte", _fixed(1, _b, Byte), False),
    (0x61, "short", _fixed(2, _h, Short), False),
    (0x71, "int", _fixed(4, _i, Int), False),
    (0x54, "int", _fixed(1, _b, Int), False),
    (0x81, "long", _fixed(8, _q, Long), False),
    (0x55, "long", _fixed(1, _b, Long), False),
    (0x72, "float", _fixed(4, _f, Float), False),
    (0x82, "double", _fixed(8, _d, float), False),
    (0x74, "decimal32", _fixed(4, _I, Decimal32), False),
    (0x84, "decimal64", _fixed(8, _Q, Decimal64), False),
    (0x94, "decimal128", _decimal128, False),
    (0x73, "char", _char, False),
    (0x83, "timestamp", _fixed(8, _q, Timestamp), False),
    (0x98, "uuid", _uuid, False),
    (0xA0, "binary", _variable(bytes, False), False),
    (0xB0, "binary", _variable(bytes, True), False),
    (0xA1, "string", _variable(_utf8, False), False),
    (0xB1, "string", _variable(_utf8, True), False),
    (0xA3, "symbol", _variable(_ascii_symbol, False), False),
    (0xB3, "symbol", _variable(_ascii_symbol, True), False),
)
