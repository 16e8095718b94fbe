"""Inter-router connections, sans-IO: recognising the peer router, refusing the wrong role on a
listener, the control and data links, link costs, routers learning each other (2 and 3 in a
line), neighbour loss at once when a connection drops, and two connections to one router."""

from __future__ import annotations

import pytest

from router.amqp.connection import Connection, ConnectionConfig
from router.amqp.events import RemoteClose
from router.amqp.message import Message
from router.amqp.sasl import SaslServerConfig
from router.config.models import (
    PRIORITY_BANDS_DEFAULT, STREAMING_LINKS_DEFAULT, Connector, Listener, RouterConfig, RouterSection,
)
from router.core.connections import new_engine, new_outgoing_engine
from router.core.interrouter import COST_PROPERTY, MESH_VERSION, ROLE_PROPERTY, VERSION_PROPERTY, ControlIn, ControlOut
from router.core.links import InLink, OutLink
from router.core.router import RouterCore
from router.testing.meshharness import CLIENTS, INTER_ROUTER, MeshHarness, Wire


def _line(*ids: str, **kw: object) -> MeshHarness:
    h = MeshHarness()
    for i, rid in enumerate(ids):
        h.router(rid, instance=i + 1)
    for a, b in zip(ids, ids[1:]):
        h.link(a, b, **kw)  # type: ignore[arg-type]
    return h


def _close_error(engine: Connection, events: list[object]) -> str | None:
    closes = [e for e in events if isinstance(e, RemoteClose)]
    return closes[0].error.condition if closes and closes[0].error else None


def test_routers_exchange_role_version_and_cost_in_their_opens() -> None:
    h = _line("A", "B", cost=3)
    wire = h.wire_between("A", "B")
    for engine, peer in ((wire.a, "B"), (wire.b, "A")):
        remote = engine.remote_open
        assert remote is not None and remote.container_id == peer
        props = {str(k): v for k, v in (remote.properties or {}).items()}
        assert props[ROLE_PROPERTY] == "inter-router"
        assert props[VERSION_PROPERTY] == MESH_VERSION == 2 and props[COST_PROPERTY] == 3


def test_each_router_attaches_a_control_and_a_data_link_and_answers_the_peers() -> None:
    h = _line("A", "B")
    for rid, other in (("A", "B"), ("B", "A")):
        core = h.cores[rid]
        peer = core.mesh.peers[other]
        assert peer.control_out is not None and peer.control_out.active
        assert isinstance(peer.control_out.context, ControlOut)
        state = peer.conn
        # one data link per priority band each way (docs/mesh.md, "Priorities") and the
        # streaming links, each in a session of its own, apart from the control link's (a
        # band's or a stream's window shuts alone)
        data_links = PRIORITY_BANDS_DEFAULT + STREAMING_LINKS_DEFAULT
        assert len(state.out_links) == len(state.in_links) == data_links
        assert peer.bands is not None and peer.data_out in peer.bands
        assert set(peer.bands) | set(peer.streams) == state.out_links and len(peer.streams) == STREAMING_LINKS_DEFAULT
        assert all(out.streams is peer.streams for out in peer.bands)
        sessions = {out.link.session for out in state.out_links}
        assert len(sessions) == data_links and peer.control_out.session not in sessions
        assert all(s.watch_window for s in sessions) and not peer.control_out.session.watch_window
        for data_out in state.out_links:
            assert isinstance(data_out, OutLink) and data_out.neighbour == other and data_out.link.active
            # the receiving side grants a generous window at once, whatever the destinations
            assert data_out.link.credit >= 1000
        for data_in in state.in_links:
            assert isinstance(data_in, InLink) and data_in.peer == other and data_in.entry is None
        receivers = [l for s in state.engine.sessions for l in s.links if isinstance(l.context, ControlIn)]
        assert len(receivers) == 1 and receivers[0].active


def test_two_routers_learn_each_other() -> None:
    h = _line("A", "B")
    took = h.converge()
    assert took < 2
    a, b = h.cores["A"].mesh, h.cores["B"].mesh
    assert dict(a.routes.next_hops) == {"B": "B"} and dict(b.routes.next_hops) == {"A": "A"}
    assert a.node is not None and a.node.counters.received.get("HELLO", 0) >= 1


