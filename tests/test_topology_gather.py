"""topology.cli.gather against a mesh of whole routers on memory streams (virtual time): asked
through one router, every router of the mesh answers with its own view, all at once on one
management session, without any of them waiting for a time-out."""

from __future__ import annotations

import trio
import trio.testing

from router.config.models import Connector, Listener, RouterConfig, RouterSection
from router.net.management_client import management_session
from router.testing.memrouter import MemNetwork, MemRouter
from topology.cli.gather import address_everywhere, gather

TIMEOUT_S = 5.0  # each request's time-out (virtual seconds)


def interior(name: str, *connectors: Connector) -> RouterConfig:
    return RouterConfig(
        router=RouterSection(id=name, mode="interior", hello_interval_s=1.0, dead_interval_s=3.0),
        listeners=(Listener(name="amqp", port=0), Listener(name="ir", port=0, role="inter-router")),
        connectors=connectors,
    )


def to(router: MemRouter) -> Connector:
    return Connector(name=f"to-{router.core.mesh.me}", host="127.0.0.1", port=router.port("ir"), role="inter-router")


async def chain(mem_network: MemNetwork) -> dict[str, MemRouter]:
    """A - B - C, once every router has a route to every other."""
    a = await mem_network.start(interior("A"))
    b = await mem_network.start(interior("B", to(a)))
    c = await mem_network.start(interior("C", to(b)))
    routers = {"A": a, "B": b, "C": c}
    with trio.fail_after(60):
        # No event says "converged": poll, in virtual time (costs nothing).
        while any(not set(routers) - {rid} <= set(r.core.mesh.routes.next_hops) for rid, r in routers.items()):
            await trio.sleep(0.1)
    return routers


async def test_gathering_through_each_router_gets_every_routers_own_view(
    autojump_clock: trio.testing.MockClock, mem_network: MemNetwork
) -> None:
    routers = await chain(mem_network)
    expected_hops = {
        "A": {"B": "B", "C": "B"},
        "B": {"A": "A", "C": "C"},
        "C": {"A": "B", "B": "B"},
    }
    # Through B the others' replies come at once, and the old client's requests took each
    # other's about half the time: gathered a few times over (as `topology watch` does).
    for bus in ("A", "C", *["B"] * 8):
        async with routers[bus].connect() as client, management_session(client, timeout_s=TIMEOUT_S) as mgmt:
            started = trio.current_time()
            network = await gather(mgmt, each_router=True)
            elapsed = trio.current_time() - started
            assert mgmt.pending == 0
        assert network.bus == bus
        assert set(network.routers) == {"A", "B", "C"}
        errors = {rid: info.error for rid, info in network.routers.items() if info.error}
        assert errors == {}, f"through {bus}: {errors}"
        # Each router's routes are its own answer (next hops as it sees them), all three of them.
        assert {rid: {d: hop for d, (hop, _) in info.routes.items()} for rid, info in network.routers.items()} == expected_hops
        assert elapsed < TIMEOUT_S / 2, f"through {bus}: took {elapsed:g} s: a router's view waited for its time-out"


async def test_topology_address_asks_every_router_at_once(autojump_clock: trio.testing.MockClock, mem_network: MemNetwork) -> None:
    routers = await chain(mem_network)
    async with routers["C"].connect() as consumer:
        await consumer.open_receiver("orders", credit=1)
        with trio.fail_after(30):
            while any(not (entry := routers[r].core.table.find("orders")) or not entry.remote for r in ("A", "B")):
                await trio.sleep(0.1)  # the advert crosses the mesh (no event to await across routers)
        for bus in ("A", "B") * 4:  # a few times over: the old client lost replies only some of the time
            async with routers[bus].connect() as client, management_session(client, timeout_s=TIMEOUT_S) as mgmt:
                network = await gather(mgmt, each_router=False)
                started = trio.current_time()
                seen = await address_everywhere(mgmt, network, "orders")
                elapsed = trio.current_time() - started
            assert [at.router for at in seen] == ["A", "B", "C"]
            assert {at.router: at.error for at in seen if at.error} == {}
            assert {at.router: (at.info.local_consumers, at.info.remote_routers) for at in seen if at.info} == {
                "A": (0, ["C"]), "B": (0, ["C"]), "C": (1, []),
            }
            assert elapsed < TIMEOUT_S / 2, f"through {bus}: took {elapsed:g} s: a router's answer waited for its time-out"
