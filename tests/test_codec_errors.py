"""The codec's failure behaviour: range validation when encoding, and hostile input when decoding.

Bytes come from the peer, so decoding is a security boundary: whatever arrives, `decode`,
`decode_at` and `skip_value` either succeed or raise DecodeError (condition amqp:decode-error),
never IndexError, struct.error, RecursionError, MemoryError, UnicodeError or anything else, and
never spend memory or time out of proportion to the input. Values that cannot be encoded are the
local program's mistake and raise EncodeError.
"""

from __future__ import annotations

import struct
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

# Importing these registers the composite types, so fuzzing reaches their field validation too.
from router.amqp import messaging, performatives
from router.amqp.decode import MAX_DEPTH, MAX_ZERO_WIDTH_COUNT, decode, decode_at
from router.amqp.sections import skip_value
from router.amqp.encode import encode
from router.amqp.errors import DECODE_ERROR, DecodeError, EncodeError
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

from .strategies import assert_same, values

# --- encoding: range and type validation ----------------------------------------------------------

OUT_OF_RANGE: list[tuple[str, Callable[[], Any]]] = [
    ("ubyte 300", lambda: UByte(300)),
    ("ubyte -1", lambda: UByte(-1)),
    ("ushort 2**16", lambda: UShort(0x10000)),
    ("uint -1", lambda: UInt(-1)),
    ("uint 2**32", lambda: UInt(2**32)),
    ("ulong -1", lambda: ULong(-1)),
    ("ulong 2**64", lambda: ULong(2**64)),
    ("byte 128", lambda: Byte(128)),
    ("byte -129", lambda: Byte(-129)),
    ("short 2**15", lambda: Short(0x8000)),
    ("int 2**31", lambda: Int(2**31)),
    ("int -2**31-1", lambda: Int(-(2**31) - 1)),
    ("long 2**63", lambda: Long(2**63)),
    ("timestamp -2**63-1", lambda: Timestamp(-(2**63) - 1)),
    ("decimal32 2**32", lambda: Decimal32(2**32)),
    ("decimal64 -1", lambda: Decimal64(-1)),
    ("uint from bool", lambda: UInt(True)),  # bool is an int in Python, not in AMQP
    ("uint from float", lambda: UInt(1.0)),  # type: ignore[arg-type]
    ("non-ASCII symbol", lambda: Symbol("\u00e9")),  # types §1.6.21: ASCII only
    ("two-char char", lambda: Char("ab")),  # types §1.6.16: one code point
    ("empty char", lambda: Char("")),
    ("surrogate char", lambda: Char("\ud800")),
    ("float 1e300", lambda: Float(1e300)),  # beyond binary32 (types §1.6.11)
    ("float -1e300", lambda: Float(-1e300)),
    ("float from str", lambda: Float("1.5")),  # type: ignore[arg-type]
    ("decimal128 of 1 byte", lambda: Decimal128(b"x")),
    ("decimal128 of 17 bytes", lambda: Decimal128(b"\x00" * 17)),
    ("unknown array type", lambda: Array("described", [])),
]


@pytest.mark.parametrize("make", [m for _, m in OUT_OF_RANGE], ids=[n for n, _ in OUT_OF_RANGE])
def test_out_of_range_values_cannot_be_made(make: Callable[[], Any]) -> None:
    with pytest.raises(EncodeError):
        make()


def test_range_edges_are_accepted() -> None:
    for cls in (UByte, UShort, UInt, ULong, Byte, Short, Int, Long, Timestamp, Decimal32):
        assert decode(encode(cls(cls.MIN))) == cls.MIN
        assert decode(encode(cls(cls.MAX))) == cls.MAX
    assert Float(3.4028234663852886e38) == 3.4028234663852886e38  # the largest binary32


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 2**64, -(2**200)])
def test_plain_int_beyond_long_fails_to_encode(value: int) -> None:
    # A plain int is a long (types §1.6.10); silently wrapping it would change the value.
    with pytest.raises(EncodeError):
        encode(value)
    with pytest.raises(EncodeError):
        encode([1, value])


def test_plain_int_at_long_edges_encodes() -> None:
    assert decode(encode(2**63 - 1)) == 2**63 - 1
    assert decode(encode(-(2**63))) == -(2**63)