def test_three_routers_in_a_line_converge_with_costs_and_next_hops() -> None:
    h = _line("A", "B", "C", cost=2)
    h.converge()
    routes = h.cores["A"].mesh.routes
    assert dict(routes.next_hops) == {"B": "B", "C": "B"}
    assert dict(routes.costs) == {"B": 2, "C": 4}
    assert h.cores["C"].mesh.routes.next_hops["A"] == "B"


def test_link_cost_is_the_larger_of_both_ends() -> None:
    h = MeshHarness()
    h.router("A", instance=1)
    h.router("B", instance=2)
    h.link("A", "B", cost=2, b_cost=7)
    h.converge()
    assert h.cores["A"].mesh.routes.costs["B"] == 7
    assert h.cores["B"].mesh.routes.costs["A"] == 7
    assert h.cores["A"].mesh.peers["B"].cost == 7


def test_neighbour_is_lost_at_once_when_the_connection_drops() -> None:
    h = _line("A", "B", "C")
    h.converge()
    h.cut(h.wire_between("B", "C"))
    h.advance(0.1)  # routes are recomputed right after the change, no dead interval waited
    assert dict(h.cores["A"].mesh.routes.next_hops) == {"B": "B"}
    assert dict(h.cores["B"].mesh.routes.next_hops) == {"A": "A"}
    assert h.cores["C"].mesh.routes.reachable == frozenset()
    assert "C" not in h.cores["B"].mesh.peers


def _raw_client(core: RouterCore, listener: Listener, properties: dict[str, object] | None,
                container: str = "someone") -> tuple[Connection, list[object]]:  # fmt: skip
    """A hand-made engine opening to `core` on `listener` with the given open properties."""
    router_side = new_engine(core.config, listener)
    core.accept(router_side, listener)
    client = Connection(ConnectionConfig(container_id=container))
    client.open(properties=properties)
    events: list[object] = []
    for _ in range(20):
        data = client.data_to_send()
        if data:
            router_side.receive_data(data, 1.0)
        core.handle(router_side, router_side.events(), 1.0)
        back = router_side.data_to_send()
        if back:
            client.receive_data(back, 1.0)
        events += client.events()
    return client, events


def _interior(rid: str = "R1") -> RouterCore:
    return RouterCore(RouterConfig(router=RouterSection(id=rid, mode="interior"), listeners=(CLIENTS, INTER_ROUTER)))


def test_a_client_on_an_inter_router_listener_is_refused() -> None:
    client, events = _raw_client(_interior(), INTER_ROUTER, None)
    assert _close_error(client, events) == "amqp:not-allowed"
    assert client.remote_error is not None and "mesh.role" in (client.remote_error.description or "")


def test_a_router_on_a_client_listener_is_refused() -> None:
    props = {ROLE_PROPERTY: "inter-router", VERSION_PROPERTY: 1, COST_PROPERTY: 1}
    client, events = _raw_client(_interior(), CLIENTS, props, container="R2")
    assert _close_error(client, events) == "amqp:not-allowed"
    assert "role normal" in (client.remote_error.description or "")  # type: ignore[union-attr]


def test_a_router_with_my_id_or_a_bad_cost_is_refused() -> None:
    props = {ROLE_PROPERTY: "inter-router", VERSION_PROPERTY: 1, COST_PROPERTY: 1}
    client, events = _raw_client(_interior("R1"), INTER_ROUTER, props, container="R1")
    assert _close_error(client, events) == "amqp:not-allowed"
    client, events = _raw_client(_interior("R1"), INTER_ROUTER, {**props, COST_PROPERTY: 0}, container="R2")
    assert _close_error(client, events) == "amqp:invalid-field"


def test_a_client_on_a_normal_listener_is_untouched_by_the_mesh() -> None:
    core = _interior()
    client, events = _raw_client(core, CLIENTS, {"x-app": "yes"})
    assert _close_error(client, events) is None and client.remote_open is not None
    assert core.mesh.peers == {}


