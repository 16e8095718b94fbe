"""Flow records, sans-IO: the log2 histogram buckets (hypothesis), numbering and the bounded
buffer (hop and interval records dropped first, snapshots last, every drop counted), JSON lines
in and out (hostile lines refused), and the table rule that makes the records' address balanced anycast."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.config.models import AddressConfig, Flow, RouterConfig
from router.core.flowcount import _bucket
from router.core.table import AddressTable
from router.flow.hist import BUCKETS, bounds_us, bucket, bucket_of_seconds, difference
from router.flow.records import Emitter, decode_lines, encode_lines


@given(st.integers(min_value=0, max_value=1 << 70))
def test_a_duration_falls_in_the_bucket_whose_bounds_hold_it(us: int) -> None:
    index = bucket(us)
    assert 0 <= index < BUCKETS
    low, high = bounds_us(index)
    assert low <= us and (high is None or us < high)


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False))
def test_the_core_buckets_seconds_as_the_schema_does(seconds: float) -> None:
    assert _bucket(seconds) == bucket_of_seconds(seconds) == bucket(int(seconds * 1_000_000))


def test_bucket_edges() -> None:
    assert [bucket(d) for d in (0, 1, 2, 3, 4, 1023, 1024)] == [0, 1, 2, 2, 3, 10, 11]
    assert bucket(2**30) == 31 and bucket(2**31 - 1) == 31 and bucket(10**12) == 31
    assert bucket(-5) == 0
    assert difference([3, 2] + [0] * 30, [1, 2] + [0] * 30)[:2] == [2, 0]


def test_records_are_numbered_per_boot_and_taken_in_order() -> None:
    e = Emitter("R1", capacity=10, boot="b1")
    e.emit("router", 1.0, {"mode": "interior"})
    e.emit("hop", 2.0, {"trace_id": "t"})
    e.emit("link", 3.0, {"link_id": "1"})
    taken = e.take(10)
    assert [r["seq"] for r in taken] == [1, 2, 3]
    assert [r["type"] for r in taken] == ["router", "hop", "link"]
    assert all(r["router"] == "R1" and r["boot"] == "b1" for r in taken)
    assert e.emitted == 3 and e.dropped == 0 and len(e) == 0
    assert Emitter("R1", 10).boot != Emitter("R1", 10).boot  # a new boot each start


def test_a_full_buffer_drops_optional_records_first_and_counts_every_drop() -> None:
    e = Emitter("R1", capacity=4, boot="b")
    for i in range(3):
        e.emit("link_interval", float(i), {"i": i})
    e.emit("link", 3.0, {"link_id": "1"})
    assert e.emit("hop", 4.0, {}) is None  # full: the new optional record goes
    assert e.dropped == 1
    e.emit("router", 5.0, {})  # a snapshot displaces the oldest optional record
    e.emit("link", 6.0, {"link_id": "2"})
    e.emit("link", 7.0, {"link_id": "3"})
    assert e.dropped == 4 and len(e) == 4
    kinds = [r["type"] for r in e.take(100)]
    assert kinds == ["link", "router", "link", "link"]
    e2 = Emitter("R1", capacity=2, boot="b")
    for i in range(5):
        e2.emit("router", float(i), {})
    assert e2.dropped == 3 and [r["seq"] for r in e2.take(10)] == [4, 5]  # the newest snapshots stay


def test_records_put_back_keep_their_place_within_the_bound() -> None:
    e = Emitter("R1", capacity=3, boot="b")
    for i in range(3):
        e.emit("address_interval", float(i), {})
    taken = e.take(2)
    e.emit("hop", 9.0, {})
    e.put_back(taken)  # the bound holds: one of them no longer fits
    assert len(e) == 3 and e.dropped == 1 and e.emitted == 0
    assert [r["seq"] for r in e.take(10)] == [2, 3, 4]


def test_json_lines_round_trip_and_hostile_lines_are_refused() -> None:
    e = Emitter("R1", capacity=10, boot="b")
    e.emit("hop", 1.5, {"trace_id": "x", "residence_us": 3})
    data = encode_lines(e.take(10))
    assert data.endswith(b"\n") and json.loads(data)["trace_id"] == "x"
    assert decode_lines(data)[0]["seq"] == 1
    bad = [
        b"not json\n", b"[1,2]\n", b'{"type":"evil","router":"R","boot":"b","seq":1,"ts":1}\n',
        b'{"type":"hop","router":"","boot":"b","seq":1,"ts":1}\n', b'{"type":"hop","router":"R","boot":"b","seq":-1,"ts":1}\n',
        b'{"type":"hop","router":"R","boot":"b","seq":1,"ts":"now"}\n', b'{"type":"hop","router":"R","boot":"b","seq":true,"ts":1}\n',
        b"\xff\xfe\n",
    ]
    for line in bad:
        with pytest.raises(ValueError):
            decode_lines(line)
    with pytest.raises(ValueError, match="more than"):
        decode_lines(data * 3, max_records=2)


def test_the_records_address_is_balanced_anycast_unless_a_rule_says_otherwise() -> None:
    table = AddressTable(RouterConfig())
    assert table.distribution_for("_flow/records") == "balanced"
    assert table.distribution_for("orders") == "balanced"
    assert AddressTable(RouterConfig(addresses=(AddressConfig(prefix="_flow", distribution="multicast"),))) \
        .distribution_for("_flow/records") == "multicast"  # fmt: skip
    mine = RouterConfig(flow=Flow(mesh_address="ops/flows"), addresses=(AddressConfig(prefix="ops", distribution="closest"),))
    assert AddressTable(mine).distribution_for("ops/flows") == "closest"
    assert AddressTable(RouterConfig(flow=Flow(mesh_address=None))).distribution_for("_flow/records") == "balanced"


def test_a_changed_flow_section_is_logged_as_needing_a_restart() -> None:
    from router.net.reload import plan_reload

    plan = plan_reload(RouterConfig(), RouterConfig(flow=Flow(enabled=True)))
    assert plan.needs_restart == ["flow"] and not plan.changes


@given(
    st.integers(min_value=1, max_value=8),
    st.lists(st.one_of(st.sampled_from(["router", "link", "hop", "link_interval", "address_interval"]),
                       st.integers(min_value=0, max_value=5)), max_size=60),
)  # fmt: skip
def test_the_buffer_never_grows_past_its_bound_and_accounts_for_every_record(capacity: int, steps: list[Any]) -> None:
    e = Emitter("R", capacity=capacity, boot="b")
    made = 0
    taken: list[int] = []
    for step in steps:
        if isinstance(step, str):
            had_optional = bool(e.optional)
            snapshots_before = len(e.snapshots)
            e.emit(step, 1.0, {})
            made += 1
            if step in ("router", "link") and had_optional:
                assert len(e.snapshots) == snapshots_before + 1  # an optional record made room
        else:
            taken += [r["seq"] for r in e.take(step)]
        assert len(e) <= capacity
        assert e.emitted + e.dropped + len(e) == made  # nothing lost without being counted
    assert taken == sorted(taken) and len(set(taken)) == len(taken)


@given(
    st.integers(min_value=1, max_value=8),
    st.lists(st.one_of(st.sampled_from(["router", "link", "hop", "address_interval", "confirm", "release", "refuse"]),
                       st.integers(min_value=1, max_value=5)), max_size=80),
)  # fmt: skip
def test_records_in_flight_stay_within_the_bound_and_every_record_is_accounted_for(capacity: int, steps: list[Any]) -> None:
    e = Emitter("R", capacity=capacity, boot="b")
    made = 0
    in_flight: list[dict[str, Any]] | None = None
    handed: list[int] = []
    for step in steps:
        if isinstance(step, int):
            if in_flight is None:  # one batch in flight at a time, as the publisher sends them
                in_flight = e.take(step, hold=True) or None
        elif step in ("confirm", "release", "refuse"):
            if in_flight is not None:
                getattr(e, step)(in_flight)
                if step == "confirm":
                    handed += [r["seq"] for r in in_flight]
                in_flight = None
        else:
            e.emit(step, 1.0, {})
            made += 1
        assert len(e) + e.held <= capacity
        assert e.held == (len(in_flight) if in_flight is not None else 0)
        assert e.emitted + e.dropped + len(e) + e.held == made  # nothing lost without being counted
        waiting = [r["seq"] for r in sorted([*e.optional, *e.snapshots], key=lambda r: r["seq"])]
        assert all(s < w for s in handed for w in waiting)  # a released batch goes back before newer records
    assert handed == sorted(handed) and len(set(handed)) == len(handed)
