"""The management node over a real socket with python-qpid-proton as the client (a
BlockingConnection, a dynamic receiver as reply-to, a sender to `$management`), against a
router whose agent acts for real (a listener created by management listens).

- The operation dialect the anchors' tools speak: QUERY, GET-TYPES, GET-ATTRIBUTES,
  GET-OPERATIONS, GET-MGMT-NODES, CREATE/READ/DELETE of an address rule (which takes effect)
  and of a listener (which accepts a Proton connection, then refuses once deleted), and an
  unknown operation (an error reply, the node carries on).
- AMQP Management WD14 over HTTP-over-AMQP: every status code the issue names (200, 201, 204,
  304, 400, 404, 406, 409, 410, 415), `$top`/`$skip` paging, ETag/If-None-Match.
"""

from __future__ import annotations

from typing import Any

import pytest
from proton import ConnectionException, Delivery, Message, symbol
from proton.utils import BlockingConnection

from .support.interop import run_in_thread
from .support.management import managed_router

pytestmark = pytest.mark.interop

TIMEOUT_S = 10.0
PREFIX = "org.apache.qpid.dispatch."
NODE = {"type": "org.amqp.management", "name": "self"}  # node operations, as the anchors' tools send them
MEDIA = "application/amqp-management+amqp"


class Management:
    """Requests and replies over one Proton connection (blocking: run it in a thread)."""

    def __init__(self, port: int) -> None:
        self.conn = BlockingConnection(f"127.0.0.1:{port}", timeout=TIMEOUT_S)
        self.replies = self.conn.create_receiver(None, dynamic=True)
        self.reply_to = self.replies.remote_source.address
        self.requests = self.conn.create_sender("$management")
        self.ids = 0

    def ask(self, request: Message) -> Message:
        self.ids += 1
        request.id = f"req-{self.ids}"
        request.reply_to = self.reply_to
        self.requests.send(request, timeout=TIMEOUT_S)
        reply = self.replies.receive(timeout=TIMEOUT_S)  # replies come presettled: nothing to accept
        assert reply.correlation_id == request.id
        return reply

    def op(self, operation: Any, body: Any = None, **properties: Any) -> tuple[int, str, Any]:
        reply = self.ask(Message(properties={"operation": operation, **properties}, body=body if body is not None else {}))
        return reply.properties["statusCode"], reply.properties["statusDescription"], reply.body

    def http(self, method: str, to: str, body: Any = None, content_type: str | None = None, **headers: Any) -> Message:
        request = Message(subject=method, address=to, properties={"http:request": "1.1", **headers}, body=body)
        if content_type is not None:
            request.content_type = content_type
        reply = self.ask(request)
        assert reply.properties["http:response"] == "1.1" and reply.properties["http:reason"]
        return reply

    def close(self) -> None:
        self.conn.close()


def _connects(port: int) -> bool:
    try:
        BlockingConnection(f"127.0.0.1:{port}", timeout=TIMEOUT_S).close()
        return True
    except ConnectionException:
        return False


def operation_dialect(port: int, router_id: str) -> dict[str, Any]:
    m = Management(port)
    got: dict[str, Any] = {
        "offered": [str(c) for c in m.conn.conn.remote_offered_capabilities or []],
        "node": m.conn.conn.remote_properties.get(symbol("amqp:mgmt-node")),
    }
    try:
        consumer = m.conn.create_receiver("orders")  # something to see in router.address
        names = ["name", "distribution", "subscriberCount", "remoteCount", "deliveriesIngress", "deliveriesEgress"]
        got["query"] = m.op("QUERY", {"attributeNames": names}, entityType=PREFIX + "router.address", **NODE)
        got["types"] = m.op("GET-TYPES", **NODE)
        got["attributes"] = m.op("GET-ATTRIBUTES", entityType=PREFIX + "listener", **NODE)
        got["operations"] = m.op("GET-OPERATIONS", entityType="router.config.address", **NODE)
        got["nodes"] = m.op("GET-MGMT-NODES", **NODE)
        # An address rule: created, in effect for an address looked up afterwards, deleted.
        got["rule"] = m.op("CREATE", {"prefix": "proton.q", "distribution": "closest"},
                           type=PREFIX + "router.config.address", name="proton-rule")  # fmt: skip
        queue = m.conn.create_receiver("proton.q.one")
        got["ruled"] = m.op("READ", type=PREFIX + "router.address", name="proton.q.one")
        queue.close()
        got["rule_read"] = m.op("READ", type="address", name="proton-rule")
        got["rule_deleted"] = m.op("DELETE", type=PREFIX + "router.config.address", name="proton-rule")
        got["rule_gone"] = m.op("READ", type="address", name="proton-rule")
        # A listener: created (it listens at once), then deleted (it refuses at once).
        got["listener"] = m.op("CREATE", {"host": "127.0.0.1", "port": 0}, type=PREFIX + "listener", name="proton-extra")
        extra = got["listener"][2]["boundPort"]
        got["extra_accepts"] = _connects(extra)
        got["listener_deleted"] = m.op("DELETE", type=PREFIX + "listener", identity="listener/proton-extra")
        got["extra_refuses"] = not _connects(extra)
        # Operations the node does not know, or cannot read: error replies.
        got["unknown"] = m.op("FROBNICATE", **NODE)
        got["not_a_string"] = m.op(42, **NODE)
        got["after"] = m.op("READ", type="router", name=router_id)
        consumer.close()
    finally:
        m.close()
    return got


