"""In-process endpoints (the management node's plumbing): requests arrive whole, the endpoint's
outcome goes back to the sender, its replies are routed like any message from the router."""

from __future__ import annotations

from typing import Any

from router.amqp.message import Message, decode_message, encode_message
from router.amqp.messaging import ACCEPTED, Accepted, Properties, Rejected, Source
from router.testing.routerharness import RouterHarness


def _echo(payload: bytes, now: float, link_address: str | None = None) -> tuple[Any, list[tuple[str, bytes]]]:
    request = decode_message(payload)
    assert request.properties is not None and request.properties.reply_to
    reply = Message.value(
        {"echo": request.body_value},
        properties=Properties(to=request.properties.reply_to, correlation_id=request.properties.message_id),
    )
    return ACCEPTED, [(request.properties.reply_to, encode_message(reply))]


def test_request_reply_with_an_in_process_endpoint() -> None:
    h = RouterHarness()
    h.core.register_local_endpoint("$echo", _echo)
    client = h.connect("c")
    replies = client.receiver(None, source=Source(dynamic=True))
    requests = client.sender("$echo")
    h.pump()
    replies.flow(10)
    h.pump()
    assert requests.credit > 0  # the endpoint is a destination
    reply_to = replies.remote_source.address
    big = "x" * 200_000  # several frames: the endpoint still sees one whole message
    ids = [client.send(requests, Message.value(v, properties=Properties(message_id=i, reply_to=reply_to)))
           for i, v in enumerate(["ping", big])]  # fmt: skip
    h.pump()
    assert all(isinstance(client.outcomes[i], Accepted) for i in ids)
    got = [r.message for r in client.received[replies]]
    assert [m.body_value for m in got] == [{"echo": "ping"}, {"echo": big}]
    assert [m.properties.correlation_id for m in got] == [0, 1]  # type: ignore[union-attr]


def test_a_failing_endpoint_rejects_and_the_router_carries_on() -> None:
    h = RouterHarness()

    def broken(payload: bytes, now: float, link_address: str | None = None) -> tuple[Any, list[tuple[str, bytes]]]:
        raise RuntimeError("boom")

    h.core.register_local_endpoint("_local/broken", broken)
    client = h.connect("c")
    tx = client.sender("_local/broken")
    h.pump()
    delivery_id = client.send(tx, Message.value("x"))
    h.pump()
    outcome = client.outcomes[delivery_id]
    assert isinstance(outcome, Rejected) and outcome.error.condition == "amqp:internal-error"
    assert "boom" in (outcome.error.description or "")


def test_replies_to_nowhere_are_dropped_and_counted() -> None:
    h = RouterHarness()
    h.core.register_local_endpoint("$echo", _echo)
    client = h.connect("c")
    tx = client.sender("$echo")
    h.pump()
    client.send(tx, Message.value("x", properties=Properties(reply_to="nobody-listens")))
    h.pump()
    assert h.core.forwarder.router_dropped == 1
