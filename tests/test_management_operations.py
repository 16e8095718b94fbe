"""The management node in the anchors' operation dialect (qdmanage/qdstat requests), sans-IO:
requests and replies through a real RouterCore and client engines (tests/support/mgmt.py)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from router.amqp.message import Message
from router.amqp.messaging import Accepted, Data, Properties, Rejected
from router.config.models import AddressConfig, Listener, RouterConfig, RouterSection
from router.management.agent import ManagementAgent
from router.management.router_entities import NodeType

from .support.mgmt import MgmtHarness, StubControl

ADDRESS = "org.apache.qpid.dispatch.router.address"
NODE = {"type": "org.amqp.management", "name": "self"}  # what the anchors' tools send


def rows(m: MgmtHarness, entity_type: str, names: list[str], **app: object) -> list[dict[str, object]]:
    status, _, body = m.op("QUERY", {"attributeNames": names}, entityType=entity_type, **NODE, **app)
    assert status == 200
    assert body["attributeNames"] == names
    return [dict(zip(names, row)) for row in body["results"]]


def test_query_router_address_with_the_anchors_names_and_counters() -> None:
    m = MgmtHarness(RouterConfig(router=RouterSection(id="R1")))
    names = ["name", "distribution", "subscriberCount", "remoteCount", "deliveriesIngress", "deliveriesEgress"]
    assert {"M0$management", "L$management"} <= {r["name"] for r in rows(m, ADDRESS, names)}
    m.traffic("orders", 3)
    orders = next(r for r in rows(m, ADDRESS, names) if r["name"] == "M0orders")
    assert orders == {"name": "M0orders", "distribution": "balanced", "subscriberCount": 1, "remoteCount": 0,
                      "deliveriesIngress": 3, "deliveriesEgress": 3}  # fmt: skip
    # the short type name works too, and no attribute names means all of them
    status, _, body = m.op("QUERY", {}, entityType="router.address")
    assert status == 200 and {"key", "address", "released", "dropped", "expired"} <= set(body["attributeNames"])


def test_query_pages_with_offset_and_count() -> None:
    m = MgmtHarness()
    c = m.h.connect("consumers")
    for i in range(5):
        c.receiver(f"page.{i}")
    m.h.pump()
    everything = [r["name"] for r in rows(m, "router.address", ["name"])]
    # $management twice (mobile and local), the reply address, the five: in a stable order
    assert len(everything) == 8 and everything == sorted(everything)
    assert [r["name"] for r in rows(m, "router.address", ["name"], offset=2, count=3)] == everything[2:5]
    assert [r["name"] for r in rows(m, "router.address", ["name"], offset=5)] == everything[5:]
    assert rows(m, "router.address", ["name"], offset=50, count=10) == []
    assert m.op("QUERY", {}, entityType="router.address", count=-1)[0] == 400


def test_router_counters_grow_with_traffic_and_never_go_back() -> None:
    m = MgmtHarness()
    keys = ["acceptedDeliveries", "deliveriesIngress", "deliveriesEgress", "connectionCount", "linkCount"]

    def router() -> dict[str, object]:
        status, _, body = m.op("READ", type="router", name=m.h.config.router.id)
        assert status == 200
        return {k: body[k] for k in keys}

    before = router()
    client = m.traffic("counted", 4)
    during = router()
    assert during["connectionCount"] == before["connectionCount"] + 1  # type: ignore[operator]
    assert during["linkCount"] == before["linkCount"] + 2  # type: ignore[operator]
    # 4 messages plus the READ that asked (management requests are deliveries too)
    assert during["deliveriesIngress"] == before["deliveriesIngress"] + 5  # type: ignore[operator]
    assert during["acceptedDeliveries"] == before["acceptedDeliveries"] + 5  # type: ignore[operator]
    m.h.disconnect(client)
    after = router()
    assert after["deliveriesIngress"] == during["deliveriesIngress"] + 1  # type: ignore[operator]
    assert after["deliveriesEgress"] == during["deliveriesEgress"] + 1  # type: ignore[operator]
    assert after["connectionCount"] == before["connectionCount"]


def test_links_and_connections() -> None:
    m = MgmtHarness()
    client = m.h.connect("worker")
    receiver = client.receiver("jobs")
    m.h.pump()
    receiver.flow(7)
    m.h.pump()
    names = ["identity", "name", "linkDir", "linkType", "owningAddr", "connectionId", "creditAvailable", "capacity"]
    link = next(r for r in rows(m, "router.link", names) if r["owningAddr"] == "M0jobs")
    assert link["linkDir"] == "out" and link["linkType"] == "endpoint" and link["name"] == receiver.name
    assert link["creditAvailable"] == 7 and link["capacity"] == 1000
    connection = str(int(link["connectionId"]))  # type: ignore[call-overload]
    status, _, conn = m.op("READ", type="connection", identity=connection)
    assert status == 200 and conn["container"] == "worker" and conn["linkCount"] == 1 and conn["opened"]
    assert conn["role"] == "normal" and conn["dir"] == "in" and conn["uptimeSeconds"] == 0
    m.h.advance(5)
    assert m.op("READ", type="connection", identity=connection)[2]["uptimeSeconds"] == 5


def test_address_rules_created_at_run_time_apply_to_new_addresses() -> None:
    m = MgmtHarness()
    consumers = m.h.connect("consumers")

    def distribution(address: str) -> object:
        consumers.receiver(address)
        m.h.pump()
        return m.op("READ", type=ADDRESS, name=address)[2]["distribution"]

    status, _, rule = m.op("CREATE", {"prefix": "queue", "distribution": "closest"}, type="address", name="queues")
    assert status == 201 and rule["name"] == "queues" and rule["type"] == "org.apache.qpid.dispatch.router.config.address"
    assert distribution("queue.a") == "closest"
    status, _, rule = m.op("UPDATE", {"distribution": "multicast"}, type="router.config.address", name="queues")
    assert status == 200 and rule["distribution"] == "multicast" and rule["prefix"] == "queue"
    assert distribution("queue.b") == "multicast"
    assert m.op("READ", type=ADDRESS, name="queue.a")[2]["distribution"] == "closest"  # in use: unchanged
    assert m.op("DELETE", type="address", name="queues")[:2] == (204, "No Content")
    assert distribution("queue.c") == "balanced"
    assert m.op("READ", type="address", name="queues")[0] == 404  # (410 in WD14; the anchors say 404)
    assert m.agent.config.addresses == ()


def test_configured_rules_are_entities_too() -> None:
    config = RouterConfig(addresses=(AddressConfig(pattern="news.*", distribution="multicast"),))
    m = MgmtHarness(config)
    [rule] = rows(m, "address", ["identity", "pattern", "prefix", "distribution"])
    assert rule == {"identity": "address/0", "pattern": "news.*", "prefix": None, "distribution": "multicast"}
    assert m.op("DELETE", type="address", identity="address/0")[0] == 204
    assert m.h.core.table.distribution_for("news.eu") == "balanced"


def test_listeners_change_through_the_control() -> None:
    control = StubControl()
    m = MgmtHarness(control=control)
    status, description, _ = m.op("CREATE", {"port": "0", "saslMechanisms": "ANONYMOUS PLAIN"},
                                  type="listener", name="extra")  # fmt: skip
    assert status == 400 and "no users are configured" in description and control.calls == []
    status, _, listener = m.op("CREATE", {"port": "0", "linkCapacity": 10}, type="listener", name="extra")
    assert status == 201 and listener["boundPort"] == 40001 and listener["linkCapacity"] == 10
    assert listener["identity"] == "listener/extra" and listener["idleTimeoutSeconds"] == 16.0
    assert control.calls == [("create", "extra")]
    assert m.op("CREATE", {}, type="listener", name="extra")[0] == 409
    status, _, listener = m.op("UPDATE", {"linkCapacity": 20}, type="listener", name="extra")
    assert status == 200 and listener["linkCapacity"] == 20
    assert control.calls[1:] == [("delete", "extra"), ("create", "extra")]
    assert [x.link_capacity for x in m.agent.config.listeners if x.name == "extra"] == [20]
    assert m.op("DELETE", type="listener", name="extra")[0] == 204
    assert control.calls[-1] == ("delete", "extra") and len(m.agent.config.listeners) == 1
    control.refuse = True
    status, description, _ = m.op("CREATE", {"port": 5672}, type="listener", name="busy")
    assert status == 409 and "in use" in description and len(m.agent.config.listeners) == 1


def test_connectors_are_configuration() -> None:
    m = MgmtHarness(RouterConfig(router=RouterSection(id="R1", mode="interior")))
    status, _, connector = m.op("CREATE", {"host": "peer", "port": 5673, "role": "inter-router", "cost": 3},
                                type="org.apache.qpid.dispatch.connector", name="to-peer")  # fmt: skip
    assert status == 201 and connector["cost"] == 3 and connector["role"] == "inter-router"
    assert connector["identity"] == "connector/to-peer" and connector["saslPassword"] is None
    assert connector["connectionStatus"] is None  # the stub control runs no connectors
    assert [c.name for c in m.agent.config.connectors] == ["to-peer"]
    assert m.op("DELETE", type="connector", name="to-peer")[0] == 204 and m.agent.config.connectors == ()


def test_log_levels_change_at_run_time() -> None:
    m = MgmtHarness()
    logger = logging.getLogger("router")
    saved = logger.level
    try:
        status, _, entity = m.op("UPDATE", {"enable": "debug+"}, type="log", name="log/DEFAULT")
        assert status == 200 and entity["enable"] == "debug+" and logger.level == logging.DEBUG
        assert m.op("UPDATE", {"enable": "trace,warning+"}, type="log", name="log/DEFAULT")[2]["enable"] == "debug+"
        assert m.op("UPDATE", {"enable": "none"}, type="log", name="log/DEFAULT")[2]["enable"] == "none"
        assert m.op("UPDATE", {"enable": "loud+"}, type="log", name="log/DEFAULT")[0] == 400
        assert m.op("UPDATE", {"outputFile": "x"}, type="log", name="log/DEFAULT")[0] == 400
    finally:
        logger.setLevel(saved)


def test_discovery_operations() -> None:
    m = MgmtHarness(RouterConfig(router=RouterSection(id="R7")))
    status, _, types = m.op("GET-TYPES", {}, **NODE)
    assert status == 200 and types[ADDRESS] == ["org.apache.qpid.dispatch.entity", "org.apache.qpid.dispatch.operationalEntity"]
    assert {"org.apache.qpid.dispatch." + t for t in ("router", "listener", "connector", "router.config.address",
            "connection", "router.link", "router.node", "log")} <= set(types)  # fmt: skip
    _, _, attributes = m.op("GET-ATTRIBUTES", {}, entityType=ADDRESS, **NODE)
    assert list(attributes) == [ADDRESS] and "subscriberCount" in attributes[ADDRESS]
    _, _, operations = m.op("GET-OPERATIONS", {}, entityType="listener", **NODE)
    assert operations == {"org.apache.qpid.dispatch.listener": ["CREATE", "READ", "UPDATE", "DELETE"]}
    assert m.op("GET-MGMT-NODES", {}, **NODE) == (200, "OK", ["amqp:/_topo/0/R7/$management"])
    assert m.op("GET-ANNOTATIONS", {}, **NODE)[0] == 200
    assert m.op("QUERY", {}, entityType="router.node", **NODE)[2]["results"] == []


@pytest.mark.parametrize(
    ("operation", "body", "app", "status"),
    [
        ("FROBNICATE", {}, {}, 501),
        ("DELETE", None, {"type": "router.address", "name": "M0$management"}, 501),  # not allowed on the type
        ("UPDATE", {}, {"type": "router", "name": "<router>"}, 501),
        ("QUERY", ["not", "a", "map"], {"entityType": "router"}, 400),
        ("QUERY", {"attributeNames": "name"}, {"entityType": "router"}, 400),
        ("QUERY", {"attributeNames": ["nonsense"]}, {"entityType": "router"}, 400),
        ("QUERY", {}, {"entityType": "no.such.type"}, 404),
        ("QUERY", {}, {"entityType": "router", "offset": "x"}, 400),
        ("READ", None, {"type": "router"}, 400),
        ("READ", None, {"type": "listener", "name": "nope"}, 404),
        ("READ", None, {"type": 7, "name": "x"}, 400),
        ("CREATE", {"prefix": "a"}, {}, 400),  # no type
        ("CREATE", {"prefix": "a"}, {"type": "router"}, 501),
        ("CREATE", {"prefix": "a", "distribution": "sideways"}, {"type": "address"}, 400),
        ("CREATE", {"prefix": "a", "pattern": "b"}, {"type": "address"}, 400),
        ("CREATE", {"prefix": "a", "ingressPhase": 1}, {"type": "address"}, 400),  # phases: waypoint only
        ("CREATE", {"prefix": "a", "type": "listener"}, {"type": "address"}, 400),
        ("CREATE", {"identity": "x", "prefix": "a"}, {"type": "address"}, 400),
        ("CREATE", {"port": 70000}, {"type": "listener", "name": "bad"}, 400),
        ("CREATE", "a string", {"type": "address"}, 400),
        ("UPDATE", {"name": "renamed"}, {"type": "listener", "name": "amqp"}, 400),
    ],
)
def test_errors_are_answered(operation: str, body: object, app: dict[str, object], status: int) -> None:
    m = MgmtHarness()
    app = {k: m.h.config.router.id if v == "<router>" else v for k, v in app.items()}
    got, description, reply_body = m.op(operation, body, **app)
    assert (got, reply_body) == (status, {}) and description
    assert m.op("QUERY", {}, entityType="router")[0] == 200  # the node carries on


def test_operation_must_be_a_string_and_bodies_amqp_values() -> None:
    m = MgmtHarness()
    assert m.op(42)[0] == 400  # type: ignore[arg-type]
    reply = m.request({"operation": "QUERY", "entityType": "router"}, [Data(value=b"{}")])
    assert (reply.application_properties or {})["statusCode"] == 400


def test_requests_without_reply_to_are_executed_and_bad_bytes_rejected() -> None:
    m = MgmtHarness()
    before = len(m.client.received[m.replies])
    delivery = m.send({"operation": "CREATE", "type": "address"}, {"prefix": "quiet"}, reply=False)
    assert isinstance(m.client.outcomes[delivery], Accepted)
    assert [r.rule.prefix for r in m.agent.address_rules] == ["quiet"]
    assert len(m.client.received[m.replies]) == before
    m.client.tags += 1
    delivery = m.sender.send_transfer(b"bad", b"\x00\x53\x77\xff", settled=False)  # truncated section
    m.h.pump()
    outcome = m.client.outcomes[delivery]
    assert isinstance(outcome, Rejected) and outcome.error is not None
    assert outcome.error.condition == "amqp:decode-error"


def test_correlation_id_is_the_message_id_or_else_the_correlation_id() -> None:
    m = MgmtHarness()
    request = Message.value({}, properties=Properties(correlation_id="corr-7", reply_to=m.reply_to),
                            application_properties={"operation": "GET-MGMT-NODES"})  # fmt: skip
    m.client.send(m.sender, request)
    m.h.pump()
    reply = m.client.received[m.replies][-1].message
    assert reply.properties is not None and reply.properties.correlation_id == "corr-7"
    assert reply.properties.to == m.reply_to


def test_the_node_is_announced_and_reachable_by_its_local_and_topo_addresses() -> None:
    m = MgmtHarness(RouterConfig(router=RouterSection(id="R9")))
    remote = m.client.engine.remote_open
    assert remote is not None and "AMQP_MGMT_V1_0" in (remote.offered_capabilities or ())
    assert "ANONYMOUS-RELAY" in (remote.offered_capabilities or ())
    assert (remote.properties or {})["amqp:mgmt-node"] == "$management"
    anonymous = m.client.sender(None)
    m.h.pump()
    for to in ("_topo/0/R9/$management", "_local/$management", "$management"):
        reply = m.request({"operation": "GET-MGMT-NODES"}, {}, to=to, link=anonymous)
        assert reply.body_value == ["amqp:/_topo/0/R9/$management"]


def test_mgmt_nodes_lists_only_routers_with_a_path() -> None:
    class Nodes(NodeType):  # as the mesh fills it: C is known but unreachable (no next hop)
        def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
            yield self.entity("B", "B", id="B", nextHop="B", cost=1)
            yield self.entity("C", "C", id="C", nextHop=None, cost=None)

    m = MgmtHarness(RouterConfig(router=RouterSection(id="A", mode="interior")))
    m.agent.register(Nodes())
    nodes = m.op("GET-MGMT-NODES", {}, **NODE)[2]
    assert nodes == ["amqp:/_topo/0/A/$management", "amqp:/_topo/0/B/$management"]
