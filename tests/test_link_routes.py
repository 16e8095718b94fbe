"""Link routes end to end: an in-process router with route-container connectors to brokers we did
not write (the Proton C example broker, and a Proton Python broker for the outcomes it can give
and dynamic nodes), driven by python-qpid-proton clients (BlockingConnection on a thread).

What is proved: attaches matching a link route are answered by the container (address rewriting
included), messages, credit and outcomes go end to end, an attach with no container anywhere is
refused with amqp:not-found naming the address, and losing the container detaches the routed
links with an error and leaves no pair behind.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml
from proton import Delivery, Message, symbol
from proton.handlers import MessagingHandler, TransactionHandler
from proton.reactor import Container
from proton.utils import BlockingConnection, LinkDetached

from router.config.loader import parse_config
from router.config.models import RouterConfig
from router.net.server import RouterServer

from .support.brokers import CBroker, TxnCoordinator, build_c_broker
from .support.interop import run_container, run_in_thread
from .support.proton_broker import ProtonBroker

pytestmark = [pytest.mark.interop]

TIMEOUT_S = 10.0


@pytest.fixture(scope="module")
def c_broker_program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_c_broker(tmp_path_factory.mktemp("proton-c-broker"))


@pytest.fixture
def c_broker(c_broker_program: Path) -> Iterator[CBroker]:
    with CBroker.running(c_broker_program) as broker:
        yield broker


def config(broker_port: int, *routes: dict[str, Any], **extra: Any) -> RouterConfig:
    return RouterConfig.model_validate({
        "router": {"id": "r1"},
        "listeners": [{"name": "amqp", "port": 0, "max_links_per_connection": 4}],
        "connectors": [{"name": "broker", "host": "127.0.0.1", "port": broker_port, "role": "route-container",
                        "reconnect_initial_s": 0.05, "reconnect_max_s": 0.1}],
        "link_routes": list(routes) or [
            {"prefix": "q", "direction": "in", "connection": "broker"},
            {"prefix": "q", "direction": "out", "connection": "broker"},
        ],
        **extra,
    })  # fmt: skip


@asynccontextmanager
async def running(cfg: RouterConfig, *, containers: int = 1) -> AsyncIterator[tuple[RouterServer, int]]:
    """The router, once `containers` route-container connections are open."""
    server = RouterServer(cfg)
    async with trio.open_nursery() as nursery:
        port = (await nursery.start(server.run))[0][2]
        with trio.fail_after(TIMEOUT_S):  # across the broker's socket: no event to await
            while len(server.core.link_routes.containers) < containers:
                await trio.sleep(0.01)
        try:
            yield server, port
        finally:
            server.shutdown()
            with trio.fail_after(5):
                await server.wait_stopped()


def routed_links(server: RouterServer) -> dict[str, int]:
    """routedLinkCount of each link route, read through management."""
    _, rows = server.agent.query("linkRoute", ["name", "routedLinkCount"])
    return {name: count for name, count in rows}


def link_counts(server: RouterServer) -> dict[str, int]:
    """linkCount of the router's connections by role (management's connection entities;
    management's own connection, if any, is not a client of these tests)."""
    _, rows = server.agent.query("connection", ["role", "linkCount"])
    return {role: count for role, count in rows}


def connect(port: int) -> BlockingConnection:
    return BlockingConnection(f"127.0.0.1:{port}", timeout=TIMEOUT_S)


async def test_send_and_receive_through_the_c_broker(c_broker: CBroker) -> None:
    async with running(config(c_broker.port)) as (server, port):

        def client() -> list[Any]:
            conn = connect(port)
            try:
                sender = conn.create_sender("q.orders")
                for i in range(12):  # more than the broker's credit window of 5: credit end to end
                    sender.send(Message(body=f"m{i}"))  # waits for the broker's outcome
                receiver = conn.create_receiver("q.orders", credit=20)
                bodies = [receiver.receive(timeout=TIMEOUT_S).body for _ in range(12)]
                plain = conn.create_sender("not-routed")  # other addresses are the router's own
                assert plain.link.remote_target.address == "not-routed"
                return bodies
            finally:
                conn.close()

        bodies = await run_in_thread(client)
        assert bodies == [f"m{i}" for i in range(12)]
        # The attaches reached the broker, not the router's address table.
        assert server.core.table.find("q.orders") is None


