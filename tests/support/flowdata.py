"""A small flow-record set with known answers (the pipeline's and the analytics CLI's tests).

The mesh: A - B - C (a chain), t0 on a minute boundary. Known answers are worked out in
tests/test_pipeline.py beside each assertion.
"""

from __future__ import annotations

from typing import Any

from pipeline.synthetic import Emitter

T0 = 1_764_000_000.0  # 2025-11-24 16:00:00 UTC, a minute boundary


def first_files() -> list[dict[str, Any]]:
    a, b, c = Emitter("A"), Emitter("B"), Emitter("C")
    records = [
        a.router_record(T0, {"B": 1}),
        b.router_record(T0, {"A": 1, "C": 1}),
        c.router_record(T0, {"B": 1}),
        # orders enters at A: 100 (5 rejected, 3 released) then 50, in the first minute
        a.link_interval(T0 + 10, "p1", role="normal", peer="producer", direction="in", address="orders",
                        deliveries=100, bytes=10_000, rejected=5, released=3),
        a.link_interval(T0 + 20, "p1", role="normal", peer="producer", direction="in", address="orders",
                        deliveries=50, bytes=5_000),
        # it crosses A -> B -> C (counted per pair, never per address again) and leaves at C
        a.link_interval(T0 + 10, "ir-B", role="inter-router", peer="B", direction="out", address=None,
                        deliveries=150, bytes=18_000, credit_starved_s=2.5),
        b.link_interval(T0 + 10, "ir-A", role="inter-router", peer="A", direction="in", address=None,
                        deliveries=150, bytes=18_000),
        b.link_interval(T0 + 10, "ir-C", role="inter-router", peer="C", direction="out", address=None,
                        deliveries=150, bytes=18_000),
        c.link_interval(T0 + 10, "c1", role="normal", peer="consumer", direction="out", address="orders",
                        deliveries=150, bytes=15_000),
        # residence of orders: 3 x 5 us on A (bucket 3, [4, 8)), 1 x 100 us on B (bucket 7, [64, 128))
        a.address_interval(T0 + 10, "orders", deliveries=3, bytes=300, residence_us=[5, 5, 5]),
        b.address_interval(T0 + 10, "orders", deliveries=1, bytes=100, residence_us=[100]),
    ]
    # two sampled deliveries through A -> B -> C; the B - C link is slow
    for trace, (sa, sb, sc) in {"t1": (7000, 5500, 500), "t2": (6000, 4500, 470)}.items():
        records += [
            a.hop(T0 + 30, trace, ingress="A", address="orders", prev=None, next="B", residence_us=10, settle_us=sa),
            b.hop(T0 + 30, trace, ingress="A", address="orders", prev="A", next="C", residence_us=20, settle_us=sb),
            c.hop(T0 + 30, trace, ingress="A", address="orders", prev="B", next=None, residence_us=30, settle_us=sc),
        ]
    return records


def second_files(first: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the collector writes later: new traffic in the second minute, and a record written
    again (the first orders interval, the same router, boot and seq)."""
    c = Emitter("C", boot="C-boot-2")  # C restarted: its seq starts again under a new boot
    again = next(r for r in first if r["type"] == "link_interval" and r["link_id"] == "p1")
    return [
        c.link_interval(T0 + 70, "p2", role="normal", peer="producer", direction="in", address="events",
                        deliveries=30, bytes=600),
        dict(again),
    ]
