"""Hypothesis strategies for AMQP 1.0 values of every primitive type (types §1.6), plus the
comparison helper the codec tests share.

Every strategy yields values in their *canonical* Python form, i.e. the form our decoder returns
(UInt for uint, Long for long, float for double, bytes for binary ...), so that a round trip can
be checked with `assert_same`, which compares AMQP types as well as values.
Edge values are mixed in explicitly because they select different encodings: uint 0 is uint0
(0x43), 1..255 smalluint (0x52), 256.. uint (0x70); strings and binaries switch from the 8-bit
to the 32-bit size form at 256 bytes (types §1.6.19-§1.6.21); lists and maps switch from the
8-bit to the 32-bit form when their body or count no longer fits in one octet (types §1.6.22,
§1.6.23).
"""

from __future__ import annotations

import dataclasses
import math
import struct
import uuid
from typing import Any

from hypothesis import strategies as st

from router.amqp.types import (
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

# --- scalars ------------------------------------------------------------------------------------


def _ints(cls: Any) -> st.SearchStrategy[Any]:
    """The full range of a bounded integer type, with the values that change encodings."""
    lo, hi = cls.MIN, cls.MAX
    edges = {lo, hi, 0, 1, hi - 1, lo + 1}
    edges |= {v for v in (-129, -128, -1, 127, 128, 255, 256, 0xFFFF, 0x10000) if lo <= v <= hi}
    return st.one_of(st.sampled_from(sorted(edges)), st.integers(lo, hi)).map(cls)


nulls = st.none()
booleans = st.booleans()
ubytes = _ints(UByte)
ushorts = _ints(UShort)
uints = _ints(UInt)
ulongs = _ints(ULong)
bytes_ = _ints(Byte)
shorts = _ints(Short)
ints = _ints(Int)
longs = _ints(Long)
timestamps = _ints(Timestamp)
decimal32s = _ints(Decimal32)
decimal64s = _ints(Decimal64)
decimal128s = st.binary(min_size=16, max_size=16).map(Decimal128)

_FLOAT32_MAX = struct.unpack(">f", b"\x7f\x7f\xff\xff")[0]
_FLOAT32_TINY = struct.unpack(">f", b"\x00\x00\x00\x01")[0]  # smallest subnormal
floats = st.one_of(
    st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, _FLOAT32_MAX, -_FLOAT32_MAX,
                     _FLOAT32_TINY, 1.5]),
    st.floats(width=32, allow_nan=True, allow_infinity=True),
).map(Float)  # fmt: skip
doubles = st.one_of(
    st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, 1.7976931348623157e308,
                     5e-324, -2.5]),
    st.floats(allow_nan=True, allow_infinity=True),
)  # fmt: skip

# Unicode scalar values only: surrogates are not characters (types §1.6.16, UTF-32BE).
_code_points = st.characters(codec="utf-8")  # every code point but the surrogates
chars = st.one_of(
    st.sampled_from(["\x00", "a", "\x7f", "\x80", "\ud7ff", "\ue000", "\uffff", "\U00010000",
                     "\U0001f600", "\U0010ffff"]),
    _code_points,
).map(Char)  # fmt: skip
uuids = st.one_of(
    st.sampled_from([uuid.UUID(int=0), uuid.UUID(int=2**128 - 1)]), st.uuids()
)