async def test_no_container_anywhere_refuses_with_not_found() -> None:
    with ProtonBroker.running() as broker:
        cfg = config(broker.port, {"prefix": "q", "direction": "in", "connection": "broker"},
                     {"prefix": "elsewhere", "direction": "in", "connection": "missing"})  # fmt: skip
        async with running(cfg) as (_, port):

            def client() -> str:
                conn = connect(port)
                try:
                    with pytest.raises(LinkDetached) as refused:
                        conn.create_sender("elsewhere.orders")
                    return str(refused.value)
                finally:
                    conn.close()

            refusal = await run_in_thread(client)
            assert "amqp:not-found" in refusal and "elsewhere.orders" in refusal


async def test_every_outcome_and_address_rewriting_through_the_proton_broker() -> None:
    with ProtonBroker.running() as broker:
        cfg = config(broker.port,
                     {"prefix": "broker", "direction": "in", "connection": "broker", "del_external_prefix": "broker/"},
                     {"prefix": "broker", "direction": "out", "connection": "broker", "del_external_prefix": "broker/"})  # fmt: skip
        async with running(cfg) as (_, port):

            def client() -> dict[str, Any]:
                conn = connect(port)
                seen: dict[str, Any] = {}
                try:
                    for kind in ("queue", "reject", "release", "modify"):
                        sender = conn.create_sender(f"broker/{kind}/a")
                        seen[f"{kind}-target"] = sender.link.remote_target.address
                        delivery = sender.send(Message(body=kind), error_states=[])
                        seen[kind] = delivery.remote_state
                        if kind == "reject":
                            seen["condition"] = delivery.remote.condition
                        if kind == "modify":
                            seen["annotations"] = delivery.remote.annotations
                        sender.close()
                    receiver = conn.create_receiver("broker/queue/a", credit=1)
                    message = receiver.receive(timeout=TIMEOUT_S)
                    receiver.accept()
                    seen["received"] = message.body
                    return seen
                finally:
                    conn.close()

            seen = await run_in_thread(client)
            assert seen["queue"] == Delivery.ACCEPTED
            assert seen["reject"] == Delivery.REJECTED and seen["condition"].name == "amqp:precondition-failed"
            assert seen["release"] == Delivery.RELEASED
            assert seen["modify"] == Delivery.MODIFIED
            assert seen["annotations"][symbol("x-opt-reason")] == "retry later"
            assert seen["received"] == "queue"
            # The broker saw its own names; the client its own.
            assert seen["queue-target"] == "broker/queue/a"
            broker.wait_for(lambda b: any(a.address == "queue/a" for a in b.arrivals))
            broker.wait_for(lambda b: [o.state for o in b.outcomes] == [Delivery.ACCEPTED])


async def test_dynamic_receiver_through_a_link_route() -> None:
    with ProtonBroker.running() as broker:
        cfg = config(broker.port,
                     {"prefix": "broker", "direction": "in", "connection": "broker", "del_external_prefix": "broker/"},
                     {"prefix": "broker", "direction": "out", "connection": "broker", "del_external_prefix": "broker/"})  # fmt: skip
        async with running(cfg) as (_, port):

            def client() -> tuple[str, str]:
                conn = connect(port)
                try:
                    receiver = conn.create_receiver(None, dynamic=True, credit=1,
                                                    options=_DynamicRoute("broker/anything"))  # fmt: skip
                    address = receiver.link.remote_source.address
                    conn.create_sender(address).send(Message(body="to the dynamic node"))
                    return address, receiver.receive(timeout=TIMEOUT_S).body
                finally:
                    conn.close()

            address, body = await run_in_thread(client)
            assert address.startswith("broker/dynamic/")  # the container named it (dynamic/N: prefix restored)
            assert body == "to the dynamic node"


class _DynamicRoute:
    """A link option: the dynamic-node-property that names the link route (the anchors' x-opt-qd.address)."""

    def __init__(self, address: str) -> None:
        self.address = address

    def apply(self, link: Any) -> None:
        link.source.properties.put_dict({symbol("x-opt-qd.address"): self.address})

    def test(self, link: Any) -> bool:
        return True


