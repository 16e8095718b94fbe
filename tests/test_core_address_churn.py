"""What a router remembers of addresses that come and go is bounded (RouterHarness, sans-IO): a
client with a consumer and a producer of an address of its own each time, as the churn soak's
visits (bench/soakchurn.py). Before, each address matcher kept a lookup of every address for up
to 65,536 of them (~85 bytes each and the address string; an attach asks up to four matchers):
~1 KiB more per address a router ever saw (measured: 968 bytes), tens of MiB at the bound."""

from __future__ import annotations

import gc

import pytest

from router.amqp.message import Message
from router.config.models import RouterConfig
from router.core import addressing
from router.core.addressing import LOOKUPS_CACHED, AddressMatcher
from router.testing.routerharness import RouterHarness


def _visits(h: RouterHarness, count: int) -> None:
    for n in range(count):
        client = h.connect(f"visitor-{n}")
        rx = client.receiver(f"churn.{n}")
        tx = client.sender(f"churn.{n}")
        h.pump()
        rx.flow(1)
        h.pump()
        client.send(tx, Message.value("hello"))
        h.pump()
        assert client.bodies(rx) == ["hello"]
        h.disconnect(client)


def test_a_router_remembers_lookups_of_a_bounded_number_of_addresses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(addressing, "LOOKUPS_CACHED", 64)  # (the bound, small: a few hundred visits pass it)
    h = RouterHarness(RouterConfig.model_validate({
        "addresses": [{"prefix": "churn", "distribution": "closest"}],
        "link_routes": [{"prefix": "q", "direction": "in", "connection": "broker"},
                        {"prefix": "q", "direction": "out", "connection": "broker"}],
    }))  # fmt: skip
    _visits(h, 300)
    assert len(h.core.table.entries) < 10 and not h.core.connections  # (the addresses and clients are gone)
    matchers = [o for o in gc.get_objects() if isinstance(o, AddressMatcher)]
    assert matchers and all(m._lookup.cache_info().currsize <= 64 for m in matchers)


def test_a_matcher_remembers_a_bounded_number_of_lookups_and_none_without_rules() -> None:
    empty, routes = AddressMatcher[str](), AddressMatcher[str]()
    routes.add_prefix("q", "route")
    for n in range(3 * LOOKUPS_CACHED):
        assert empty.lookup(f"q.{n}") is None
        assert routes.lookup(f"q.{n}") == "route" and routes.lookup(f"m.{n}") is None
    assert empty._lookup.cache_info().currsize == 0
    assert routes._lookup.cache_info().currsize == LOOKUPS_CACHED
    assert routes.lookup("q.0") == "route"  # (forgotten, looked up again)