BAD_VALUES: list[tuple[str, Any]] = [
    ("lone surrogate string", "\ud800"),
    ("object", object()),
    ("complex", 1j),
    ("set", {1}),
    ("object inside a list", [1, object()]),
    ("object inside a described value", Described(ULong(1), object())),
    ("null array with a value", Array("null", [1])),
    ("boolean array with an int", Array("boolean", [1])),
    ("boolean array with a str", Array("boolean", ["no"])),
    ("ubyte array with 256", Array("ubyte", [256])),
    ("uint array with a float", Array("uint", [1.0])),
    ("long array with a bool", Array("long", [True])),
    ("float array with 1e300", Array("float", [1e300])),
    ("double array with a str", Array("double", ["1.5"])),
    ("double array with a bool", Array("double", [True])),
    ("double array with a huge int", Array("double", [10**400])),
    ("binary array with an int", Array("binary", [5])),  # bytes(5) would be five zero octets
    ("binary array with a str", Array("binary", ["s"])),
    ("string array with bytes", Array("string", [b"x"])),
    ("string array with an int", Array("string", [5])),
    ("string array with a surrogate", Array("string", ["\ud800"])),
    ("symbol array with non-ASCII", Array("symbol", ["\u00e9"])),
    ("char array with two chars", Array("char", ["ab"])),
    ("uuid array with a str", Array("uuid", ["x"])),
    ("decimal128 array with 1 byte", Array("decimal128", [b"x"])),
    ("list array with an int", Array("list", [5])),
    ("map array with a list", Array("map", [[]])),
    ("array array with a list", Array("array", [[]])),
]


@pytest.mark.parametrize("value", [v for _, v in BAD_VALUES], ids=[n for n, _ in BAD_VALUES])
def test_values_of_no_amqp_type_raise_encode_error(value: Any) -> None:
    with pytest.raises(EncodeError):
        encode(value)


def test_array_elements_of_the_right_kind_encode() -> None:
    # The element checks must not refuse the ordinary Python forms of each element type.
    cases = [
        Array("boolean", [True, False]),
        Array("double", [1, 2.5]),  # an int is a number
        Array("binary", [b"a", bytearray(b"b")]),
        Array("string", ["x", Symbol("y")]),
        Array("null", [None, None]),
    ]
    for value in cases:
        decoded = decode(encode(value))
        assert decoded.element_type == value.element_type
        assert len(decoded.elements) == len(value.elements)
    assert decode(encode(Array("binary", [memoryview(b"m")]))).elements == (b"m",)


# --- decoding: truncation -------------------------------------------------------------------------


