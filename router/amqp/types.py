"""Typed AMQP 1.0 values (types §1.6) with full-range validation.

Owns: the Python representation of every AMQP primitive type. Plain Python values map to the
obvious AMQP type (None->null, bool->boolean, int->long, float->double, str->string,
bytes->binary, list->list, dict->map, uuid.UUID->uuid); the classes here name the other types.
Integer and float wrappers subclass int/float so they behave as numbers and keep their AMQP type
through a decode/encode round trip. Constructing a value out of range raises EncodeError
(`UByte(300)` fails).
Must not touch: byte encodings (codec.py), composite types (composite.py).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable
from typing import Any, ClassVar, Final

from .errors import EncodeError


class _BoundedInt(int):
    """An int restricted to [MIN, MAX]; subclasses name the AMQP type."""

    MIN: ClassVar[int] = 0
    MAX: ClassVar[int] = 0
    AMQP_NAME: ClassVar[str] = ""

    def __new__(cls, value: int = 0) -> Any:
        if isinstance(value, bool) or not isinstance(value, int):
            raise EncodeError(f"{cls.AMQP_NAME} needs an int, got {type(value).__name__}")
        if not cls.MIN <= value <= cls.MAX:
            raise EncodeError(f"{cls.AMQP_NAME} out of range [{cls.MIN}, {cls.MAX}]: {value}")
        return super().__new__(cls, value)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({int(self)})"


class UByte(_BoundedInt):
    MIN, MAX, AMQP_NAME = 0, 0xFF, "ubyte"


class UShort(_BoundedInt):
    MIN, MAX, AMQP_NAME = 0, 0xFFFF, "ushort"


class UInt(_BoundedInt):
    MIN, MAX, AMQP_NAME = 0, 0xFFFFFFFF, "uint"


class ULong(_BoundedInt):
    MIN, MAX, AMQP_NAME = 0, 0xFFFFFFFFFFFFFFFF, "ulong"


class Byte(_BoundedInt):
    MIN, MAX, AMQP_NAME = -0x80, 0x7F, "byte"


class Short(_BoundedInt):
    MIN, MAX, AMQP_NAME = -0x8000, 0x7FFF, "short"


class Int(_BoundedInt):
    MIN, MAX, AMQP_NAME = -0x80000000, 0x7FFFFFFF, "int"


class Long(_BoundedInt):
    MIN, MAX, AMQP_NAME = -0x8000000000000000, 0x7FFFFFFFFFFFFFFF, "long"


class Timestamp(_BoundedInt):
    """Milliseconds since the Unix epoch, signed 64 bits (types §1.6.17)."""

    MIN, MAX, AMQP_NAME = -0x8000000000000000, 0x7FFFFFFFFFFFFFFF, "timestamp"


class Decimal32(_BoundedInt):
    """IEEE 754-2008 decimal32 kept as its raw 32 bits (no decimal arithmetic is needed)."""

    MIN, MAX, AMQP_NAME = 0, 0xFFFFFFFF, "decimal32"


class Decimal64(_BoundedInt):
    """IEEE 754-2008 decimal64 kept as its raw 64 bits."""

    MIN, MAX, AMQP_NAME = 0, 0xFFFFFFFFFFFFFFFF, "decimal64"


class Decimal128(bytes):
    """IEEE 754-2008 decimal128 kept as its raw 16 bytes."""

    def __new__(cls, value: bytes = b"\x00" * 16) -> Decimal128:
        if not isinstance(value, (bytes, bytearray)) or len(value) != 16:
            raise EncodeError("decimal128 needs exactly 16 bytes")
        return super().__new__(cls, value)

    def __repr__(self) -> str:
        return f"Decimal128({bytes(self)!r})"


class Float(float):
    """IEEE 754 binary32 (types §1.6.11). The value is rounded to float32 on construction."""

    def __new__(cls, value: float = 0.0) -> Float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise EncodeError(f"float needs a number, got {type(value).__name__}")
        try:
            rounded: float = struct.unpack("<f", struct.pack("<f", value))[0]
        except (OverflowError, struct.error) as exc:
            raise EncodeError(f"float out of range for binary32: {value!r}") from exc
        return super().__new__(cls, rounded)

    def __repr__(self) -> str:
        return f"Float({float(self)!r})"


class Char(str):
    """A single Unicode code point, encoded as UTF-32BE (types §1.6.16)."""

    def __new__(cls, value: str) -> Char:
        if not isinstance(value, str) or len(value) != 1:
            raise EncodeError("char needs a string of exactly one code point")
        if 0xD800 <= ord(value) <= 0xDFFF:
            raise EncodeError(f"char cannot be a surrogate: U+{ord(value):04X}")
        return super().__new__(cls, value)

    def __repr__(self) -> str:
        return f"Char({str(self)!r})"


class Symbol(str):
    """An ASCII symbolic value (types §1.6.21): capabilities, conditions, annotation keys."""

    def __new__(cls, value: str) -> Symbol:
        if not isinstance(value, str) or not value.isascii():
            raise EncodeError(f"symbol must be ASCII text: {value!r}")
        return super().__new__(cls, value)

    def __repr__(self) -> str:
        return f"Symbol({str(self)!r})"


# Names of the AMQP primitive types, used as array element types (types §1.6.24).
PRIMITIVE_TYPES: Final = (
    "null", "boolean", "ubyte", "ushort", "uint", "ulong", "byte", "short", "int", "long",
    "float", "double", "decimal32", "decimal64", "decimal128", "char", "timestamp", "uuid",
    "binary", "string", "symbol", "list", "map", "array",
)  # fmt: skip


class Array:
    """A homogeneous AMQP array (types §1.6.24): one element type, optionally described.

    `element_type` is one of PRIMITIVE_TYPES; with a `descriptor` every element is an instance of
    the described type whose undescribed value is given in `elements` (as Proton does).
    """

    __slots__ = ("element_type", "elements", "descriptor")

    def __init__(
        self, element_type: str, elements: Iterable[Any] = (), descriptor: Any = None
    ) -> None:
        # Any element type may be described, null included (Proton writes such arrays).
        if element_type not in PRIMITIVE_TYPES:
            raise EncodeError(f"unknown array element type: {element_type!r}")
        self.element_type = element_type
        self.elements = tuple(elements)
        self.descriptor = descriptor

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Array)
            and self.element_type == other.element_type
            and self.descriptor == other.descriptor
            and self.elements == other.elements
        )

    def __hash__(self) -> int:
        return hash((self.element_type, self.elements))

    def __repr__(self) -> str:
        described = f", descriptor={self.descriptor!r}" if self.descriptor is not None else ""
        return f"Array({self.element_type!r}, {list(self.elements)!r}{described})"


class Described:
    """A described value whose descriptor no composite type here is registered for."""

    __slots__ = ("descriptor", "value")

    def __init__(self, descriptor: Any, value: Any) -> None:
        self.descriptor = descriptor
        self.value = value

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Described)
            and self.descriptor == other.descriptor
            and self.value == other.value
        )

    def __hash__(self) -> int:
        return hash(self.descriptor)

    def __repr__(self) -> str:
        return f"Described({self.descriptor!r}, {self.value!r})"


def amqp_type_name(value: Any) -> str:
    """The AMQP type a Python value encodes as (used for arrays and error messages)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, _BoundedInt):
        return value.AMQP_NAME
    if isinstance(value, int):
        return "long"
    if isinstance(value, Float):
        return "float"
    if isinstance(value, float):
        return "double"
    if isinstance(value, Decimal128):
        return "decimal128"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "binary"
    if isinstance(value, Char):
        return "char"
    if isinstance(value, Symbol):
        return "symbol"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, dict):
        return "map"
    if isinstance(value, Array):
        return "array"
    if isinstance(value, uuid.UUID):
        return "uuid"
    raise EncodeError(f"no AMQP type for {type(value).__name__}")