async def test_broker_lost_detaches_routed_links_and_leaves_no_pair(c_broker: CBroker) -> None:
    async with running(config(c_broker.port)) as (server, port):
        conn = await run_in_thread(connect, port)
        try:
            sender = await run_in_thread(conn.create_sender, "q.lost")
            receiver = await run_in_thread(lambda: conn.create_receiver("q.lost", credit=10))
            await run_in_thread(sender.send, Message(body="before"))
            assert len(server.core.link_routes.pairs) == 2
            assert routed_links(server) == {"in:q": 1, "out:q": 1}
            assert link_counts(server) == {"normal": 2, "route-container": 2}
            c_broker.kill()

            def after() -> tuple[str, str]:
                with pytest.raises(LinkDetached) as send_failed:
                    sender.send(Message(body="after"))
                with pytest.raises(LinkDetached) as receive_failed:
                    while True:
                        receiver.receive(timeout=TIMEOUT_S)
                return str(send_failed.value), str(receive_failed.value)

            send_error, receive_error = await run_in_thread(after)
            for error in (send_error, receive_error):
                assert "amqp:not-found" in error and "routed link lost" in error
            assert not server.core.link_routes.pairs
            assert all(not state.routed for state in server.core.connections.values())
            # Management shows neither the pairs nor an active route any more.
            assert routed_links(server) == {"in:q": 0, "out:q": 0}
            assert link_counts(server)["normal"] == 0  # the client's connection holds no link
            _, rows = server.agent.query("linkRoute", ["operStatus"])
            assert rows == [["inactive"], ["inactive"]]
        finally:
            await run_in_thread(conn.close)


async def test_routed_links_count_against_the_link_limit(c_broker: CBroker) -> None:
    async with running(config(c_broker.port)) as (_, port):

        def client() -> str:
            conn = connect(port)
            try:
                for i in range(4):  # max_links_per_connection: 4
                    conn.create_sender(f"q.limit{i}")
                with pytest.raises(LinkDetached) as refused:
                    conn.create_sender("q.limit4")
                return str(refused.value)
            finally:
                conn.close()

        assert "amqp:resource-limit-exceeded" in await run_in_thread(client)


def two_routers(broker_port: int, routes: list[dict[str, Any]] | None = None) -> tuple[RouterConfig, Any]:
    """Router A (clients) and, given A's inter-router port, router B (the broker's)."""
    a = RouterConfig.model_validate({
        "router": {"id": "A", "mode": "interior"},
        "listeners": [{"name": "amqp", "port": 0}, {"name": "mesh", "port": 0, "role": "inter-router"}],
    })  # fmt: skip

    def b(mesh_port: int) -> RouterConfig:
        return RouterConfig.model_validate({
            "router": {"id": "B", "mode": "interior"},
            "listeners": [{"name": "amqp", "port": 0}],
            "connectors": [
                {"name": "to-a", "host": "127.0.0.1", "port": mesh_port, "role": "inter-router"},
                {"name": "broker", "host": "127.0.0.1", "port": broker_port, "role": "route-container",
                 "reconnect_initial_s": 0.05, "reconnect_max_s": 0.1},
            ],
            "link_routes": routes or [
                {"prefix": "q", "direction": "in", "connection": "broker"},
                {"prefix": "q", "direction": "out", "connection": "broker"},
            ],
        })  # fmt: skip

    return a, b


@asynccontextmanager
async def mesh_of_two(broker_port: int, routes: list[dict[str, Any]] | None = None,
                      ) -> AsyncIterator[tuple[RouterServer, RouterServer, int]]:  # fmt: skip
    """A and B connected, once A has learnt of both of B's routes (its clients' port with them)."""
    a_config, b_config = two_routers(broker_port, routes)
    a = RouterServer(a_config)
    async with trio.open_nursery() as nursery:
        addresses = await nursery.start(a.run)
        client_port, mesh_port = addresses[0][2], addresses[1][2]
        b = RouterServer(b_config(mesh_port))
        await nursery.start(b.run)
        with trio.fail_after(TIMEOUT_S):  # the mesh's address exchange, across sockets: polled
            while len(a.core.link_routes.remote_routes) < 2:
                await trio.sleep(0.01)
        try:
            yield a, b, client_port
        finally:
            for server in (a, b):
                server.shutdown()
            with trio.fail_after(5):
                await a.wait_stopped()
                await b.wait_stopped()