def _cuts(n: int) -> list[int]:
    """Prefix lengths to try: all of them for short encodings, both ends of long ones."""
    if n <= 600:
        return list(range(n))
    return [*range(300), *range(n // 2 - 5, n // 2 + 5), *range(n - 300, n)]


@given(values)
def test_every_strict_prefix_is_refused(value: Any) -> None:
    data = encode(value)
    for cut in _cuts(len(data)):
        with pytest.raises(DecodeError):
            decode(data[:cut])
        # With the rest of the bytes still in the buffer, `end` alone must stop every read.
        with pytest.raises(DecodeError):
            decode_at(data, 0, cut)
        with pytest.raises(DecodeError):
            skip_value(data, 0, cut)


def test_empty_input_and_trailing_bytes_are_refused() -> None:
    with pytest.raises(DecodeError):
        decode(b"")
    with pytest.raises(DecodeError):
        decode(b"\x40\x40")  # decode() takes exactly one value
    assert decode_at(b"\x40\x40", 0, 2) == (None, 1)


def test_decode_error_carries_the_decode_error_condition() -> None:
    with pytest.raises(DecodeError) as info:
        decode(b"\xff")
    assert info.value.condition == DECODE_ERROR == "amqp:decode-error"


# --- decoding: fuzzing ----------------------------------------------------------------------------


def _fixed_point(data: bytes) -> None:
    """Decode arbitrary bytes: either DecodeError, or a value that skip_value agrees ends where
    decode_at says, and whose re-encoding is stable (decode . encode is the identity on it)."""
    try:
        value, stop = decode_at(data, 0, len(data))
    except DecodeError:
        try:
            skip_value(data, 0, len(data))
        except DecodeError:
            pass
        return
    assert skip_value(data, 0, len(data)) == stop
    canonical = encode(value)
    assert encode(decode(canonical)) == canonical


def _decodes_or_refuses(data: bytes) -> None:
    try:
        decode(data)
    except DecodeError:
        pass
    _fixed_point(data)


# Encodings of composite types too, so that mutations also reach the field validation of
# performatives and messaging types.
SAMPLES: list[bytes] = [
    encode(performatives.Open(container_id="c", properties={Symbol("k"): 1})),
    encode(performatives.Attach(
        name="l", handle=1, role=True, source=messaging.Source(address="a", outcomes=("x",)),
        target=messaging.Target(address="b"), offered_capabilities=("cap",),
    )),
    encode(performatives.Transfer(handle=0, delivery_id=1, delivery_tag=b"t",
                                  state=messaging.Received(section_number=1, section_offset=2))),
    encode(performatives.Flow(incoming_window=1, next_outgoing_id=2, outgoing_window=3,
                              properties={Symbol("p"): Array("uint", [UInt(1)])})),
    encode(performatives.Detach(handle=1, error=performatives.Error(
        condition="amqp:x", info={Symbol("i"): "v"}))),
    encode(messaging.Properties(message_id=ULong(1), to="q", creation_time=5)),
    encode(messaging.MessageAnnotations(value={Symbol("x-opt"): 1})),
    encode(messaging.Modified(delivery_failed=True, message_annotations={Symbol("a"): None})),
    encode(performatives.SaslMechanisms(sasl_server_mechanisms=("PLAIN", "ANONYMOUS"))),
]  # fmt: skip

# Every constructor the encodings table of types §1.6 assigns, plus 0x00 (a described value).
_CONSTRUCTORS = sorted({
    0x00, *range(0x40, 0x46), *range(0x50, 0x57), 0x60, 0x61, *range(0x70, 0x75),
    *range(0x80, 0x85), 0x94, 0x98, 0xA0, 0xA1, 0xA3, 0xB0, 0xB1, 0xB3, 0xC0, 0xC1, 0xD0, 0xD1,
    0xE0, 0xF0,
})  # fmt: skip


@given(st.binary(max_size=300))
def test_random_bytes_decode_or_raise_decode_error(data: bytes) -> None:
    _decodes_or_refuses(data)


@given(st.sampled_from(_CONSTRUCTORS), st.binary(max_size=64))
def test_valid_constructor_then_random_bytes(code: int, rest: bytes) -> None:
    # Plain random bytes mostly die on the first octet; starting from a real constructor reaches
    # the size, count and element checks.
    _decodes_or_refuses(bytes([code]) + rest)


@st.composite
def _mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.one_of(values.map(encode), st.sampled_from(SAMPLES))))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "set", "insert", "delete"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "insert":
            data.insert(at, draw(st.integers(0, 255)))
        elif not data:
            continue
        elif op == "delete":
            del data[at]
        elif op == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        else:
            data[at] = draw(st.sampled_from([0x00, 0x01, 0x40, 0x7F, 0x80, 0xFE, 0xFF]))
    return bytes(data)


@given(_mutated())
def test_mutated_encodings_decode_or_raise_decode_error(data: bytes) -> None:
    _decodes_or_refuses(data)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda b: f"descriptor-{b[2]:#04x}")
def test_every_byte_of_a_sample_can_be_corrupted(sample: bytes) -> None:
    # Exhaustive over positions and a few replacement octets: cheap and deterministic.
    for at in range(len(sample)):
        for octet in (0x00, 0x40, 0x45, 0x53, 0xA1, 0xFF, sample[at] ^ 0x80):
            _decodes_or_refuses(sample[:at] + bytes([octet]) + sample[at + 1 :])


# --- decoding: specific hostile inputs ------------------------------------------------------------


def _nested(levels: int, wrap: Callable[[bytes], bytes], core: bytes) -> bytes:
    data = core
    for _ in range(levels):
        data = wrap(data)
    return data


def _list32(item: bytes) -> bytes:
    return b"\xd0" + struct.pack(">II", len(item) + 4, 1) + item


