"""Two datacenters as deploy/k8s renders them, each site in its own network namespace, joined by
a WAN that delays every byte and can be cut (router/testing/multisite.py): the mesh forms over
mutual TLS, clients are served by their own site, traffic crosses the WAN only for a remote
consumer, and a WAN cut is survived with an outcome for every delivery and traffic resuming
when the link heals. Needs root (network namespaces) and kubectl; skips without them."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import trio

from router.amqp.message import Message
from router.net.client import Client
from router.testing.netns import available

from router.testing.multisite import Sites

pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(available() is not None, reason=f"multi-site tests: {available()}"),
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with kustomize) renders the sites"),
]
pytest.importorskip("trustme", reason="trustme makes the sites' certificates (test extra)")

CONNECTION_TYPE = "org.apache.qpid.dispatch.connection"
ADDRESS_TYPE = "org.apache.qpid.dispatch.router.address"


async def send_all(client: Client, address: str, count: int, tag: str, *, one_at_a_time: bool = False) -> list[str]:
    """Send `count` messages and return each one's outcome (its class name); `one_at_a_time`
    waits for each outcome before the next send."""
    sender = await client.open_sender(address)
    outcomes = []
    trackers = []
    for i in range(count):
        tracker = await sender.start_send(Message.value(f"{tag}-{i}"))
        if one_at_a_time:
            outcomes.append(type(await tracker.wait()).__name__)
        else:
            trackers.append(tracker)
    return outcomes + [type(await tracker.wait()).__name__ for tracker in trackers]


async def receive_all(client: Client, address: str, into: list[str], credit: int = 50) -> None:
    receiver = await client.open_receiver(address, credit=credit)
    try:
        while True:
            delivery = await receiver.receive()
            into.append(str(delivery.message.body_value))
            receiver.accept(delivery)
    finally:  # cancelled: the link goes (an attached receiver nobody reads would still get messages)
        with trio.CancelScope(shield=True), trio.move_on_after(2):
            await receiver.close()


async def wait_consumers(sites: Sites, site: str, address: str, routers: set[str]) -> None:
    """Until router-0 of `site` knows exactly `routers` as the routers with consumers of `address`."""
    with trio.fail_after(10):
        while True:
            rows = [r for r in await sites.query(site, 0, ADDRESS_TYPE) if r.get("address") == address]
            known = set(rows[0].get("remoteHostRouters") or ()) if rows else set()  # no row: no consumer
            if known == routers:
                return
            await trio.sleep(0.05)  # across processes: no event to wait for


def wan_bytes(stats: dict[str, Any]) -> int:
    return int(stats["bytes_forward"]) + int(stats["bytes_back"])


async def test_two_sites_mesh_over_tls_serve_locally_and_survive_a_wan_cut(tmp_path: Path) -> None:
    with Sites(tmp_path, ["dc-east", "dc-west"], interiors=2, delay_ms=10) as sites:
        await sites.wait_meshed()
        # The WAN links are TLS, authenticated by certificate (SASL EXTERNAL).
        wan = [c for c in await sites.query("dc-east", 0, CONNECTION_TYPE)
               if c.get("role") == "inter-router" and str(c.get("container", "")).startswith("dc-west")]  # fmt: skip
        assert wan and all(c["isEncrypted"] and c["sasl"] == "EXTERNAL" and c["isAuthenticated"] for c in wan), wan

        # A consumer in each site: the east producer is served in its own site.
        async with sites.client("dc-east", 1) as east_consumer, sites.client("dc-west", 1) as west_consumer, \
                sites.client("dc-east", 0) as producer:  # fmt: skip
            east_got: list[str] = []
            west_got: list[str] = []
            async with trio.open_nursery() as nursery:
                nursery.start_soon(receive_all, east_consumer, "orders", east_got)
                nursery.start_soon(receive_all, west_consumer, "orders", west_got)
                await wait_consumers(sites, "dc-east", "orders", {"dc-east-router-1", "dc-west-router-1"})
                before = wan_bytes(sites.wan("stats"))
                # The default distribution (balanced) weighs a path's cost against the deliveries
                # outstanding on it: one at a time, the local consumer always wins.
                assert await send_all(producer, "orders", 20, "local", one_at_a_time=True) == ["Accepted"] * 20
                local_cost = wan_bytes(sites.wan("stats")) - before
                assert sorted(east_got) == sorted(f"local-{i}" for i in range(20)) and west_got == []
                nursery.cancel_scope.cancel()

        await wait_consumers(sites, "dc-east", "orders", set())  # both consumers gone everywhere

        # Only the west consumer: now the messages cross the WAN.
        async with sites.client("dc-west", 1) as west_consumer, sites.client("dc-east", 0) as producer:
            west_got = []
            trackers: list[Any] = []
            async with trio.open_nursery() as nursery:
                nursery.start_soon(receive_all, west_consumer, "orders", west_got)
                await wait_consumers(sites, "dc-east", "orders", {"dc-west-router-1"})
                before = wan_bytes(sites.wan("stats"))
                assert await send_all(producer, "orders", 20, "remote") == ["Accepted"] * 20
                remote_cost = wan_bytes(sites.wan("stats")) - before
                assert sorted(west_got) == sorted(f"remote-{i}" for i in range(20))
                # 20 transfers of over 60 bytes each crossed, where before only HELLOs did.
                assert remote_cost > local_cost + 20 * 60, (local_cost, remote_cost)

                # The WAN is cut while messages are in flight: every message sent gets an outcome.
                sender = await producer.open_sender("orders")

                async def keep_sending() -> None:
                    for i in range(1000):  # blocks for credit once no consumer is reachable
                        trackers.append(await sender.start_send(Message.value(f"cut-{i}")))
                        if i == 50:
                            sites.wan("cut")

                nursery.start_soon(keep_sending)
                with trio.fail_after(10):
                    # The east routers give the west up (their dead interval), then the
                    # address has no consumer left anywhere they can reach.
                    await wait_consumers(sites, "dc-east", "orders", set())
                nursery.cancel_scope.cancel()
            with trio.fail_after(10):
                outcomes = [type(await tracker.wait()).__name__ for tracker in trackers]
            # Those in flight when the WAN went dark: the consumer may have had them (modified:
            # their fate is unknown) or not (released); none is left without an outcome.
            assert len(outcomes) > 50 and set(outcomes) <= {"Accepted", "Released", "Modified"}, set(outcomes)
            assert set(outcomes) & {"Released", "Modified"}
            assert outcomes.count("Accepted") <= len(west_got) - 20  # accepted means the consumer had it

        # The link heals: the sites mesh again and traffic crosses once more.
        sites.wan("heal")
        await sites.wait_meshed()
        async with sites.client("dc-west", 1) as west_consumer, sites.client("dc-east", 0) as producer:
            healed: list[str] = []
            async with trio.open_nursery() as nursery:
                nursery.start_soon(receive_all, west_consumer, "orders", healed)
                await wait_consumers(sites, "dc-east", "orders", {"dc-west-router-1"})
                assert await send_all(producer, "orders", 10, "healed") == ["Accepted"] * 10
                assert sorted(healed) == sorted(f"healed-{i}" for i in range(10))
                nursery.cancel_scope.cancel()


async def test_a_third_site_joins_and_reaches_both_others(tmp_path: Path) -> None:
    """dc-north dials both other sites (its overlay's two peers, WAN cost 20): a message from a
    producer in the north reaches a consumer in the east and one in the west."""
    with Sites(tmp_path, ["dc-east", "dc-west", "dc-north"], interiors=1, delay_ms=5) as sites:
        await sites.wait_meshed()
        for site in ("dc-east", "dc-west"):
            async with sites.client(site, 0) as consumer, sites.client("dc-north", 0) as producer:
                got: list[str] = []
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(receive_all, consumer, f"to-{site}", got)
                    await wait_consumers(sites, "dc-north", f"to-{site}", {f"{site}-router-0"})
                    assert await send_all(producer, f"to-{site}", 5, "north") == ["Accepted"] * 5
                    assert sorted(got) == [f"north-{i}" for i in range(5)]
                    nursery.cancel_scope.cancel()
