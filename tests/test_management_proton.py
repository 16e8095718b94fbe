"""The management node over a real socket with python-qpid-proton as the client: the requests
the anchors' tools send (a QUERY of router.address) and a WD14 GET of the discovery document,
from a BlockingConnection with a dynamic receiver as reply-to."""

from __future__ import annotations

import time
from typing import Any

import pytest
from proton import Message, symbol
from proton.utils import BlockingConnection

from router.core.router import RouterCore
from router.management import ManagementAgent, install
from router.net.server import RouterServer

from .support.interop import run_in_thread
from .support.mgmt import StubControl
from .support.router_process import router_server

__all__ = ["router_server"]  # the fixture, imported for pytest
pytestmark = pytest.mark.interop

TIMEOUT_S = 10.0


def _session(port: int) -> dict[str, Any]:
    conn = BlockingConnection(f"127.0.0.1:{port}", timeout=TIMEOUT_S)
    try:
        offered = conn.conn.remote_offered_capabilities
        node = conn.conn.remote_properties.get(symbol("amqp:mgmt-node"))
        consumer = conn.create_receiver("orders")  # something to see in router.address
        replies = conn.create_receiver(None, dynamic=True)
        reply_to = replies.remote_source.address
        requests = conn.create_sender("$management")

        def ask(request: Message) -> Message:
            request.reply_to = reply_to
            requests.send(request, timeout=TIMEOUT_S)
            return replies.receive(timeout=TIMEOUT_S)  # replies come presettled: nothing to accept

        query = ask(Message(
            correlation_id="q-1",
            properties={"operation": "QUERY", "type": "org.amqp.management", "name": "self",
                        "entityType": "org.apache.qpid.dispatch.router.address"},
            body={"attributeNames": ["name", "distribution", "subscriberCount", "remoteCount",
                                     "deliveriesIngress", "deliveriesEgress"]},
        ))  # fmt: skip
        discovery = ask(Message(id="get-1", subject="GET", address="$management", properties={"http:request": "1.1"}))
        consumer.close()
        return {"offered": list(offered or []), "node": node, "query": query, "discovery": discovery}
    finally:
        conn.close()


async def test_proton_client_queries_and_discovers(router_server: tuple[RouterServer, int]) -> None:
    server, port = router_server
    assert isinstance(server.core, RouterCore)
    install(server.core, ManagementAgent(server.core, server.config, StubControl(), time.time()))
    got = await run_in_thread(_session, port, timeout_s=TIMEOUT_S + 5)

    assert "AMQP_MGMT_V1_0" in [str(c) for c in got["offered"]] and got["node"] == "$management"
    query: Message = got["query"]
    assert query.correlation_id == "q-1"
    assert query.properties["statusCode"] == 200 and query.properties["statusDescription"] == "OK"
    names = query.body["attributeNames"]
    rows = {row[0]: dict(zip(names, row)) for row in query.body["results"]}
    assert rows["M0orders"]["subscriberCount"] == 1 and rows["M0orders"]["distribution"] == "balanced"
    assert rows["M0$management"]["deliveriesIngress"] >= 1

    discovery: Message = got["discovery"]
    assert discovery.correlation_id == "get-1" and discovery.subject == "200"
    assert discovery.properties["http:response"] == "1.1" and discovery.properties["http:reason"] == "OK"
    assert discovery.content_type == "application/amqp-management+amqp; type=discovery-document"
    collections = discovery.body["collections"]
    assert collections["router.address"]["address"] == "router.address"
    assert collections["entities"]["address"] == "entities" and discovery.body["types"]["address"] == "types"