def _sized(unit: str, alphabet: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """Text around the str8/str32 (sym8/sym32) boundary: 255 and 256 encoded bytes."""
    short = st.text(alphabet, max_size=40)
    exact = st.sampled_from([0, 1, 255, 256, 300, 70000]).map(lambda n: unit * n)
    return st.one_of(short, exact)


binaries = st.one_of(
    st.binary(max_size=64),
    st.sampled_from([0, 1, 255, 256, 300, 70000]).map(lambda n: bytes(range(256)) * (n // 256)
                                                      + bytes(n % 256)),
)  # fmt: skip
strings = st.one_of(
    _sized("a", _code_points),
    # two-byte UTF-8 code points: 128 of them make exactly 256 encoded bytes
    st.sampled_from([127, 128]).map(lambda n: "\u00e9" * n),
    st.sampled_from([63, 64]).map(lambda n: "\U0001f600" * n),
)
symbols = _sized("s", st.characters(max_codepoint=0x7F)).map(Symbol)

SCALARS: dict[str, st.SearchStrategy[Any]] = {
    "null": nulls,
    "boolean": booleans,
    "ubyte": ubytes,
    "ushort": ushorts,
    "uint": uints,
    "ulong": ulongs,
    "byte": bytes_,
    "short": shorts,
    "int": ints,
    "long": longs,
    "float": floats,
    "double": doubles,
    "decimal32": decimal32s,
    "decimal64": decimal64s,
    "decimal128": decimal128s,
    "char": chars,
    "timestamp": timestamps,
    "uuid": uuids,
    "binary": binaries,
    "string": strings,
    "symbol": symbols,
}

scalars = st.one_of(*SCALARS.values())

# Map keys must be hashable in Python. NaN is left out because NaN != NaN makes a dict with a NaN
# key impossible to compare by lookup.
hashable_scalars = st.one_of(
    *(s for name, s in SCALARS.items() if name not in ("float", "double")),
    st.floats(allow_nan=False),
    st.floats(width=32, allow_nan=False).map(Float),
)

# --- described values ---------------------------------------------------------------------------

# Descriptors outside the AMQP domain (types §1.5: domain 0x00000000 and "amqp:" symbols are
# reserved), so the decoder's registered composite types (open, source, header ...) never
# swallow a generated value.
descriptors = st.one_of(
    st.integers(0x0000_0001_0000_0000, ULong.MAX).map(ULong),
    st.text(st.characters(max_codepoint=0x7F), max_size=20).map(lambda s: Symbol("test:" + s)),
)


# --- compound values ----------------------------------------------------------------------------


def _array_elements(children: st.SearchStrategy[Any]) -> dict[str, st.SearchStrategy[Any]]:
    """Element strategies by array element type (types §1.6.24)."""
    elements = dict(SCALARS)
    elements["list"] = st.lists(children, max_size=4)
    elements["map"] = st.dictionaries(hashable_scalars, children, max_size=3)
    return elements


def arrays_of(
    element_type: str,
    children: st.SearchStrategy[Any] = scalars,
    max_size: int = 6,
) -> st.SearchStrategy[Array]:
    """Arrays of one element type, sometimes described."""
    if element_type == "array":
        # Inner arrays may each have their own element type: every element of an array of
        # arrays is a full array body with its own element constructor.
        inner = st.sampled_from(("uint", "string", "list", "null", "symbol")).flatmap(
            lambda t: arrays_of(t, children, 3)
        )
        elements: st.SearchStrategy[list[Any]] = st.lists(inner, max_size=3)
    else:
        elements = st.lists(_array_elements(children)[element_type], max_size=max_size)
    return st.builds(Array, st.just(element_type), elements, st.one_of(st.none(), descriptors))


ELEMENT_TYPES = tuple(SCALARS) + ("list", "map", "array")

arrays = st.sampled_from(ELEMENT_TYPES).flatmap(arrays_of)

# Arrays whose encoding needs array32 (types §1.6.24): more than 255 elements or bytes.
big_arrays = st.one_of(
    st.integers(256, 400).map(lambda n: Array("ulong", [ULong(i) for i in range(n)])),
    st.integers(256, 300).map(lambda n: Array("null", [None] * n)),
    st.just(Array("string", ["x" * 300, "y"])),  # one element forces the str32 constructor
    st.just(Array("symbol", [Symbol("z" * 256)], Symbol("test:big"))),
)

# Lists and maps that need list32/map32: many items, or few items with a large body.
big_compounds = st.one_of(
    st.integers(255, 400).map(lambda n: [None] * n),
    st.integers(0, 3).map(lambda k: ["x" * 300] * k),
    st.integers(128, 200).map(lambda n: {Long(i): None for i in range(n)}),
    st.just({Symbol("k"): b"\x01" * 300}),
)


def _extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(hashable_scalars, children, max_size=4),
        st.sampled_from(ELEMENT_TYPES).flatmap(lambda t: arrays_of(t, children, 4)),
        st.builds(Described, descriptors, children),
    )


# Any AMQP value: scalars, nested lists/maps/arrays/described values, and the big encodings.
values = st.recursive(
    st.one_of(scalars, big_compounds, big_arrays), _extend, max_leaves=12
)


# --- comparison ---------------------------------------------------------------------------------


def canonical_type(value: Any) -> type:
    """The class our decoder produces for `value`'s AMQP type (plain int is long ...)."""
    kind = type(value)
    return {int: Long, tuple: list, bytearray: bytes}.get(kind, kind)


def same(expected: Any, actual: Any) -> bool:
    """Equal values of the same AMQP type, recursively; NaN equals NaN, and -0.0 differs from
    0.0 (the sign bit is part of an IEEE 754 value)."""
    if canonical_type(expected) is not canonical_type(actual):
        return False
    if isinstance(expected, float):
        if math.isnan(expected):
            return math.isnan(actual)
        return expected == actual and math.copysign(1, expected) == math.copysign(1, actual)
    if isinstance(expected, (list, tuple)):
        return len(expected) == len(actual) and all(map(same, expected, actual))
    if isinstance(expected, dict):
        # Order is kept on the wire and by both codecs, so compare entry by entry.
        return len(expected) == len(actual) and all(
            same(k1, k2) and same(v1, v2)
            for (k1, v1), (k2, v2) in zip(expected.items(), actual.items())
        )
    if isinstance(expected, Array):
        return (
            expected.element_type == actual.element_type
            and same(expected.descriptor, actual.descriptor)
            and same(list(expected.elements), list(actual.elements))
        )
    if isinstance(expected, Described):
        return same(expected.descriptor, actual.descriptor) and same(expected.value, actual.value)
    if dataclasses.is_dataclass(expected):  # performatives, sections, delivery states ...
        return all(
            same(getattr(expected, f.name), getattr(actual, f.name))
            for f in dataclasses.fields(expected)
        )
    return bool(expected == actual)


def assert_same(expected: Any, actual: Any) -> None:
    assert same(expected, actual), f"expected {expected!r}, got {actual!r}"

