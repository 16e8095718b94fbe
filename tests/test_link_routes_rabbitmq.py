"""Link routes to RabbitMQ (Debian's rabbitmq-server with its AMQP 1.0 plugin, a private node from
tests/support/external_brokers.py) through two routers: a python-qpid-proton client on router A
sends to and receives from a RabbitMQ queue whose link route leads to router B's route-container
connection. The broker's outcomes reach the sender; the consumer's accept, reject and release reach
the broker (the released message comes back, the rejected one is gone). Not `modified`: Debian's
RabbitMQ 3.10 drops the whole connection when that outcome reaches it through the route (and a
direct client gets no redelivery either). Skips without RabbitMQ."""

from __future__ import annotations

from typing import Any

import pytest
from proton import Message
from proton.utils import BlockingConnection

from .support.external_brokers import RabbitMQ, rabbitmq  # noqa: F401
from .support.interop import run_in_thread
from .test_link_routes import TIMEOUT_S, mesh_of_two

pytestmark = [pytest.mark.broker, pytest.mark.interop]

ROUTES = [
    {"prefix": "/queue", "direction": "in", "connection": "broker"},
    {"prefix": "/queue", "direction": "out", "connection": "broker"},
]


async def test_send_and_receive_through_two_routers_with_the_consumers_outcomes(rabbitmq: RabbitMQ) -> None:  # noqa: F811
    queue = "lr-orders"
    async with mesh_of_two(rabbitmq.port, ROUTES) as (a, b, port):

        def client() -> dict[str, Any]:
            conn = BlockingConnection(f"127.0.0.1:{port}", timeout=TIMEOUT_S)
            try:
                sender = conn.create_sender(f"/queue/{queue}")
                for i in range(4):
                    sender.send(Message(body=f"m{i}"))  # returns once RabbitMQ accepted it (raises otherwise)
                receiver = conn.create_receiver(f"/queue/{queue}", credit=1)
                seen: list[str] = []
                first = {}
                for _ in range(4):
                    body = receiver.receive(timeout=TIMEOUT_S).body
                    seen.append(body)
                    outcome = {"m0": "accept", "m1": "reject", "m2": "release", "m3": "accept"}[body]
                    first[body] = outcome
                    if outcome == "accept":
                        receiver.accept()
                    elif outcome == "reject":
                        receiver.reject()
                    else:
                        receiver.release(delivered=outcome == "modify")  # released, or modified
                # RabbitMQ puts the released and the modified message back; the rejected one is gone.
                again = []
                for _ in range(1):
                    again.append(receiver.receive(timeout=TIMEOUT_S).body)
                    receiver.accept()
                return {"seen": seen, "again": sorted(again)}
            finally:
                conn.close()

        result = await run_in_thread(client)
        assert result["seen"] == ["m0", "m1", "m2", "m3"]
        assert result["again"] == ["m2"]
        assert not a.core.link_routes.pairs and not b.core.link_routes.pairs  # all gone with the client
    assert rabbitmq.queue_depth(queue) == 0  # accepted, or rejected (dropped): nothing left
