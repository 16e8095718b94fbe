"""AMQP 1.0 encoders of the scalar types (types §1.6): null, boolean, the integers, floats,
decimals, char, timestamp, uuid, and the variable-width binary, string and symbol.

Owns: each scalar's smallest encoding (uint0, smalluint, str8 ...) and `SCALAR_ENCODERS`, the part
of encode.py's type -> encoder table for them; `utf8_bytes`, a string's bytes or EncodeError.
Must not touch: lists, maps, arrays and described values, dispatching a value to its encoder
(encode.py, which writes compounds in terms of these), decoding, framing.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

from .errors import EncodeError
from .types import (
    Byte, Char, Decimal32, Decimal64, Decimal128, Float, Int, Long, Short, Symbol, Timestamp, UByte, UInt, ULong, UShort,
)  # fmt: skip

Encoder = Callable[[bytearray, Any], None]

_pack_B = struct.Struct(">B").pack
_pack_H = struct.Struct(">H").pack
_pack_I = struct.Struct(">I").pack
_pack_Q = struct.Struct(">Q").pack
_pack_b = struct.Struct(">b").pack
_pack_h = struct.Struct(">h").pack
_pack_i = struct.Struct(">i").pack
_pack_q = struct.Struct(">q").pack
_pack_f = struct.Struct(">f").pack
_pack_d = struct.Struct(">d").pack
_pack_BI = struct.Struct(">BI").pack
_pack_BB = struct.Struct(">BB").pack


def _enc_null(out: bytearray, value: Any) -> None:
    out.append(0x40)


def _enc_bool(out: bytearray, value: Any) -> None:
    out.append(0x41 if value else 0x42)


def _enc_ubyte(out: bytearray, value: Any) -> None:
    out += b"\x50" + _pack_B(value)


def _enc_ushort(out: bytearray, value: Any) -> None:
    out += b"\x60" + _pack_H(value)


def _enc_uint(out: bytearray, value: Any) -> None:
    if value == 0:
        out.append(0x43)
    elif value < 256:
        out += b"\x52" + _pack_B(value)
    else:
        out += b"\x70" + _pack_I(value)


def _enc_ulong(out: bytearray, value: Any) -> None:
    if value == 0:
        out.append(0x44)
    elif value < 256:
        out += b"\x53" + _pack_B(value)
    else:
        out += b"\x80" + _pack_Q(value)


def _enc_byte(out: bytearray, value: Any) -> None:
    out += b"\x51" + _pack_b(value)


def _enc_short(out: bytearray, value: Any) -> None:
    out += b"\x61" + _pack_h(value)


def _enc_int(out: bytearray, value: Any) -> None:
    if -128 <= value <= 127:
        out += b"\x54" + _pack_b(value)
    else:
        out += b"\x71" + _pack_i(value)


def _enc_long(out: bytearray, value: Any) -> None:
    if -128 <= value <= 127:
        out += b"\x55" + _pack_b(value)
    elif Long.MIN <= value <= Long.MAX:
        out += b"\x81" + _pack_q(value)
    else:
        raise EncodeError(f"integer out of range for long: {value}")


def _enc_float(out: bytearray, value: Any) -> None:
    out += b"\x72" + _pack_f(value)


def _enc_double(out: bytearray, value: Any) -> None:
    out += b"\x82" + _pack_d(value)


def _enc_decimal32(out: bytearray, value: Any) -> None:
    out += b"\x74" + _pack_I(value)


def _enc_decimal64(out: bytearray, value: Any) -> None:
    out += b"\x84" + _pack_Q(value)


def _enc_decimal128(out: bytearray, value: Any) -> None:
    out += b"\x94" + bytes(value)


def _enc_char(out: bytearray, value: Any) -> None:
    out += b"\x73" + _pack_I(ord(value))


def _enc_timestamp(out: bytearray, value: Any) -> None:
    out += b"\x83" + _pack_q(value)


def _enc_uuid(out: bytearray, value: Any) -> None:
    out += b"\x98" + value.bytes


def _variable(out: bytearray, code8: int, data: bytes | bytearray | memoryview) -> None:
    n = len(data)
    if n < 256:
        out += _pack_BB(code8, n)
    elif n <= 0xFFFFFFFF:
        out += _pack_BI(code8 + 0x10, n)
    else:
        raise EncodeError("variable-width value longer than 2**32-1 bytes")
    out += data


def _enc_binary(out: bytearray, value: Any) -> None:
    _variable(out, 0xA0, value)


def utf8_bytes(value: str) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EncodeError(f"string is not valid Unicode: {exc.reason}") from exc


def _enc_string(out: bytearray, value: Any) -> None:
    _variable(out, 0xA1, utf8_bytes(value))


def _enc_symbol(out: bytearray, value: Any) -> None:
    _variable(out, 0xA3, value.encode("ascii"))


SCALAR_ENCODERS: dict[type, Encoder] = {
    type(None): _enc_null,
    bool: _enc_bool,
    UByte: _enc_ubyte,
    UShort: _enc_ushort,
    UInt: _enc_uint,
    ULong: _enc_ulong,
    Byte: _enc_byte,
    Short: _enc_short,
    Int: _enc_int,
    Long: _enc_long,
    int: _enc_long,
    Float: _enc_float,
    float: _enc_double,
    Decimal32: _enc_decimal32,
    Decimal64: _enc_decimal64,
    Decimal128: _enc_decimal128,
    Char: _enc_char,
    Timestamp: _enc_timestamp,
    uuid.UUID: _enc_uuid,
    bytes: _enc_binary,
    bytearray: _enc_binary,
    memoryview: _enc_binary,
    str: _enc_string,
    Symbol: _enc_symbol,
}
