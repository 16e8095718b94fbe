"""Priorities as functions: the header's priority as peek reads it (messaging 3.2.1), and the
mapping of the ten levels onto a neighbour's data links (docs/mesh.md, "Priorities")."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from router.amqp.message import Message, encode_message
from router.amqp.messaging import Header, Properties
from router.amqp.peek import peek
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
def test_peek_reads_the_header_priority(header: Header | None, view: bool) -> None:
    payload = encode_message(Message.value("x" * 50, header=header, properties=Properties(to="q")))
    found = peek(memoryview(payload) if view else payload).priority
    expected = header.priority if header is not None else None
    assert found == (None if expected is None else int(expected))


def test_a_list32_header_gives_its_priority() -> None:
    assert peek(bytes.fromhex("005370d000000007000000024150" "03")).priority == 3