async def test_operation_dialect_with_proton() -> None:
    async with managed_router() as router:
        got = await run_in_thread(operation_dialect, router.amqp_port, router.id, timeout_s=4 * TIMEOUT_S)
    assert "AMQP_MGMT_V1_0" in got["offered"] and got["node"] == "$management"

    status, description, body = got["query"]
    assert (status, description) == (200, "OK")
    rows = {row[0]: dict(zip(body["attributeNames"], row)) for row in body["results"]}
    assert rows["M0orders"]["subscriberCount"] == 1 and rows["M0orders"]["distribution"] == "balanced"
    assert rows["M0$management"]["deliveriesIngress"] >= 1

    status, _, types = got["types"]
    assert status == 200 and types[PREFIX + "router.address"] == [PREFIX + "entity", PREFIX + "operationalEntity"]
    assert {PREFIX + t for t in ("router", "listener", "connector", "router.config.address", "connection",
                                 "router.link", "router.node", "log", "memory")} <= set(types)  # fmt: skip
    status, _, attributes = got["attributes"]
    assert status == 200 and {"host", "port", "role", "linkCapacity", "boundPort"} <= set(attributes[PREFIX + "listener"])
    assert got["operations"][2] == {PREFIX + "router.config.address": ["CREATE", "READ", "UPDATE", "DELETE"]}
    assert got["nodes"][:2] == (200, "OK") and got["nodes"][2] == [f"amqp:/_topo/0/{router.id}/$management"]

    status, _, rule = got["rule"]
    assert status == 201 and (rule["name"], rule["prefix"], rule["distribution"]) == ("proton-rule", "proton.q", "closest")
    assert got["ruled"][0] == 200 and got["ruled"][2]["distribution"] == "closest"
    assert got["rule_read"][0] == 200 and got["rule_read"][2] == rule
    assert got["rule_deleted"][:2] == (204, "No Content")
    assert got["rule_gone"][0] == 404

    status, _, listener = got["listener"]
    assert status == 201 and listener["identity"] == "listener/proton-extra" and listener["boundPort"] > 0
    assert got["extra_accepts"] and got["listener_deleted"][0] == 204 and got["extra_refuses"]

    status, description, body = got["unknown"]
    assert status == 501 and "FROBNICATE" in description and body == {}
    assert got["not_a_string"][0] == 400
    assert got["after"][0] == 200 and got["after"][2]["id"] == router.id


def wd14(port: int) -> dict[Any, Any]:
    m = Management(port)
    got: dict[Any, Any] = {}
    try:
        discovery = m.http("GET", "$management")
        got["discovery"] = discovery
        got[200] = discovery.subject
        got[304] = m.http("GET", "$management", **{"If-None-Match": discovery.properties["ETag"]}).subject
        created = m.http("POST", "$management/router.config.address", {"name": "wd14", "prefix": "wd14"})
        got[201], got["created"] = created.subject, created
        location, tag = created.properties["Location"], created.properties["ETag"]
        got[400] = m.http("POST", "$management/router.config.address", {"prefix": "a", "pattern": "b"}).subject
        got[404] = m.http("GET", "$management/router.config.address/nobody").subject
        got[406] = m.http("GET", location, Accept="application/json").subject
        got[415] = m.http("POST", "$management/router.config.address", b"{}", content_type="application/json").subject
        current = m.http("GET", location).body
        got["updated"] = m.http("PUT", location, dict(current, distribution="multicast"))
        got[409] = m.http("PUT", location, dict(current, distribution="closest", tag=tag.strip('"'))).subject
        got[204] = m.http("DELETE", location).subject
        got[410] = m.http("GET", location).subject
        for i in range(4):
            m.http("POST", "$management/router.config.address", {"name": f"page{i}", "prefix": f"page{i}"})
        got["page"] = m.http("GET", "$management/router.config.address?$top=2&$skip=1")
        got["empty_page"] = m.http("GET", "$management/router.config.address?$skip=10")
    finally:
        m.close()
    return got