def test_a_connector_refuses_a_peer_that_is_not_a_router() -> None:
    core = _interior("R1")
    connector = Connector(name="up", host="127.0.0.1", port=1)
    engine = new_outgoing_engine(core.config, connector)
    core.connect(engine, connector, 1.0)
    server = Connection(ConnectionConfig(container_id="broker", server=True,
                                         sasl_server=SaslServerConfig(mechanisms=("ANONYMOUS",))))  # fmt: skip
    for _ in range(10):
        data = engine.data_to_send()
        if data:
            server.receive_data(data, 1.0)
        for event in server.events():
            if type(event).__name__ == "RemoteOpen":
                server.open()
        back = server.data_to_send()
        if back:
            engine.receive_data(back, 1.0)
        core.handle(engine, engine.events(), 1.0)
    assert engine.state.local.name == "CLOSED"
    assert server.remote_error is not None and server.remote_error.condition == "amqp:not-allowed"
    assert core.mesh.peers == {}


def test_two_connections_opened_at_once_between_the_same_routers_keep_one() -> None:
    h = MeshHarness()
    h.router("A", instance=1)
    h.router("B", instance=2)
    h.link("A", "B", pump=False)
    h.link("B", "A", pump=False)  # both connect to each other at once: A (the smaller id) wins
    h.converge()
    a, b = h.cores["A"].mesh, h.cores["B"].mesh
    assert a.peers["B"].conn.outgoing and not b.peers["A"].conn.outgoing
    assert a.replaced_connections + a.refused_duplicates == 1
    assert b.replaced_connections + b.refused_duplicates == 1
    open_wires = [w for w in h.wires if isinstance(w, Wire) and not w.a.finished and w.a.state.local.name != "CLOSED"]
    assert len(open_wires) == 1


@pytest.mark.parametrize("direction", ["same", "crossed"])
def test_a_second_connection_claiming_a_live_router_is_refused_and_the_first_untouched(direction: str) -> None:
    h = _line("A", "B")
    h.converge()
    a, b = h.cores["A"].mesh, h.cores["B"].mesh
    first = a.peers["B"].conn
    wire = h.link("A", "B") if direction == "same" else h.link("B", "A")
    for end in (wire.a, wire.b):
        assert end.state.local.name == "CLOSED"
        assert end.remote_error is not None and end.remote_error.condition == "amqp:invalid-field"
        assert "already connected" in (end.remote_error.description or "")
    assert a.peers["B"].conn is first and a.refused_duplicates == 1 and a.replaced_connections == 0
    h.advance(5.0)
    assert a.peers["B"].conn is first and dict(a.routes.next_hops) == {"B": "B"}
    assert dict(b.routes.next_hops) == {"A": "A"}


def test_a_reconnect_gets_in_once_the_old_connection_is_seen_to_fail() -> None:
    h = _line("A", "B")
    h.converge()
    old = h.wire_between("A", "B")
    h.cut(old)
    h.link("A", "B")
    h.converge()
    assert h.cores["A"].mesh.peers["B"].conn.engine is h.wires[-1].a


def test_a_peer_detaching_a_router_link_gets_the_connection_closed() -> None:
    h = _line("A", "B", "C")
    h.converge()
    b = h.cores["B"].mesh
    b.peers["C"].data_out.link.detach()  # type: ignore[union-attr]
    h.pump()
    assert "B" not in h.cores["C"].mesh.peers and "C" not in b.peers
    h.advance(0.2)
    assert dict(h.cores["A"].mesh.routes.next_hops) == {"B": "B"}


def test_topo_all_reaches_local_consumers_on_a_lone_interior_router() -> None:
    h = MeshHarness()
    h.router("A", instance=1)
    consumer, producer = h.client("A", "c"), h.client("A", "p")
    rx = consumer.receiver("_local/svc")
    h.pump()
    rx.flow(5)
    tx = producer.sender("_topo/0/all/svc")
    h.pump()
    producer.send(tx, Message.value("me too"))
    h.pump()
    assert consumer.bodies(rx) == ["me too"]


def test_refusals_and_silent_closes_are_counted_in_the_read_api() -> None:
    h = _line("A", "B")
    h.converge()
    h.link("B", "A")
    counters = h.cores["A"].mesh.counters()
    assert counters["refusedDuplicates"] == 1 and counters["silentClosed"] == 0
