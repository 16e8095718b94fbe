"""Link routes through an edge router, end to end over sockets: in-process routers (an interior
and an edge with an uplink to it), the Proton C example broker as the route container, and
python-qpid-proton clients (BlockingConnection on a thread).

What is proved: a client of the edge router reaches a broker behind the interior (and one
behind the edge reaches clients of the interior), messages, credit and outcomes end to end;
the routers keep no pair once the clients are gone; a client of the edge commits and rolls back
transactions through the interior's `$coordinator` route (a Proton Python coordinator).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
from proton import Message

from router.config.models import RouterConfig
from router.net.server import RouterServer

from .support.brokers import CBroker, TxnCoordinator
from .support.interop import run_in_thread
from .test_link_routes import TIMEOUT_S, c_broker, c_broker_program, committed_and_rolled_back, connect  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.interop]

ROUTES = [{"prefix": "q", "direction": "in", "connection": "broker"},
          {"prefix": "q", "direction": "out", "connection": "broker"}]  # fmt: skip


def _broker_connector(port: int) -> dict[str, Any]:
    return {"name": "broker", "host": "127.0.0.1", "port": port, "role": "route-container",
            "reconnect_initial_s": 0.05, "reconnect_max_s": 0.1}  # fmt: skip


@asynccontextmanager
async def interior_and_edge(
    broker_port: int, broker_on: str, routes: list[dict[str, Any]] = ROUTES
) -> AsyncIterator[tuple[RouterServer, RouterServer, int, int]]:  # fmt: skip
    """Interior I (listeners for clients and edges) and edge E (an uplink to I); the broker's
    connector and the `routes` on `broker_on` ("I" or "E"). Yields both and their client ports,
    once the router without the broker has learnt every route."""
    interior: dict[str, Any] = {
        "router": {"id": "I", "mode": "interior"},
        "listeners": [{"name": "amqp", "port": 0}, {"name": "edges", "port": 0, "role": "edge"}],
    }
    edge: dict[str, Any] = {"router": {"id": "E", "mode": "edge"}, "listeners": [{"name": "amqp", "port": 0}]}
    with_broker = interior if broker_on == "I" else edge
    with_broker["connectors"] = [_broker_connector(broker_port)]
    with_broker["link_routes"] = routes
    i = RouterServer(RouterConfig.model_validate(interior))
    async with trio.open_nursery() as nursery:
        addresses = await nursery.start(i.run)
        i_port, edge_port = addresses[0][2], addresses[1][2]
        edge.setdefault("connectors", []).append({"name": "up", "host": "127.0.0.1", "port": edge_port, "role": "edge"})
        e = RouterServer(RouterConfig.model_validate(edge))
        e_port = (await nursery.start(e.run))[0][2]
        learner = e if broker_on == "I" else i
        with_broker_server = i if broker_on == "I" else e
        with trio.fail_after(TIMEOUT_S):  # the edge's address exchange, across sockets: polled
            while not with_broker_server.core.link_routes.containers or (
                len(learner.core.link_routes.remote_routes) + len(learner.core.link_routes.at_edges.routes) < len(routes)
            ):
                await trio.sleep(0.01)
        try:
            yield i, e, i_port, e_port
        finally:
            for server in (e, i):
                server.shutdown()
            with trio.fail_after(5):
                await e.wait_stopped()
                await i.wait_stopped()


def send_and_receive(port: int, address: str) -> list[Any]:
    conn = connect(port)
    try:
        sender = conn.create_sender(address)
        for i in range(12):  # more than the broker's credit window of 5: credit end to end
            sender.send(Message(body=f"m{i}"))  # waits for the broker's outcome
        receiver = conn.create_receiver(address, credit=3)
        return [receiver.receive(timeout=TIMEOUT_S).body for _ in range(12)]
    finally:
        conn.close()


async def test_a_client_of_the_edge_reaches_the_broker_behind_the_interior(c_broker: CBroker) -> None:
    async with interior_and_edge(c_broker.port, broker_on="I") as (i, e, _, e_port):
        assert await run_in_thread(send_and_receive, e_port, "q.from-edge") == [f"m{n}" for n in range(12)]
        assert e.core.table.find("q.from-edge") is None  # routed, not a mobile address
        with trio.fail_after(TIMEOUT_S):  # the client's close reaches the broker's side: polled
            while i.core.link_routes.pairs or e.core.link_routes.pairs:
                await trio.sleep(0.01)


async def test_a_client_of_the_interior_reaches_the_broker_behind_the_edge(c_broker: CBroker) -> None:
    async with interior_and_edge(c_broker.port, broker_on="E") as (i, e, i_port, _):
        assert await run_in_thread(send_and_receive, i_port, "q.to-edge") == [f"m{n}" for n in range(12)]
        assert i.core.table.find("q.to-edge") is None
        with trio.fail_after(TIMEOUT_S):
            while i.core.link_routes.pairs or e.core.link_routes.pairs:
                await trio.sleep(0.01)


async def test_transactions_from_a_client_of_the_edge() -> None:
    # The coordinator link goes up the uplink to the interior's `$coordinator` route: the edge
    # no longer refuses it as a router that cannot coordinate transactions.
    routes = [{"prefix": "$coordinator", "direction": "in", "connection": "broker"},
              {"prefix": "txn", "direction": "in", "connection": "broker"}]  # fmt: skip
    with TxnCoordinator.running() as coordinator:
        async with interior_and_edge(coordinator.port, broker_on="I", routes=routes) as (_, _, _, e_port):
            await committed_and_rolled_back(e_port, coordinator)
