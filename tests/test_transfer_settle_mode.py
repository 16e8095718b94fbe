"""A transfer's own rcv-settle-mode (transport §2.7.5): first on a link attached second is the
producer's right (its delivery is settled with its outcome, as on a first link), end to end
through one router, a mesh and a link route; second on a link attached first, or a value that is
no receiver-settle-mode (§2.8.3), is illegal: the link is detached with amqp:invalid-field over
a real socket, the consumer gets nothing of it, and the router serves on."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from router.amqp import errors as E
from router.amqp import events as ev
from router.amqp.errors import LocalUsageError
from router.amqp.framing import frame
from router.amqp.message import Message, encode_message
from router.amqp.messaging import ACCEPTED, Accepted, Source, Target
from router.amqp.performatives import RCV_FIRST, RCV_SECOND, RECEIVER, SENDER, Attach, Detach, Flow, Transfer
from router.net.client import connect
from router.net.server import RouterServer
from router.testing.enginepair import WireFrame, parse_wire
from router.testing.routerharness import Client, RouterHarness

from .support.router_process import router_server
from .test_core_linkroute import harness as link_route_harness
from .test_core_linkroute import passed_on
from .test_engine_hostile_frames import BEGIN, opened, still_routes
from .test_settlement_end_to_end import _line, _nothing_held

__all__ = ["router_server"]  # the fixture, imported for pytest


def _second_mode_pair(h: RouterHarness) -> tuple[Client, Client, Any, Any]:
    producer, consumer = h.connect("p"), h.connect("c")
    rx = consumer.receiver("q")
    tx = producer.sender("q", rcv_settle_mode=RCV_SECOND)
    h.pump()
    rx.flow(10)
    h.pump()
    assert tx.remote_attach is not None and tx.remote_attach.rcv_settle_mode == RCV_SECOND
    return producer, consumer, tx, rx


def _nothing_kept(h: RouterHarness) -> None:
    """The router keeps no record of a delivery either way."""
    for c in h.clients:
        for session in c.router_side.sessions:
            assert session.context is None or (session.context.inbound.empty and session.context.outbound.empty)


def test_a_transfer_asking_first_on_a_second_link_is_settled_with_its_outcome() -> None:
    h = RouterHarness()
    producer, consumer, tx, rx = _second_mode_pair(h)
    asked_first = tx.send_transfer(b"1", encode_message(Message.value("m1")), rcv_settle_mode=RCV_FIRST)
    as_the_link = producer.send(tx, Message.value("m2"))
    h.pump()
    assert consumer.bodies(rx) == ["m1", "m2"]  # (the consumer accepted and settled both)
    assert isinstance(producer.outcomes[asked_first], Accepted)
    assert isinstance(producer.outcomes[as_the_link], Accepted)
    assert asked_first in producer.settled  # settled by the router, as the transfer asked
    assert as_the_link not in producer.settled  # the link's mode: the producer settles first
    tx.dispose(as_the_link, state=ACCEPTED, settled=True)
    h.pump()
    assert as_the_link in producer.settled
    _nothing_kept(h)  # for either delivery


@pytest.mark.parametrize("n", [2, 3], ids=lambda n: f"{n}-router")
def test_through_a_mesh_the_ingress_router_settles_a_delivery_asking_first(n: int) -> None:
    """The outcome comes back unsettled hop by hop; the producer's router settles with it, and
    the consumer's delivery is settled at once, as for a producer attached first."""
    h, producer, consumer, tx, rx = _line(n, second=True)
    sent = tx.send_transfer(b"m", encode_message(Message.value("m")), rcv_settle_mode=RCV_FIRST)  # type: ignore[attr-defined]
    h.pump()
    (got,) = consumer.received[rx]  # type: ignore[index]
    rx.dispose(got.delivery_id, state=ACCEPTED, settled=False)  # type: ignore[attr-defined]
    h.pump()
    assert isinstance(producer.outcomes[sent], Accepted) and sent in producer.settled
    assert got.delivery_id in consumer.remote_settled
    _nothing_held(h)


def test_a_transfer_repeating_its_links_mode_changes_nothing() -> None:
    h = RouterHarness()
    producer, consumer, tx, rx = _second_mode_pair(h)
    repeated = tx.send_transfer(b"r", encode_message(Message.value("m")), rcv_settle_mode=RCV_SECOND)
    other = h.connect("p2")
    first_link = other.sender("q")  # rcv-settle-mode first
    h.pump()
    also = first_link.send_transfer(b"f", encode_message(Message.value("n")), rcv_settle_mode=RCV_FIRST)
    h.pump()
    assert consumer.bodies(rx) == ["m", "n"]
    assert isinstance(producer.outcomes[repeated], Accepted) and repeated not in producer.settled
    assert isinstance(other.outcomes[also], Accepted) and also in other.settled


def test_first_asked_on_a_later_frame_of_a_streamed_delivery_counts_too() -> None:
    h = RouterHarness()
    producer, consumer, tx, rx = _second_mode_pair(h)
    payload = encode_message(Message.value("x" * 2000))
    delivery_id = tx.send_transfer(b"s", payload[:1000], more=True)
    h.pump()
    tx.send_transfer(None, payload[1000:], rcv_settle_mode=RCV_FIRST)
    h.pump()
    assert consumer.bodies(rx) == ["x" * 2000]
    assert isinstance(producer.outcomes[delivery_id], Accepted) and delivery_id in producer.settled


