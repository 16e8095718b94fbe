"""Links a client steals (transport 2.6.1: it attaches a link again, by name, on the same session)
through the routing core, sans-IO: the engine detaches the old link with amqp:link:stolen
(tests/test_engine_pair_links.py); the old link goes as any link the client detaches, when its
answer comes, and counts as the connection's until then.

The clients are our engine, which refuses to attach a name it has attached already:
attach_again() forgets the name at the client first, as a client that reuses names does.
"""

from __future__ import annotations

from router.amqp import errors as E
from router.amqp.endpoints import CLOSED
from router.amqp.events import RemoteDetach, RemoteEnd, TransferReceived
from router.amqp.link import Link
from router.amqp.message import Message, encode_message
from router.amqp.messaging import Modified, Source
from router.amqp.performatives import SENDER
from router.amqp.session import Session
from router.config.models import Listener, RouterConfig
from router.core.connections import ConnState
from router.testing.routerharness import Client, RouterHarness

from .test_policy import connect, policed, refusal


def attach_again(client: Client, old: Link) -> Link:
    session = client.session
    assert session is not None
    del session.links_by_name[(old.name, old.role)]
    if old.role is SENDER:
        return session.attach_sender(old.name, source=Source(address=None), target=old.target)
    link = session.attach_receiver(old.name, source=old.source)
    client.received[link] = []
    return link


def stolen(client: Client, link: Link) -> list[RemoteDetach]:
    found = [e for e in client.events if isinstance(e, RemoteDetach) and e.link is link]
    for detach in found:
        assert detach.closed and detach.error is not None and detach.error.condition == E.STOLEN
    return found


def state_of(h: RouterHarness, client: Client) -> ConnState:
    return h.core.connections[client.router_side]


def router_session(client: Client) -> Session:
    (session,) = client.router_side.sessions
    return session


def test_a_stolen_consumer_link_is_gone_once_answered_and_its_deliveries_get_outcomes() -> None:
    h = RouterHarness()
    producer, consumer = h.connect("p"), h.connect("c")
    consumer.auto_accept = False  # the consumer holds what it gets, unsettled
    rx, tx = consumer.receiver("q"), producer.sender("q")
    h.pump()
    rx.flow(5)
    h.pump()
    ids = [producer.send(tx, Message.value(i)) for i in range(3)]
    h.pump()
    assert consumer.bodies(rx) == [0, 1, 2]
    assert state_of(h, consumer).link_count == 1
    rx2 = attach_again(consumer, rx)
    h.pump()
    (detach,) = stolen(consumer, rx)
    assert rx2.active and not stolen(consumer, rx2)
    # Until the client answers, the old link is the connection's (it holds its handle): it
    # counts, and gets nothing (no credit: the engine took it).
    assert state_of(h, consumer).link_count == 2
    rx2.flow(5)
    producer.send(tx, Message.value("new"))
    h.pump()
    assert consumer.bodies(rx2) == ["new"] and consumer.bodies(rx) == [0, 1, 2]
    assert all(i not in producer.outcomes for i in ids)
    rx.detach()  # the answer
    h.pump()
    # Gone as any consumer link that detaches: what it held unsettled is modified (in doubt).
    for i in ids:
        state = producer.outcomes[i]
        assert isinstance(state, Modified) and state.delivery_failed and i in producer.settled
    assert state_of(h, consumer).link_count == 1
    session = router_session(consumer)
    assert len(session.links) == len(session.links_by_remote) == 1 and session.displaced is None
    producer.send(tx, Message.value("again"))
    h.pump()
    assert consumer.bodies(rx2) == ["new", "again"]


