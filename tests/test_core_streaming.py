"""Large messages cut-through, aborts, expiry, router annotations and limits, sans-IO."""

from __future__ import annotations

import time

from router.amqp.connection import Connection, ConnectionConfig
from router.amqp.events import RemoteClose, TransferReceived
from router.amqp.framing import frame
from router.amqp.message import Message, encode_message
from router.amqp.messaging import Header, Properties, Rejected, Released
from router.amqp.performatives import Begin
from router.config.models import Limits, Listener, RouterConfig, RouterSection
from router.core.connections import new_engine
from router.testing.routerharness import Client, RouterHarness


def _pair(h: RouterHarness, credit: int = 10, **client: object) -> tuple[Client, Client, object, object]:
    producer, consumer = h.connect("p"), h.connect("c", **client)  # type: ignore[arg-type]
    rx, tx = consumer.receiver("big"), producer.sender("big")
    h.pump()
    rx.flow(credit)
    h.pump()
    return producer, consumer, tx, rx


def test_ten_megabytes_stream_through_frame_by_frame() -> None:
    config = RouterConfig(listeners=(Listener(max_frame_size=16384),))
    h = RouterHarness(config)
    producer, consumer, tx, rx = _pair(h, max_frame_size=4096)
    body = bytes(range(256)) * (10 * 4096)  # 10 MiB
    payload = encode_message(Message.data(body))
    half = len(payload) // 2
    tx.send_transfer(b"t", payload[:half], more=True)  # type: ignore[attr-defined]
    h.pump()
    # Cut-through: the consumer already has the first half, the router holds none of it.
    arrived = [e for e in consumer.events if isinstance(e, TransferReceived)]
    assert sum(len(e.payload) for e in arrived) == half and all(e.more for e in arrived)
    assert max(len(e.payload) for e in arrived) <= 4096
    assert all(s.buffered_bytes == 0 for s in h.core.connections.values())
    tx.send_transfer(b"t", payload[half:])  # type: ignore[attr-defined]
    h.pump()
    (received,) = consumer.received[rx]  # type: ignore[index]
    assert received.message.body_bytes == body


def test_producer_abort_is_propagated() -> None:
    h = RouterHarness()
    producer, consumer, tx, rx = _pair(h)
    tx.send_transfer(b"t", encode_message(Message.data(b"x" * 70000))[:50000], more=True)  # type: ignore[attr-defined]
    h.pump()
    tx.abort()  # type: ignore[attr-defined]
    h.pump()
    frames = [e for e in consumer.events if isinstance(e, TransferReceived)]
    assert frames and frames[-1].aborted
    assert not consumer.received[rx]  # type: ignore[index]
    producer.send(tx, Message.value("after"))  # type: ignore[arg-type]
    h.pump()
    assert consumer.bodies(rx) == ["after"]  # type: ignore[arg-type]


def test_producer_dying_mid_stream_aborts_downstream() -> None:
    h = RouterHarness()
    producer, consumer, tx, rx = _pair(h)
    tx.send_transfer(b"t", encode_message(Message.data(b"x" * 70000))[:50000], more=True)  # type: ignore[attr-defined]
    h.pump()
    h.disconnect(producer)
    frames = [e for e in consumer.events if isinstance(e, TransferReceived)]
    assert frames[-1].aborted


def test_expired_messages_are_not_forwarded() -> None:
    h = RouterHarness(now=time.time())
    producer, consumer, tx, rx = _pair(h)
    now_ms = int(h.now * 1000)
    past = producer.send(tx, Message.value("old", properties=Properties(absolute_expiry_time=now_ms - 1000)))  # type: ignore[arg-type]
    both = producer.send(tx, Message.value("both", header=Header(ttl=60000), properties=Properties(absolute_expiry_time=now_ms - 1)))  # type: ignore[arg-type]
    fresh = producer.send(tx, Message.value("fresh", header=Header(ttl=60000)))  # type: ignore[arg-type]
    h.pump()
    assert consumer.bodies(rx) == ["fresh"]  # type: ignore[arg-type]
    assert isinstance(producer.outcomes[past], Released) and isinstance(producer.outcomes[both], Released)
    assert h.core.table.entries["Mbig"].expired == 2


def test_ttl_counts_from_arrival_not_from_creation_time() -> None:
    """Messaging §3.2.1: the expiry a ttl gives is computed from the message's arrival at the
    intermediary. A creation-time in the past (a producer whose clock is behind, or a message
    made long before it was sent) does not make it expire on arrival (it did: the router counted
    the ttl from creation-time, and released such messages at once). The ttl still runs out
    while it waits."""
    h = RouterHarness(now=time.time())
    producer, consumer, tx, rx = _pair(h, credit=0)
    now_ms = int(h.now * 1000)
    old = producer.send(tx, Message.value("made long ago", header=Header(ttl=1000), properties=Properties(creation_time=now_ms - 3_600_000)))  # type: ignore[arg-type]
    later = producer.send(tx, Message.value("waits too long", header=Header(ttl=1000), properties=Properties(creation_time=now_ms)))  # type: ignore[arg-type]
    h.pump()
    assert old not in producer.outcomes and later not in producer.outcomes  # both wait for credit
    rx.flow(1)  # type: ignore[attr-defined]
    h.pump()
    assert consumer.bodies(rx) == ["made long ago"]  # type: ignore[arg-type]
    h.advance(2.0)  # past the other's ttl, counted from its arrival
    assert isinstance(producer.outcomes[later], Released)