def test_first_asked_after_the_outcome_was_told_unsettled_settles_then() -> None:
    """The consumer answers before the last frame (the producer, in mode second, hears the
    outcome unsettled; the consumer's delivery is aborted there); the last frame asks first: the
    router settles then (transport §2.7.5: once the delivery has arrived), without waiting for
    the producer, and keeps nothing of it."""
    h = RouterHarness()
    producer, consumer, tx, rx = _second_mode_pair(h)
    consumer.auto_accept = False
    payload = encode_message(Message.value("y" * 2000))
    delivery_id = tx.send_transfer(b"s", payload[:1000], more=True)
    h.pump()
    (partial,) = [e for e in consumer.events if isinstance(e, ev.TransferReceived)]
    rx.dispose(partial.delivery_id, state=ACCEPTED, settled=False)
    h.pump()
    assert isinstance(producer.outcomes[delivery_id], Accepted) and delivery_id not in producer.settled
    tx.send_transfer(None, payload[1000:], rcv_settle_mode=RCV_FIRST)
    h.pump()
    assert delivery_id in producer.settled
    # (the consumer's delivery ended when it answered early: the rest aborted, settled)
    assert [e.aborted for e in consumer.events if isinstance(e, ev.TransferReceived)] == [False, True]
    _nothing_kept(h)


def test_the_engine_refuses_to_send_second_where_the_receiver_settles_first() -> None:
    h = RouterHarness()
    producer = h.connect("p")
    tx = producer.sender("q")  # rcv-settle-mode first
    h.connect("c").receiver("q").flow(1)
    h.pump()
    with pytest.raises(LocalUsageError, match="rcv-settle-mode 1: first"):
        tx.send_transfer(b"t", encode_message(Message.value("m")), rcv_settle_mode=RCV_SECOND)


def test_a_link_route_passes_first_on_to_the_container() -> None:
    h, broker, client = link_route_harness()
    sender = client.sender("q.orders", rcv_settle_mode=RCV_SECOND)
    h.pump()
    upstream = passed_on(broker)
    h.pump()
    upstream.flow(2)
    h.pump()
    sender.send_transfer(b"a", encode_message(Message.value("asked first")), rcv_settle_mode=RCV_FIRST)
    client.send(sender, Message.value("as the link"))
    h.pump()
    modes = [e.rcv_settle_mode for e in broker.events if isinstance(e, ev.TransferReceived)]
    assert modes == [RCV_FIRST, None]  # the link's second is not repeated on the way


# --- over a socket: the illegal forms ---------------------------------------------------------------


async def _send_with_mode(port: int, link_mode: int, transfer_mode: int) -> tuple[list[Any], bool]:
    """A raw producer attached with `link_mode` sends one transfer saying `transfer_mode` to a
    consumer of ours: (every frame the router sent the producer, whether the consumer got it)."""
    async with connect("127.0.0.1", port) as client:
        receiver = await client.open_receiver("modes", credit=5)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        received = b""

        async def frames_until(kind: type) -> list[Any]:
            nonlocal received
            with trio.fail_after(5):
                while True:
                    bodies = [f.body for f in parse_wire(received) if isinstance(f, WireFrame)]
                    if any(isinstance(b, kind) for b in bodies):
                        return bodies
                    received += await stream.receive_some(65536)

        attach = Attach(name="p", handle=0, role=SENDER, rcv_settle_mode=link_mode, source=Source(),
                        target=Target(address="modes"), initial_delivery_count=0)  # fmt: skip
        await stream.send_all(opened() + BEGIN + frame(0, attach))
        await frames_until(Flow)  # credit: the address has a consumer
        transfer = Transfer(handle=0, delivery_id=0, delivery_tag=b"t", message_format=0, settled=False,
                            rcv_settle_mode=transfer_mode)  # fmt: skip
        await stream.send_all(frame(0, transfer, encode_message(Message.value("illegal"))))
        bodies = await frames_until(Detach)
        await stream.aclose()
        got = False
        with trio.move_on_after(0.2):  # anything routed would be here by now (one router, loopback)
            await receiver.receive()
            got = True
    return bodies, got


@pytest.mark.parametrize(("link_mode", "transfer_mode"), [(RCV_FIRST, RCV_SECOND), (RCV_SECOND, 7), (RCV_FIRST, 2)])
async def test_an_illegal_transfer_settle_mode_detaches_the_link_and_routes_nothing(
    router_server: tuple[RouterServer, int], link_mode: int, transfer_mode: int
) -> None:
    server, port = router_server
    bodies, got = await _send_with_mode(port, link_mode, transfer_mode)
    (detach,) = [b for b in bodies if isinstance(b, Detach)]
    assert detach.error is not None and detach.error.condition == E.INVALID_FIELD
    assert f"rcv-settle-mode {transfer_mode}" in (detach.error.description or "")
    assert not got
    await still_routes(port)


@pytest.mark.parametrize(("attach", "named"), [
    ({"snd_settle_mode": 9}, "snd-settle-mode 9"), ({"rcv_settle_mode": 5}, "rcv-settle-mode 5"),
])  # fmt: skip
@pytest.mark.parametrize("role", [SENDER, RECEIVER])
def test_an_attach_naming_a_settle_mode_that_does_not_exist_is_refused_not_echoed(
    attach: dict[str, int], named: str, role: bool
) -> None:
    h = RouterHarness()
    client = h.connect("p")
    link = client.sender("q", **attach) if role is SENDER else client.receiver("q", **attach)
    h.pump()
    (detach,) = [e for e in client.events if isinstance(e, ev.RemoteDetach)]
    assert detach.error is not None and detach.error.condition == E.INVALID_FIELD
    assert named in (detach.error.description or "")
    answer = link.remote_attach
    assert answer is not None and answer.snd_settle_mode in (0, 1, 2) and answer.rcv_settle_mode in (0, 1)
    other = client.receiver("other")  # the connection serves on
    h.pump()
    assert other.remotely_attached
