"""The mesh through management and the core's read API, sans-IO: `router.node` entities (one per
other router), the router entity's mode and node count, link states with costs, next hops,
routers with consumers per address, and how an address would be routed from a router."""

from __future__ import annotations

from typing import Any

from router.amqp.message import Message
from router.amqp.messaging import Properties, Source
from router.config.models import AddressConfig
from router.management.agent import ManagementAgent
from router.management.node import install
from router.testing.meshharness import MeshHarness


def _line(ids: str = "ABC", cost: int = 1, **router: Any) -> tuple[MeshHarness, dict[str, ManagementAgent]]:
    h = MeshHarness()
    agents = {}
    for i, rid in enumerate(ids):
        core = h.router(rid, instance=100 + i, **router)
        agents[rid] = ManagementAgent(core, core.config, None, 0.0, clock=lambda: 10.0)
        install(core, agents[rid])
    for a, b in zip(ids, ids[1:]):
        h.link(a, b, cost=cost)
    h.converge()
    return h, agents


def test_router_node_lists_every_other_router_with_its_route() -> None:
    h, agents = _line(cost=2)
    nodes = list(agents["A"].entity_type("router.node").entities(agents["A"], 10.0))
    assert [n["id"] for n in nodes] == ["A", "B", "C"]  # itself first, as qdstat -n shows it
    me, b, c = nodes
    assert (me["nextHop"], me["cost"], me["linkState"], me["linkCosts"]) == ("(self)", 0, ["B"], {"B": 2})
    assert (b["nextHop"], b["cost"], b["instance"], b["address"]) == ("B", 2, 101, "_topo/0/B/")
    assert (c["nextHop"], c["cost"], c["linkState"]) == ("B", 4, ["B"])
    assert b["linkState"] == ["A", "C"] and b["protocolVersion"] == 1 and b["linkCosts"] == {"A": 2, "C": 2}
    assert b["routerLink"] is not None and b["routerLink"] == c["routerLink"]  # both through B
    # valid origins at A: the routers whose traffic to B and C passes through A (none: A is an end)
    assert b["validOrigins"] == [] and c["validOrigins"] == []
    middle = {n["id"]: n for n in agents["B"].entity_type("router.node").entities(agents["B"], 10.0)}
    assert middle["C"]["validOrigins"] == ["A"] and middle["A"]["validOrigins"] == ["C"]


def test_router_entity_reports_interior_mode_and_node_count() -> None:
    h, agents = _line()
    (router,) = agents["B"].entity_type("router").entities(agents["B"], 10.0)
    assert router["mode"] == "interior" and router["nodeCount"] == 2


def test_read_api_link_states_addresses_and_explain() -> None:
    h, _ = _line(addresses=(AddressConfig(prefix="near", distribution="closest"),))
    for rid in ("A", "C"):
        h.client(rid, f"c{rid}").receiver("near.x")
    h.advance(0.5)
    mesh = h.cores["B"].mesh
    assert mesh.link_states() == {"A": {"B": 1}, "B": {"A": 1, "C": 1}, "C": {"B": 1}}
    assert mesh.address_routers() == {"near.x": ["A", "C"]}
    assert h.cores["A"].mesh.address_routers() == {"near.x": ["A", "C"]}
    assert set(mesh.neighbours()) == {"A", "C"} and mesh.neighbours()["A"]["two_way"]
    how = mesh.explain("near.x")
    assert how["distribution"] == "closest" and how["local_consumers"] == 0
    assert how["destinations"] == [{"router": "A", "cost": 1, "next_hop": "A"}, {"router": "C", "cost": 1, "next_hop": "C"}]
    assert how["chosen"] == ["A", "C"]  # equal costs: round robin
    assert h.cores["A"].mesh.explain("near.x")["chosen"] == ["A"]  # a local consumer is closest
    assert mesh.explain("_topo/0/C/$management")["next_hops"] == ["C"]
    assert mesh.explain("nobody")["routable"] is False


def test_a_remote_routers_nodes_are_queried_through_the_mesh() -> None:
    h, _ = _line()
    client = h.client("A", "admin")
    replies = client.receiver(None, source=Source(dynamic=True))
    h.pump()
    replies.flow(5)
    requests = client.sender(None)
    h.pump()
    reply_to = replies.remote_source.address
    query = Message.value(
        {"attributeNames": ["id", "nextHop", "cost"]},
        properties=Properties(message_id=1, to="_topo/0/C/$management", reply_to=reply_to),
        application_properties={"operation": "QUERY", "entityType": "org.apache.qpid.dispatch.router.node"},
    )  # fmt: skip
    client.send(requests, query)
    h.pump()
    (reply,) = client.received[replies]
    assert reply.message.application_properties["statusCode"] == 200  # type: ignore[index]
    assert reply.message.body_value["results"] == [["C", "(self)", 0], ["A", "B", 2], ["B", "B", 1]]


def test_router_wide_transit_keeps_counting_deliveries_of_inter_router_links_that_are_gone() -> None:
    h, agents = _line("AB")
    consumer = h.client("B", "c")
    rx = consumer.receiver("far")
    h.advance(0.5)
    rx.flow(10)
    producer = h.client("A", "p")
    tx = producer.sender("far")
    h.pump()
    for i in range(3):
        producer.send(tx, Message.value(i))
    h.pump()
    assert len(consumer.received[rx]) == 3

    def totals() -> tuple[int, int]:
        (router,) = agents["A"].entity_type("router").entities(agents["A"], 10.0)
        return router["deliveriesTransit"], router["deliveriesEgress"]

    assert totals() == (3, 0)
    h.cut(h.wire_between("A", "B"))  # A's data link to B is gone
    assert h.cores["A"].gone_transit.delivered == 3 and h.cores["A"].gone_out.delivered == 0
    assert totals() == (3, 0)