def _map32(item: bytes) -> bytes:
    return b"\xd1" + struct.pack(">II", len(item) + 5, 2) + b"\x40" + item


def _nested_arrays(levels: int) -> bytes:
    """Arrays of arrays: inner elements are array bodies without a constructor (types §1.6.24)."""
    body = struct.pack(">II", 5, 0) + b"\x40"  # innermost: an empty array of nulls
    for _ in range(levels - 1):
        body = struct.pack(">II", len(body) + 5, 1) + b"\xf0" + body
    return b"\xf0" + body


DEEP = 10_000

# (name, bytes): both decode and skip_value must raise DecodeError (structural damage).
STRUCTURAL: list[tuple[str, bytes]] = [
    ("invalid constructor 0xff", b"\xff"),
    ("unassigned constructor 0x57", b"\x57\x00"),
    ("list8 count exceeds its size", b"\xc0\x02\x05\x40"),  # types §1.6.22
    ("list8 size 0 leaves no count", b"\xc0\x00"),
    ("list32 size overruns the buffer", b"\xd0\x00\x00\x01\x00\x00\x00\x00\x01\x40"),
    ("list32 size smaller than its count", b"\xd0\x00\x00\x00\x02\x00\x00\x00\x00"),
    ("list32 count 2**32-1 in 1 byte", b"\xd0\x00\x00\x00\x05\xff\xff\xff\xff\x40"),
    ("map with odd count", b"\xc1\x02\x01\x40"),  # types §1.6.23: key/value pairs
    ("map32 with odd count", b"\xd1\x00\x00\x00\x07\x00\x00\x00\x03\x40\x40\x40"),
    ("str8 size overruns", b"\xa1\x05abc"),
    ("vbin32 size 2**32-1", b"\xb0\xff\xff\xff\xffab"),
    ("array32 of 2**32-1 nulls", b"\xf0\x00\x00\x00\x05\xff\xff\xff\xff\x40"),
    ("array8 of 255 uints in 4 bytes", b"\xe0\x06\xff\x70\x00\x00\x00\x01"),
    ("array with invalid element constructor", b"\xe0\x02\x01\xff"),
    ("array element constructor 0x00 twice", b"\xe0\x07\x01\x00\x53\x01\x00\x53\x01"),
    ("array with no element constructor", b"\xe0\x01\x00"),
    ("array descriptor runs past the array", b"\xe0\x03\x01\x00\x53"),
    ("described with no value", b"\x00\x53\x01"),
    (f"{DEEP} nested descriptors", b"\x00" * DEEP + b"\x40\x40"),
]


def test_every_unassigned_constructor_is_refused() -> None:
    for code in sorted(set(range(256)) - set(_CONSTRUCTORS)):
        data = bytes([code]) + b"\x00" * 20
        with pytest.raises(DecodeError):
            decode_at(data, 0, len(data))
        with pytest.raises(DecodeError):
            skip_value(data, 0, len(data))