async def test_send_and_receive_through_two_routers(c_broker: CBroker) -> None:
    async with mesh_of_two(c_broker.port) as (a, b, port):

        def client() -> list[Any]:
            conn = connect(port)
            try:
                sender = conn.create_sender("q.far")
                for i in range(12):
                    sender.send(Message(body=f"m{i}"))
                receiver = conn.create_receiver("q.far", credit=3)  # less than sent: credit end to end
                bodies = []
                for _ in range(12):  # (the broker sends them presettled)
                    bodies.append(receiver.receive(timeout=TIMEOUT_S).body)
                return bodies
            finally:
                conn.close()

        assert await run_in_thread(client) == [f"m{i}" for i in range(12)]
        # Each hop pairs its incoming link with an outgoing one: both routers relayed.
        assert not a.core.link_routes.pairs and not b.core.link_routes.pairs  # all gone with the client


async def test_broker_lost_behind_another_router(c_broker: CBroker) -> None:
    async with mesh_of_two(c_broker.port) as (a, b, port):
        conn = await run_in_thread(connect, port)
        try:
            sender = await run_in_thread(conn.create_sender, "q.lost")
            await run_in_thread(sender.send, Message(body="before"))
            assert len(a.core.link_routes.pairs) == 1 and len(b.core.link_routes.pairs) == 1
            c_broker.kill()

            def after() -> str:
                with pytest.raises(LinkDetached) as failed:
                    sender.send(Message(body="after"))
                return str(failed.value)

            error = await run_in_thread(after)
            assert "amqp:not-found" in error and "routed link lost" in error
            assert not a.core.link_routes.pairs and not b.core.link_routes.pairs
            # And A no longer believes in a container.
            with trio.fail_after(TIMEOUT_S):
                while a.core.link_routes.remote_routes:
                    await trio.sleep(0.01)

            # No route known at A any more: the address is the router's own again (not link-routed).
            def plain() -> Any:
                other = connect(port)
                try:
                    return other.create_sender("q.lost").link.remote_target.address
                finally:
                    other.close()

            assert await run_in_thread(plain) == "q.lost"
        finally:
            await run_in_thread(conn.close)


