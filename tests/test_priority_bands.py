"""Priorities as functions: the header's priority as peek reads it (messaging 3.2.1), and the
mapping of the ten levels onto a neighbour's data links (docs/mesh.md, "Priorities")."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from router.amqp.message import Message, encode_message
from router.amqp.messaging import Header, Properties
from router.amqp.peek import header_priority
from router.config.models import PRIORITY_LEVELS
from router.core.paths import PRIORITY_TOP, band_of

levels = st.integers(min_value=0, max_value=255)
band_counts = st.integers(min_value=1, max_value=PRIORITY_LEVELS)


@given(levels, band_counts)
def test_a_band_is_in_range_and_levels_above_nine_count_as_nine(priority: int, bands: int) -> None:
    band = band_of(priority, bands)
    assert 0 <= band < bands
    if priority > PRIORITY_TOP:
        assert band == band_of(PRIORITY_TOP, bands)


@given(levels, levels, band_counts)
def test_bands_are_monotone_in_the_priority(a: int, b: int, bands: int) -> None:
    low, high = sorted((a, b))
    assert band_of(low, bands) <= band_of(high, bands)


@given(band_counts)
def test_every_band_gets_a_level_and_the_extremes_are_apart(bands: int) -> None:
    assert {band_of(p, bands) for p in range(PRIORITY_LEVELS)} == set(range(bands))
    assert band_of(0, bands) == 0 and band_of(PRIORITY_TOP, bands) == bands - 1


def test_ten_bands_are_one_per_level_and_one_band_takes_all() -> None:
    assert [band_of(p, 10) for p in range(10)] == list(range(10))
    assert {band_of(p, 1) for p in range(256)} == {0}


headers = st.builds(
    Header,
    durable=st.none() | st.booleans(),
    priority=st.none() | levels,
    ttl=st.none() | st.integers(min_value=0, max_value=2**32 - 1),
    first_acquirer=st.none() | st.booleans(),
    delivery_count=st.none() | st.integers(min_value=0, max_value=2**32 - 1),
)


@given(st.none() | headers, st.booleans())
def test_header_priority_reads_what_the_header_says(header: Header | None, view: bool) -> None:
    payload = encode_message(Message.value("x" * 50, header=header, properties=Properties(to="q")))
    found = header_priority(memoryview(payload) if view else payload)
    expected = header.priority if header is not None else None
    assert found == (None if expected is None else int(expected))


@given(st.binary(max_size=40))
def test_header_priority_never_raises_on_hostile_bytes(data: bytes) -> None:
    found = header_priority(data)
    assert found is None or 0 <= found <= 255
    assert header_priority(b"\x00\x53\x70" + data) in (None, *range(256))


def test_a_cut_or_odd_header_gives_no_priority() -> None:
    full = encode_message(Message.value("x", header=Header(durable=True, priority=8)))
    assert header_priority(full) == 8
    for cut in range(len(full[:8])):
        assert header_priority(full[:cut]) is None
    # priority encoded as something other than a ubyte (a smalluint): not a priority
    assert header_priority(bytes.fromhex("005370c00402405201")) is None
    # list32 encoding
    assert header_priority(bytes.fromhex("005370d0000000060000000241500300")) == 3