@pytest.mark.parametrize("data", [d for _, d in STRUCTURAL], ids=[n for n, _ in STRUCTURAL])
def test_structural_damage_is_refused_by_decode_and_skip(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode(data)
    with pytest.raises(DecodeError):
        skip_value(data, 0, len(data))


# (name, bytes): decode must raise DecodeError; the structure is sound, so skip_value, which by
# design checks sizes and counts but neither reads contents nor descends into items, must return
# the end the encoding declares.
CONTENT: list[tuple[str, bytes]] = [
    ("invalid UTF-8 in str8", b"\xa1\x02\xc3\x28"),  # types §1.6.20: UTF-8
    ("overlong UTF-8 in str8", b"\xa1\x02\xc0\x80"),
    ("UTF-8 encoded surrogate in str32", b"\xb1\x00\x00\x00\x03\xed\xa0\x80"),
    ("non-ASCII symbol", b"\xa3\x02\xc3\xa9"),  # types §1.6.21: ASCII
    ("boolean octet 0x02", b"\x56\x02"),  # types §1.6.2: 0x56 holds 0 or 1
    ("boolean octet 0xff in an array", b"\xe0\x04\x02\x56\x01\xff"),
    ("char surrogate 0xD800", b"\x73\x00\x00\xd8\x00"),  # types §1.6.16: a Unicode scalar value
    ("char beyond U+10FFFF", b"\x73\x00\x11\x00\x00"),
    ("char surrogate in an array", b"\xe0\x06\x01\x73\x00\x00\xdf\xff"),
    ("list8 size larger than its items", b"\xc0\x03\x01\x40\x40"),
    ("map with a list key", b"\xc1\x03\x02\x45\x40"),  # unhashable in Python
    ("map keyed by a described list", b"\xc1\x05\x02\x00\x45\x40\x40"),
    (f"{DEEP} nested lists", _nested(DEEP, _list32, b"\x45")),
    (f"{DEEP} nested maps", _nested(DEEP, _map32, b"\x40")),
    (f"{DEEP} nested arrays", _nested_arrays(DEEP)),
]


@pytest.mark.parametrize("data", [d for _, d in CONTENT], ids=[n for n, _ in CONTENT])
def test_invalid_contents_are_refused_by_decode(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode(data)
    assert skip_value(data, 0, len(data)) == len(data)


def test_nesting_limit_is_exact() -> None:
    # MAX_DEPTH levels of lists decode; one more is refused, well before Python's recursion limit.
    assert decode(_nested(MAX_DEPTH, _list32, b"\x45")) is not None
    with pytest.raises(DecodeError, match="nesting"):
        decode(_nested(MAX_DEPTH + 1, _list32, b"\x45"))


def test_a_list_descriptor_is_an_unknown_described_value() -> None:
    # types §1.5: descriptors other than ulong and symbol are reserved. A list cannot name a
    # registered type (nor be looked up: it is unhashable), so it stays a generic described value.
    value = decode(b"\x00\xc0\x02\x01\x40\x55\x07")
    assert_same(Described([None], Long(7)), value)
    assert decode(encode(value)) == value


def test_zero_width_array_is_refused_without_building_it() -> None:
    data = b"\xf0\x00\x00\x00\x05\xff\xff\xff\xff\x40"  # 2**32-1 nulls in 10 bytes
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError):
            decode(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100_000


def _arrays_of_nulls(sizes: list[int]) -> bytes:
    body = b"".join(b"\xf0" + struct.pack(">II", 5, n) + b"\x40" for n in sizes)
    return b"\xd0" + struct.pack(">II", len(body) + 4, len(sizes)) + body


def test_zero_width_cap_covers_the_whole_value() -> None:
    # 2 KB of 200 arrays, each within the per-array cap, would otherwise build 13 million
    # elements: the cap must be shared by every array in the value.
    data = _arrays_of_nulls([MAX_ZERO_WIDTH_COUNT] * 200)
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError, match="zero-width"):
            decode(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * MAX_ZERO_WIDTH_COUNT * 8 + 1_000_000  # about one array's worth at most


def test_zero_width_cap_allows_exactly_the_cap_and_resets_per_value() -> None:
    half = MAX_ZERO_WIDTH_COUNT // 2
    data = _arrays_of_nulls([half, MAX_ZERO_WIDTH_COUNT - half])
    for _ in range(2):  # a second decode gets a fresh allowance
        assert [len(a.elements) for a in decode(data)] == [half, MAX_ZERO_WIDTH_COUNT - half]
    with pytest.raises(DecodeError):
        decode(_arrays_of_nulls([half, MAX_ZERO_WIDTH_COUNT - half + 1]))


# --- skip_value against decode_at -----------------------------------------------------------------


@given(st.lists(values, min_size=1, max_size=4), st.binary(max_size=8), st.binary(max_size=8))
def test_skip_value_agrees_with_decode_at(
    items: list[Any], before: bytes, after: bytes
) -> None:
    # Values back to back inside a larger buffer, as sections sit in a transfer payload.
    buf = before + b"".join(encode(item) for item in items) + after
    end = len(buf) - len(after)
    pos = len(before)
    for item in items:
        value, stop = decode_at(buf, pos, end)
        assert skip_value(buf, pos, end) == stop
        assert_same(item, value)
        pos = stop
    assert pos == end


@given(values)
def test_decode_accepts_bytearray_and_memoryview(value: Any) -> None:
    data = encode(value)
    assert_same(value, decode(bytearray(data)))  # type: ignore[arg-type]
    assert_same(value, decode(memoryview(data)))  # type: ignore[arg-type]
