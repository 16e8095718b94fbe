"""Topological addresses across the mesh, sans-IO: `_topo/0/<router>/x` reaches that router's
local `x` (its management node too), replies to dynamic `_topo/0/<router>/temp.*` addresses come
back from any router, and request/reply works between a client on one router and a service on
another."""

from __future__ import annotations

from typing import Any

from router.amqp.message import Message
from router.amqp.messaging import Accepted, Properties, Released, Source
from router.management.agent import ManagementAgent
from router.management.node import install
from router.testing.meshharness import MeshHarness
from router.testing.routerharness import Client


def _line(ids: str = "ABC") -> MeshHarness:
    h = MeshHarness()
    for i, rid in enumerate(ids):
        core = h.router(rid, instance=i + 1)
        install(core, ManagementAgent(core, core.config, None, 0.0, clock=lambda: 10.0))
    for a, b in zip(ids, ids[1:]):
        h.link(a, b)
    h.converge()
    return h


def _reply_receiver(client: Client, h: MeshHarness) -> tuple[Any, str]:
    link = client.receiver(None, source=Source(dynamic=True))
    h.pump()
    link.flow(10)
    h.pump()
    address = link.remote_source.address
    assert address.startswith(f"_topo/0/{h.cores[_router_of(h, client)].router_id}/temp.")
    return link, address


def _router_of(h: MeshHarness, client: Client) -> str:
    for wire in h.wires:
        if wire.a_client is client:
            return next(rid for rid, core in h.cores.items() if core is wire.b_core)
    raise KeyError(client.name)


def test_a_topological_address_reaches_the_local_address_of_that_router() -> None:
    h = _line()
    service = h.client("C", "svc")
    rx = service.receiver("_local/echo")
    h.pump()
    rx.flow(10)
    producer = h.client("A", "p")
    tx = producer.sender("_topo/0/C/echo")
    h.pump()
    assert tx.credit > 0  # router C is reachable: a destination exists
    delivery = producer.send(tx, Message.value("hello C"))
    h.pump()
    assert service.bodies(rx) == ["hello C"]
    assert isinstance(producer.outcomes[delivery], Accepted)


def test_no_one_consumes_at_another_routers_address_and_unknown_routers_get_no_credit() -> None:
    h = _line("AB")
    client = h.client("A", "c")
    refused = client.receiver("_topo/0/B/x")
    h.pump()
    assert refused.remote_error is not None and refused.remote_error.condition == "amqp:not-found"
    tx = client.sender("_topo/0/Nowhere/x")
    anonymous = client.sender(None)
    h.pump()
    assert tx.credit == 0
    lost = client.send(anonymous, Message.value("?", properties=Properties(to="_topo/0/Nowhere/x")))
    h.pump()
    assert isinstance(client.outcomes[lost], Released)


def test_management_of_a_remote_router_answers_to_a_dynamic_reply_address() -> None:
    h = _line()
    client = h.client("A", "admin")
    replies, reply_to = _reply_receiver(client, h)
    requests = client.sender(None)
    h.pump()
    request = Message.value(
        {}, properties=Properties(message_id="r1", to="_topo/0/C/$management", reply_to=reply_to),
        application_properties={"operation": "READ", "type": "org.apache.qpid.dispatch.router", "name": "C"},
    )  # fmt: skip
    delivery = client.send(requests, request)
    h.pump()
    assert isinstance(client.outcomes[delivery], Accepted)
    (reply,) = client.received[replies]
    message = reply.message
    assert message.application_properties is not None and message.application_properties["statusCode"] == 200
    assert message.body_value["id"] == "C" and message.body_value["mode"] == "interior"
    assert message.properties is not None and message.properties.correlation_id == "r1"


def test_request_reply_between_a_client_on_one_router_and_a_service_on_another() -> None:
    h = _line()
    service = h.client("C", "svc")
    inbox = service.receiver("svc.upper")
    outbox = service.sender(None)
    h.advance(0.5)
    inbox.flow(10)
    client = h.client("A", "client")
    replies, reply_to = _reply_receiver(client, h)
    requests = client.sender("svc.upper")
    h.pump()
    for word in ("alpha", "beta"):
        client.send(requests, Message.value(word, properties=Properties(reply_to=reply_to, message_id=word)))
    h.pump()
    for received in service.received[inbox]:
        request = received.message
        assert request.properties is not None
        answer = Message.value(str(request.body_value).upper(),
                               properties=Properties(to=request.properties.reply_to,
                                                     correlation_id=request.properties.message_id))  # fmt: skip
        service.send(outbox, answer)
    h.pump()
    assert client.bodies(replies) == ["ALPHA", "BETA"]
    assert [r.message.properties.correlation_id for r in client.received[replies]] == ["alpha", "beta"]  # type: ignore[union-attr]