async def test_wd14_status_codes_paging_and_etags_with_proton() -> None:
    async with managed_router() as router:
        got = await run_in_thread(wd14, router.amqp_port, timeout_s=4 * TIMEOUT_S)
    for code in (200, 201, 204, 304, 400, 404, 406, 409, 410, 415):
        assert got[code] == str(code), (code, got[code])

    discovery: Message = got["discovery"]
    assert discovery.content_type == f"{MEDIA}; type=discovery-document"
    assert discovery.body["collections"]["router.address"]["address"] == "router.address"
    assert discovery.body["types"]["address"] == "types"
    created: Message = got["created"]
    assert created.properties["Location"] == created.body["self"] == "$management/router.config.address/address%2F0"
    assert created.properties["ETag"] == f'"{created.body["tag"]}"'
    updated: Message = got["updated"]
    assert updated.subject == "200" and updated.body["distribution"] == "multicast"
    assert updated.properties["ETag"] != created.properties["ETag"]

    page: Message = got["page"]
    assert page.subject == "200" and [e["name"] for e in page.body] == ["page1", "page2"]
    assert page.content_type == f"{MEDIA}; type=entity-collection"
    empty: Message = got["empty_page"]
    assert empty.subject == "204" and empty.body is None


def wd14_generic(port: int, router_id: str) -> dict[str, Any]:
    """A generic WD14 client: it follows the discovery document to the collections' addresses,
    sending through the anonymous relay (the address in `to`) and on a sender attached to the
    collection's address (no `to` at all)."""
    conn = BlockingConnection(f"127.0.0.1:{port}", timeout=TIMEOUT_S)
    got: dict[str, Any] = {}
    try:
        replies = conn.create_receiver(None, dynamic=True)
        reply_to = replies.remote_source.address
        relay = conn.create_sender(None)  # the anonymous relay

        def ask(sender: Any, request: Message) -> Message:
            request.reply_to = reply_to
            request.id = f"req-{len(got)}"
            outcome = sender.send(request, timeout=TIMEOUT_S)
            got.setdefault("outcomes", []).append(outcome.remote_state)
            reply = replies.receive(timeout=TIMEOUT_S)
            assert reply.correlation_id == request.id
            return reply

        def get(sender: Any, to: str | None) -> Message:
            return ask(sender, Message(subject="GET", address=to, properties={"http:request": "1.1"}))

        discovery = get(relay, "$management").body
        got["discovery"] = discovery
        entities = "$management/" + discovery["collections"]["entity"]["address"]
        got["relay_entities"] = get(relay, entities)
        got["relay_types"] = get(relay, "$management/" + discovery["collections"]["type"]["address"])
        got["relay_listeners"] = get(relay, "$management/listener")
        got["relay_topo"] = get(relay, f"_topo/0/{router_id}/$management/router")
        attached = conn.create_sender("$management/listener")
        got["attached_listeners"] = get(attached, None)
        self_address = got["attached_listeners"].body[0]["self"]
        got["attached_self"] = get(conn.create_sender(self_address), None)
        got["relay_unknown"] = get(relay, "$management/nothing-here")
    finally:
        conn.close()
    return got


async def test_wd14_collection_addresses_reach_the_node() -> None:
    async with managed_router() as router:
        got = await run_in_thread(wd14_generic, router.amqp_port, router.id, timeout_s=4 * TIMEOUT_S)
    collections = got["discovery"]["collections"]
    assert collections["entity"]["address"] == "entities" and collections["type"]["address"] == "types"
    assert set(got["outcomes"]) == {Delivery.ACCEPTED}  # none released: every request reached the node
    everything = got["relay_entities"]
    assert everything.subject == "200" and {e["type"] for e in everything.body} >= {PREFIX + "router", PREFIX + "listener"}
    assert got["relay_types"].subject == "200" and PREFIX + "listener" in {t["name"] for t in got["relay_types"].body}
    for name in ("relay_listeners", "attached_listeners"):
        reply = got[name]
        assert reply.subject == "200" and [e["type"] for e in reply.body] == [PREFIX + "listener"], name
    assert got["attached_self"].subject == "200" and got["attached_self"].body["name"] == "amqp"
    [router_entity] = got["relay_topo"].body
    assert got["relay_topo"].subject == "200" and router_entity["id"] == router.id
    assert got["relay_unknown"].subject == "404"