class _Transactions(MessagingHandler, TransactionHandler):
    """A python-qpid-proton client: two messages in a transaction it commits, one in a transaction
    it rolls back, through the router's `$coordinator` link route."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.events: list[str] = []
        self.sender: Any = None
        self.conn: Any = None
        self.round = 0

    def on_start(self, event: Any) -> None:
        self.conn = event.container.connect(self.url)
        self.sender = event.container.create_sender(self.conn, "txn.orders")
        event.container.declare_transaction(self.conn, handler=self)

    def on_transaction_declared(self, event: Any) -> None:
        self.events.append("declared")
        txn = event.transaction
        if self.round == 0:
            txn.send(self.sender, Message(body="one"))
            txn.send(self.sender, Message(body="two"))
            txn.commit()
        else:
            txn.send(self.sender, Message(body="three"))
            txn.abort()

    def on_transaction_committed(self, event: Any) -> None:
        self.events.append("committed")
        self.round = 1
        event.container.declare_transaction(self.conn, handler=self)

    def on_transaction_aborted(self, event: Any) -> None:
        self.events.append("aborted")
        self.conn.close()

    def on_transaction_declare_failed(self, event: Any) -> None:
        self.events.append("declare failed")
        self.conn.close()

    def on_link_error(self, event: Any) -> None:
        self.events.append(f"link error {event.link.remote_condition}")
        self.conn.close()


async def test_transactions_through_a_coordinator_link_route() -> None:
    with TxnCoordinator.running() as coordinator:
        cfg = config(coordinator.port, {"prefix": "$coordinator", "direction": "in", "connection": "broker"},
                     {"prefix": "txn", "direction": "in", "connection": "broker"})  # fmt: skip
        async with running(cfg) as (_, port):
            await committed_and_rolled_back(port, coordinator)
            assert "amqp:local-transactions" in coordinator.coordinator_capabilities


async def committed_and_rolled_back(port: int, coordinator: TxnCoordinator) -> None:
    """_Transactions through the router at `port`: the coordinator committed the first
    transaction and rolled back the second, each transfer with its transactional state."""
    client = _Transactions(f"127.0.0.1:{port}")
    await run_in_thread(run_container, Container(client))
    assert client.events == ["declared", "committed", "declared", "aborted"]
    coordinator.wait_for(lambda c: len(c.rolled_back) == 1)
    first, second = coordinator.declared
    assert coordinator.committed == [first] and coordinator.rolled_back == [second]
    # The transfers carried their transactional state end to end.
    assert coordinator.messages == [(first, "one"), (first, "two"), (second, "three")]


async def test_coordinator_without_a_route_is_refused_honestly(c_broker: CBroker) -> None:
    async with running(config(c_broker.port)) as (_, port):
        client = _Transactions(f"127.0.0.1:{port}")
        await run_in_thread(run_container, Container(client))
        assert len(client.events) == 1 and "amqp:precondition-failed" in client.events[0]
        assert "transaction coordinator" in client.events[0]


async def test_the_configuration_in_docs_brokers_md_works(c_broker: CBroker) -> None:
    """docs/brokers.md's link-route configuration, with the ports made free ones, serves a
    message to the broker and back."""
    doc = Path(__file__).resolve().parent.parent / "docs" / "brokers.md"
    if not doc.exists():
        pytest.skip("docs/ is not beside these tests (the installed wheel's test copy)")
    text = doc.read_text()
    section = text.split("## Link routes", 1)[1]
    data = yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])
    for listener in data["listeners"]:
        listener["port"] = 0
    data["connectors"][0].update(port=c_broker.port, reconnect_initial_s=0.05, reconnect_max_s=0.1)
    async with running(parse_config(data, "docs/brokers.md")) as (_, port):

        def client() -> Any:
            conn = connect(port)
            try:
                conn.create_sender("queue.orders").send(Message(body="from the docs"))
                return conn.create_receiver("queue.orders", credit=1).receive(timeout=TIMEOUT_S).body
            finally:
                conn.close()

        assert await run_in_thread(client) == "from the docs"


async def test_every_outcome_through_two_routers() -> None:
    routes = [{"prefix": "broker", "direction": d, "connection": "broker", "del_external_prefix": "broker/"}
              for d in ("in", "out")]  # fmt: skip
    with ProtonBroker.running() as broker:
        async with mesh_of_two(broker.port, routes) as (_, _, port):

            def client() -> dict[str, Any]:
                conn = connect(port)
                try:
                    seen = {}
                    for kind in ("queue", "reject", "release", "modify"):
                        sender = conn.create_sender(f"broker/{kind}/b")
                        seen[kind] = sender.send(Message(body=kind), error_states=[]).remote_state
                    receiver = conn.create_receiver("broker/queue/b", credit=1)
                    seen["received"] = receiver.receive(timeout=TIMEOUT_S).body
                    receiver.reject()
                    return seen
                finally:
                    conn.close()

            seen = await run_in_thread(client)
            assert (seen["queue"], seen["reject"], seen["release"], seen["modify"]) == (
                Delivery.ACCEPTED, Delivery.REJECTED, Delivery.RELEASED, Delivery.MODIFIED)
            assert seen["received"] == "queue"
            broker.wait_for(lambda b: [o.state for o in b.outcomes] == [Delivery.REJECTED])


async def test_routed_links_that_detach_leave_no_cyclic_garbage(c_broker: CBroker) -> None:
    """A routed pair (the client's link and ours to the broker) refers to itself both ways; once
    both links are detached, nothing of it is left for the cyclic collector (as for the router's
    other links: tests/test_net_garbage.py)."""
    from router.amqp.message import Message as AmqpMessage
    from router.core.linkrelay import RoutedLink
    from router.net.client import connect as trio_connect

    from .test_net_garbage import cyclic_garbage

    async with running(config(c_broker.port)) as (server, port):
        async with trio_connect("127.0.0.1", port) as client:
            async def pair(i: int) -> None:
                sender = await client.open_sender(f"q.garbage-{i}")
                await (await sender.start_send(AmqpMessage.value(i))).wait()
                receiver = await client.open_receiver(f"q.garbage-{i}", credit=1)
                receiver.accept(await receiver.receive())
                await sender.close()
                await receiver.close()

            await pair(0)  # (the router's lazily made parts exist before counting)
            with cyclic_garbage(extra=(RoutedLink,)) as garbage:
                for i in range(1, 6):
                    await pair(i)
                with trio.fail_after(TIMEOUT_S):  # the broker's detaches cross its socket
                    while server.core.link_routes.link_pairs.pairs:
                        await trio.sleep(0.01)
        assert garbage == []