def test_a_message_expiring_while_waiting_for_credit_is_released() -> None:
    h = RouterHarness(now=time.time())
    producer, consumer, tx, rx = _pair(h, credit=0)
    waiting = producer.send(tx, Message.value("soon stale", header=Header(ttl=1000)))  # type: ignore[arg-type]
    h.pump()
    assert waiting not in producer.outcomes
    h.advance(2.0)
    assert isinstance(producer.outcomes[waiting], Released)
    rx.flow(10)  # type: ignore[attr-defined]
    h.pump()
    assert not consumer.received[rx]  # type: ignore[index]


def test_router_annotations_from_clients_are_stripped() -> None:
    h = RouterHarness()
    producer, consumer, tx, rx = _pair(h)
    annotations = {"x-opt-qd.trace": ["0/evil"], "x-opt-qd.to": "elsewhere", "x-opt-app": 7}
    producer.send(tx, Message.value("m", message_annotations=annotations))  # type: ignore[arg-type]
    h.pump()
    (received,) = consumer.received[rx]  # type: ignore[index]
    assert received.message.message_annotations == {"x-opt-app": 7}


def test_oversize_messages_are_rejected_with_message_size_exceeded() -> None:
    h = RouterHarness(RouterConfig(router=RouterSection(id="R"), limits=Limits(max_message_size=10000)))
    producer, consumer, tx, rx = _pair(h)
    assert tx.remote_attach.max_message_size == 10000  # type: ignore[attr-defined]
    small = producer.send(tx, Message.data(b"x" * 100))  # type: ignore[arg-type]
    big = producer.send(tx, Message.data(b"x" * 20000))  # type: ignore[arg-type]
    h.pump()
    assert isinstance(producer.outcomes[big], Rejected)
    assert producer.outcomes[big].error.condition == "amqp:link:message-size-exceeded"
    assert not isinstance(producer.outcomes[small], Rejected)
    assert len(consumer.received[rx]) == 1  # type: ignore[index]
    # the link stays usable
    again = producer.send(tx, Message.data(b"y"))  # type: ignore[arg-type]
    h.pump()
    assert not isinstance(producer.outcomes[again], Rejected)


def test_connection_limit() -> None:
    h = RouterHarness(RouterConfig(router=RouterSection(id="R"), limits=Limits(max_connections=1)))
    h.connect("first")
    second = h.connect("second")
    closes = [e for e in second.events if isinstance(e, RemoteClose)]
    assert closes and closes[0].error is not None
    assert closes[0].error.condition == "amqp:resource-limit-exceeded"


def test_link_limit_per_connection() -> None:
    h = RouterHarness(RouterConfig(listeners=(Listener(max_links_per_connection=2),)))
    client = h.connect("c")
    links = [client.receiver(f"a{i}") for i in range(3)]
    h.pump()
    assert links[0].remote_error is None and links[1].remote_error is None
    assert links[2].remote_error is not None
    assert links[2].remote_error.condition == "amqp:resource-limit-exceeded"


def test_session_limit_is_advertised_as_channel_max() -> None:
    h = RouterHarness(RouterConfig(listeners=(Listener(max_sessions_per_connection=4),)))
    client = h.connect("c")
    assert client.engine.remote_channel_max == 3


def test_a_stream_growing_past_the_limit_is_aborted_downstream_and_rejected_upstream() -> None:
    h = RouterHarness(RouterConfig(router=RouterSection(id="R"), limits=Limits(max_message_size=10000)))
    producer, consumer, tx, rx = _pair(h)
    payload = encode_message(Message.data(b"z" * 16000))
    delivery_id = tx.send_transfer(b"t", payload[:6000], more=True)  # type: ignore[attr-defined]
    h.pump()
    assert any(isinstance(e, TransferReceived) for e in consumer.events)  # cut-through started
    tx.send_transfer(b"t", payload[6000:])  # type: ignore[attr-defined]
    h.pump()
    frames = [e for e in consumer.events if isinstance(e, TransferReceived)]
    assert frames[-1].aborted and not consumer.received[rx]  # type: ignore[index]
    assert producer.outcomes[delivery_id].error.condition == "amqp:link:message-size-exceeded"


def test_a_violation_read_together_with_the_open_gets_open_and_close_not_a_crash() -> None:
    # The peer's open and a begin above our channel-max arrive in one read: the engine closes
    # the connection (framing-error) before the core sees RemoteOpen; the core must not try to
    # open it again.
    config = RouterConfig(listeners=(Listener(max_sessions_per_connection=4),))
    h = RouterHarness(config)
    router_side = new_engine(config, config.listeners[0])
    h.core.accept(router_side, config.listeners[0])
    raw = Connection(ConnectionConfig(container_id="raw"))
    raw.open()
    begin = frame(4, Begin(next_outgoing_id=0, incoming_window=10, outgoing_window=10))
    router_side.receive_data(raw.data_to_send() + begin, h.now)
    h.core.handle(router_side, router_side.events(), h.now)
    raw.receive_data(router_side.data_to_send(), h.now)
    closes = [e for e in raw.events() if isinstance(e, RemoteClose)]
    assert closes and closes[0].error is not None
    assert closes[0].error.condition == "amqp:connection:framing-error"


def test_a_connection_failing_mid_read_is_not_chosen_as_a_destination() -> None:
    # One read holds a delivery for this client's own consumer link, then garbage: the engine
    # closes the connection (framing error) before the core sees the delivery, which must then
    # not be sent on the closed connection (nothing may follow a close, transport §2.4.3).
    h = RouterHarness()
    client = h.connect("self")
    rx, tx = client.receiver("loop"), client.sender("loop")
    h.pump()
    rx.flow(5)
    h.pump()
    client.send(tx, Message.value("to myself"))
    data = client.engine.data_to_send() + b"\x00\x00\x00\x10\x02\x00\x00\x00garbage!"
    client.router_side.receive_data(data, h.now)
    h.core.handle(client.router_side, client.router_side.events(), h.now)  # must not raise
    h.core.take_touched()
    assert client.router_side.finished