def test_a_producer_stolen_mid_delivery_aborts_it_downstream() -> None:
    h = RouterHarness()
    producer, consumer = h.connect("p"), h.connect("c")
    rx, tx = consumer.receiver("big"), producer.sender("big")
    h.pump()
    rx.flow(10)
    h.pump()
    payload = encode_message(Message.data(b"x" * 70000))
    tx.send_transfer(b"t", payload[:30000], more=True)
    h.pump()
    assert [e for e in consumer.events if isinstance(e, TransferReceived)]  # cut-through began
    tx2 = attach_again(producer, tx)
    tx.send_transfer(b"t", payload[30000:])  # the rest, sent before the producer hears: discarded
    h.pump()
    assert stolen(producer, tx) and tx2.active
    assert state_of(h, producer).link_count == 2
    tx.detach()
    h.pump()
    frames = [e for e in consumer.events if isinstance(e, TransferReceived)]
    assert frames[-1].aborted and not consumer.received[rx]
    assert state_of(h, producer).link_count == 1
    producer.send(tx2, Message.value("whole"))
    h.pump()
    assert consumer.bodies(rx) == ["whole"]


def test_stealing_in_a_loop_never_answering_is_bounded() -> None:
    # Each stolen link counts until answered, so the loop cannot hold more links than the
    # connection's link limit; and once as many links as the limit wait for answers that never
    # come (stolen, or refused past the limit), the session is ended (resource-limit-exceeded).
    limit = 3
    h = RouterHarness(RouterConfig(listeners=(Listener(max_links_per_connection=limit),)))
    client = h.connect("c")
    link = client.receiver("q")
    h.pump()
    session = router_session(client)
    for _ in range(20):
        if client.session is None or client.session.state.remote is CLOSED:
            break
        link = attach_again(client, link)
        h.pump()
        assert len(session.links) <= limit + 1
        assert state_of(h, client).link_count <= limit
    (end,) = [e for e in client.events if isinstance(e, RemoteEnd)]
    assert end.error is not None and end.error.condition == E.RESOURCE_LIMIT_EXCEEDED
    assert state_of(h, client).link_count == 0
    # The connection goes on: a new session works.
    client.session = client.engine.begin_session()
    h.pump()
    rx = client.receiver("q2")
    h.pump()
    assert rx.active



def test_a_stolen_sender_counts_against_policy_until_answered() -> None:
    h = RouterHarness(RouterConfig.model_validate({"policy": policed(max_senders=1)}))
    client = connect(h, "c", "shop.example")
    tx = client.sender("orders")
    h.pump()
    assert tx.active
    tx2 = attach_again(client, tx)
    h.pump()
    assert stolen(client, tx)
    # The old sender holds its place until the client answers: the new one is one too many.
    assert refusal(client, tx2) == E.RESOURCE_LIMIT_EXCEEDED
    tx.detach()
    tx2.detach()
    h.pump()
    assert state_of(h, client).link_count == 0 and len(router_session(client).links) == 0
    tx3 = client.sender("orders")  # the name again, once both are gone
    h.pump()
    assert tx3.active and refusal(client, tx3) is None


def test_refusals_never_answered_are_bounded_too_and_answered_ones_are_not() -> None:
    limit = 3
    h = RouterHarness(RouterConfig(listeners=(Listener(max_links_per_connection=limit),)))
    client = h.connect("c")
    session = client.session
    assert session is not None
    for i in range(10):  # refused (no source), answered: as many as the client likes
        link = session.attach_receiver(f"answered{i}", source=None)
        h.pump()
        assert link.remote_error is not None and link.remote_error.condition == E.INVALID_FIELD
        link.detach()
        h.pump()
    assert session.state.remote is not CLOSED
    for i in range(limit + 3):  # refused, never answered (in one read): the session is ended
        session.attach_receiver(f"ignored{i}", source=None)
        session.attach_receiver(f"valid{i}", source=Source(address="q"))
    h.pump()
    (end,) = [e for e in client.events if isinstance(e, RemoteEnd)]
    assert end.error is not None and end.error.condition == E.RESOURCE_LIMIT_EXCEEDED
    assert "the link limit is 3" in str(end.error.description)
