"""AMQP 1.0 encoder for every type (types §1.6) and described values.

Owns: turning Python/AMQP values into bytes: the type -> encoder table and its dispatch
(`encode_value`), lists, maps, described values and arrays (one shared constructor), each in its
smallest encoding. Scalars are encode_scalars.py's. Composite types (performatives, sections)
register their own encoder here with `register_encoder`.
This is the general path used for control frames; transfers, flows and dispositions have a
hand-written path in fastparse.py and fastparse_fields.py (reading) and fastpath.py (writing).
Must not touch: decoding, framing.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

from .encode_scalars import SCALAR_ENCODERS, Encoder, utf8_bytes
from .errors import EncodeError
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

_pack_B = struct.Struct(">B").pack
_pack_I = struct.Struct(">I").pack
_pack_II = struct.Struct(">II").pack
_pack_BB = struct.Struct(">BB").pack


def _compound(out: bytearray, code8: int, count: int, body: bytearray) -> None:
    # list8/map8 size counts the count byte; list32/map32 the 4-byte count (types §1.2).
    if len(body) + 1 < 256 and count < 256:
        out += _pack_BB(code8, len(body) + 1)
        out.append(count)
    else:
        out.append(code8 + 0x10)
        out += _pack_II(len(body) + 4, count)
    out += body


def _enc_list(out: bytearray, value: Any) -> None:
    if not value:
        out.append(0x45)
        return
    body = bytearray()
    for item in value:
        encode_value(body, item)
    _compound(out, 0xC0, len(value), body)


def _enc_map(out: bytearray, value: Any) -> None:
    body = bytearray()
    for key, item in value.items():
        encode_value(body, key)
        encode_value(body, item)
    _compound(out, 0xC1, 2 * len(value), body)


def _enc_described(out: bytearray, value: Any) -> None:
    out.append(0x00)
    encode_value(out, value.descriptor)
    encode_value(out, value.value)


_ENCODERS: dict[type, Encoder] = {
    **SCALAR_ENCODERS,
    list: _enc_list,
    tuple: _enc_list,
    dict: _enc_map,
    Described: _enc_described,
}

# Base classes tried (in order) for subclasses of the types above, e.g. a user's str subclass.
_FALLBACK_BASES: tuple[type, ...] = (
    bool, UByte, UShort, UInt, ULong, Byte, Short, Int, Long, Timestamp, Decimal32, Decimal64,
    int, Float, float, Decimal128, bytes, bytearray, Char, Symbol, str, list, tuple, dict,
    uuid.UUID,
)  # fmt: skip


def register_encoder(cls: type, encoder: Encoder) -> None:
    """Teach the encoder a new (composite) type; used by composite.py."""
    _ENCODERS[cls] = encoder


def encode_value(out: bytearray, value: Any) -> None:
    """Append the AMQP encoding of `value` to `out`."""
    encoder = _ENCODERS.get(type(value))
    if encoder is None:
        if isinstance(value, Array):
            _enc_array(out, value)
            return
        for base in _FALLBACK_BASES:
            if isinstance(value, base):
                encoder = _ENCODERS[base]
                _ENCODERS[type(value)] = encoder
                break
        else:
            raise EncodeError(f"cannot encode {type(value).__name__} as AMQP")
    encoder(out, value)


def encode(value: Any) -> bytes:
    """The AMQP encoding of `value` as bytes."""
    out = bytearray()
    encode_value(out, value)
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# Arrays (types §1.6.24): one constructor, then element bodies without constructors.


def _element_of(element_type: str, kinds: type | tuple[type, ...]) -> Callable[[Any], Any]:
    """A check that an array element is of the Python kind its element type needs: without it
    bytes(5) would write five zero octets and float("1.5") a number for a string."""

    def check(value: Any) -> Any:
        # bool is an int: only a boolean array takes True/False, and it takes nothing else.
        wrong_bool = isinstance(value, bool) != (kinds is bool)
        if wrong_bool or not isinstance(value, kinds):
            raise EncodeError(f"{element_type} array element cannot be {type(value).__name__}")
        return value

    return check


_check_bool = _element_of("boolean", bool)
_check_double = _element_of("double", (int, float))
_check_binary = _element_of("binary", (bytes, bytearray, memoryview))
_check_string = _element_of("string", str)


def _double_element(value: Any) -> float:
    try:
        return float(_check_double(value))
    except OverflowError:
        raise EncodeError(f"double out of range: {value!r}") from None


# element type -> (constructor code, struct format, wrapper that validates type and range)
_FIXED_ELEMENTS: dict[str, tuple[int, struct.Struct, Callable[[Any], Any]]] = {
    "boolean": (0x56, struct.Struct(">B"), lambda v: 1 if _check_bool(v) else 0),
    "ubyte": (0x50, struct.Struct(">B"), UByte),
    "ushort": (0x60, struct.Struct(">H"), UShort),
    "uint": (0x70, struct.Struct(">I"), UInt),
    "ulong": (0x80, struct.Struct(">Q"), ULong),
    "byte": (0x51, struct.Struct(">b"), Byte),
    "short": (0x61, struct.Struct(">h"), Short),
    "int": (0x71, struct.Struct(">i"), Int),
    "long": (0x81, struct.Struct(">q"), Long),
    "float": (0x72, struct.Struct(">f"), Float),
    "double": (0x82, struct.Struct(">d"), _double_element),
    "decimal32": (0x74, struct.Struct(">I"), Decimal32),
    "decimal64": (0x84, struct.Struct(">Q"), Decimal64),
    "char": (0x73, struct.Struct(">I"), lambda v: ord(Char(v))),
    "timestamp": (0x83, struct.Struct(">q"), Timestamp),
}

_VARIABLE_ELEMENTS: dict[str, tuple[int, Callable[[Any], bytes]]] = {
    "binary": (0xA0, lambda v: bytes(_check_binary(v))),
    "string": (0xA1, lambda v: utf8_bytes(_check_string(v))),
    "symbol": (0xA3, lambda v: Symbol(v).encode("ascii")),
}


def _array_body(element_type: str, elements: tuple[Any, ...]) -> tuple[bytes, bytearray]:
    """(constructor, concatenated element bodies) for an array's elements."""
    body = bytearray()
    if element_type == "null":
        if any(item is not None for item in elements):
            raise EncodeError("null array elements must be None")
        return b"\x40", body
    fixed = _FIXED_ELEMENTS.get(element_type)
    if fixed is not None:
        code, fmt, check = fixed
        for item in elements:
            body += fmt.pack(check(item))
        return bytes([code]), body
    if element_type == "uuid":
        for item in elements:
            if not isinstance(item, uuid.UUID):
                raise EncodeError("uuid array element must be a uuid.UUID")
            body += item.bytes
        return b"\x98", body
    if element_type == "decimal128":
        for item in elements:
            body += Decimal128(item)
        return b"\x94", body
    variable = _VARIABLE_ELEMENTS.get(element_type)
    if variable is not None:
        code, to_bytes = variable
        datas = [to_bytes(item) for item in elements]
        wide = any(len(d) > 255 for d in datas)
        for data in datas:
            body += _pack_I(len(data)) if wide else _pack_B(len(data))
            body += data
        return bytes([code + 0x10 if wide else code]), body
    # Compound elements (list, map, array) are always written in their 32-bit form.
    for item in elements:
        encoded = bytearray()
        if element_type == "list":
            if not isinstance(item, (list, tuple)):
                raise EncodeError("list array element must be a list")
            _enc_list(encoded, item)
        elif element_type == "map":
            if not isinstance(item, dict):
                raise EncodeError("map array element must be a dict")
            _enc_map(encoded, item)
        else:
            if not isinstance(item, Array):
                raise EncodeError("array array element must be an Array")
            _enc_array(body, item, wide=True)  # already the 32-bit body, no constructor
            continue
        body += _widen_compound(encoded)
    code = {"list": 0xD0, "map": 0xD1, "array": 0xF0}[element_type]
    return bytes([code]), body


def _widen_compound(encoded: bytearray) -> bytes:
    """The 32-bit body (size, count, items) of an encoded list/map, without its constructor."""
    code = encoded[0]
    if code == 0x45:
        return _pack_II(4, 0)
    if code in (0xC0, 0xC1):
        size, count = encoded[1], encoded[2]
        return _pack_II(size + 3, count) + bytes(encoded[3:])
    return bytes(encoded[1:])


def _enc_array(out: bytearray, value: Array, wide: bool = False) -> None:
    constructor, body = _array_body(value.element_type, value.elements)
    if value.descriptor is not None:
        described = bytearray(b"\x00")
        encode_value(described, value.descriptor)
        constructor = bytes(described) + constructor
    count = len(value.elements)
    payload_len = len(constructor) + len(body)
    if not wide and payload_len + 1 < 256 and count < 256:
        out += _pack_BB(0xE0, payload_len + 1)
        out.append(count)
    else:
        if not wide:
            out.append(0xF0)
        out += _pack_II(payload_len + 4, count)
    out += constructor
    out += body
