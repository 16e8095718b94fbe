"""Deliveries from one producer reach a consumer in the order they were sent, also when some
wait for the consumer's credit and the credit comes in the same read as later deliveries (the
engine has then applied the flow before the core sees those transfers). Found with rhea, which
writes its receiver's flow after the sender's transfers (tests/test_interop_rhea.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from router.amqp.message import Message
from router.config.models import AddressConfig, RouterConfig

from router.testing.routerharness import RouterHarness


def _order(batches: list[int], credit_with: int, distribution: str = "balanced") -> list[str]:
    """Send `batches` of messages (a pump after each); the consumer's credit is written after
    the batch `credit_with`, in the same read."""
    h = RouterHarness(RouterConfig(addresses=(AddressConfig(prefix="q", distribution=distribution),)))  # type: ignore[arg-type]
    client = h.connect("one")
    rx, tx = client.receiver("q"), client.sender("q")
    h.pump()
    n = 0
    for i, size in enumerate(batches):
        for _ in range(size):
            client.send(tx, Message.value(f"m{n}"))
            n += 1
        if i == credit_with:
            rx.flow(1000)
        h.pump()
    if credit_with >= len(batches):
        rx.flow(1000)
        h.pump()
    return [str(b) for b in client.bodies(rx)]


def test_credit_in_the_same_read_as_later_deliveries() -> None:
    assert _order([2, 18], credit_with=1) == [f"m{i}" for i in range(20)]
    assert _order([2, 18], credit_with=1, distribution="closest") == [f"m{i}" for i in range(20)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=6), min_size=1, max_size=5), st.integers(min_value=0, max_value=5),
       st.sampled_from(["balanced", "closest"]))  # fmt: skip
def test_order_is_kept_whenever_credit_comes(batches: list[int], credit_with: int, distribution: str) -> None:
    assert _order(batches, credit_with, distribution) == [f"m{i}" for i in range(sum(batches))]
