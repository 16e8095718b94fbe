"""Hostile frames over a real socket to a RouterServer: each gets its AMQP condition on the wire
(never a bare TCP close from an unhandled exception), and the router keeps serving everyone else.

- a close/end/detach whose error is no error record: amqp:decode-error (transport §2.8.15)
- begin and, in the same write, a detach of a handle never attached: the session ends with
  amqp:session:unattached-handle (transport §2.7.7, §2.8.17), after our open (§2.4.1)
- an attach whose address is binary: amqp:decode-error (only address-string provides the
  address archetype, messaging §3.2.15)
- an attach whose echo would exceed the peer's max-frame-size (transport §2.7.1, §2.4.1): the
  link is refused (null terminus, detach with amqp:frame-size-too-small); a name too long for
  even that ends the session; no frame we send is larger than the peer allows
"""

from __future__ import annotations

import logging
import struct
from typing import Any

import pytest
import trio

from router.amqp import errors as E
from router.amqp.encode import encode
from router.amqp.framing import AMQP_HEADER, frame
from router.amqp.message import Message
from router.amqp.messaging import Accepted, Source, Target
from router.amqp.performatives import RECEIVER, SENDER, Attach, Begin, Close, Detach, End, Open
from router.amqp.types import Described, ULong
from router.net.client import connect
from router.net.server import RouterServer

from router.testing.enginepair import WireFrame, parse_wire
from .support.router_process import core_ready, router_server

__all__ = ["router_server"]  # the fixture, imported for pytest

pytestmark = pytest.mark.skipif(not core_ready(), reason="the routing core cannot route yet")


def raw(channel: int, code: int, fields: list[Any]) -> bytes:
    """A frame with any field values, as no well-behaved encoder would write them."""
    body = encode(Described(ULong(code), fields))
    return struct.pack(">IBBH", 8 + len(body), 2, 0, channel) + body


def opened(max_frame_size: int = 65536) -> bytes:
    return AMQP_HEADER + frame(0, Open(container_id="hostile", max_frame_size=max_frame_size))


BEGIN = frame(0, Begin(next_outgoing_id=0, incoming_window=1000, outgoing_window=1000))


async def exchange(port: int, data: bytes, *, until: type | None = Close, then: bytes = b"") -> list[WireFrame]:
    """Send `data`, read frames until one of type `until` (or the router closes the socket), send
    `then` and read on until the router closes the socket; every frame the router sent."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    received = b""
    try:
        await stream.send_all(data)
        with trio.fail_after(5):
            while True:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                received += chunk
                frames = [f for f in parse_wire(received) if isinstance(f, WireFrame)]
                if until is not None and any(isinstance(f.body, until) for f in frames):
                    if not then:
                        break
                    await stream.send_all(then)
                    until = None  # now read to the end
    finally:
        await stream.aclose()
    return [f for f in parse_wire(received) if isinstance(f, WireFrame)]


def bodies(frames: list[WireFrame]) -> list[Any]:
    return [f.body for f in frames if f.body is not None]


async def still_routes(port: int) -> None:
    """Another client gets its message through and its outcome."""
    async with connect("127.0.0.1", port) as client:
        await routes_to(client, await client.open_receiver("after", credit=1), "after")


async def routes_to(client: Any, receiver: Any, address: str) -> None:
    """A message `client` sends to `address` reaches `receiver` (the next it gets) and is accepted."""
    sender = await client.open_sender(address)
    tracker = await sender.start_send(Message.value("ok"))
    with trio.fail_after(5):
        delivery = await receiver.receive()
        receiver.accept(delivery)
        assert isinstance(await tracker.wait(), Accepted)
    assert delivery.message.body_value == "ok"


async def no_connections_left(server: RouterServer, but: int = 0) -> None:
    with trio.fail_after(5):
        while server.stats()["connections"] > but:
            await trio.sleep(0.01)  # the server forgets a connection after its task ends


@pytest.mark.parametrize("error", [True, "text", 7, [None], Described(ULong(0x24), [])])
@pytest.mark.parametrize("code", [0x18, 0x17, 0x16])  # close, end, detach
async def test_an_error_field_that_is_no_error_record_is_a_decode_error(
    router_server: tuple[RouterServer, int], caplog: pytest.LogCaptureFixture, code: int, error: Any
) -> None:
    server, port = router_server
    before = {0x18: b"", 0x17: BEGIN, 0x16: BEGIN + frame(0, Attach(name="l", handle=0, role=RECEIVER, source=Source(address="q")))}[code]
    fields: list[Any] = {0x18: [error], 0x17: [error], 0x16: [0, True, error]}[code]
    got = bodies(await exchange(port, opened() + before + raw(0, code, fields)))
    close = got[-1]
    assert isinstance(close, Close) and close.error is not None
    assert close.error.condition == E.DECODE_ERROR and "error must be error" in close.error.description
    await no_connections_left(server)
    await still_routes(port)
    assert not [r for r in caplog.records if r.exc_info], "an exception escaped a connection"


async def test_begin_then_detach_of_an_unattached_handle_in_one_write(
    router_server: tuple[RouterServer, int], caplog: pytest.LogCaptureFixture
) -> None:
    server, port = router_server
    got = bodies(await exchange(port, opened() + BEGIN + frame(0, Detach(handle=5, closed=True)), until=End))
    assert [type(b) for b in got] == [Open, Begin, End]  # nothing before our open (§2.4.1)
    end = got[-1]
    assert end.error is not None and end.error.condition == E.UNATTACHED_HANDLE
    await no_connections_left(server)
    await still_routes(port)
    assert not [r for r in caplog.records if r.exc_info]


@pytest.mark.parametrize("terminus", ["source", "target"])
async def test_a_binary_address_is_a_decode_error(router_server: tuple[RouterServer, int], terminus: str) -> None:
    server, port = router_server
    role = RECEIVER if terminus == "source" else SENDER
    node = Described(ULong(0x28 if terminus == "source" else 0x29), [b"binary-address"])
    other = Described(ULong(0x29 if terminus == "source" else 0x28), [None])
    termini = [node, other] if terminus == "source" else [other, node]
    attach = raw(0, 0x12, ["l", 0, role, None, None, *termini, None, None, None if role else 0])
    got = bodies(await exchange(port, opened() + BEGIN + attach))
    close = got[-1]
    assert isinstance(close, Close) and close.error is not None
    assert close.error.condition == E.DECODE_ERROR and f"{terminus}.address" in close.error.description
    await no_connections_left(server)
    await still_routes(port)


@pytest.mark.parametrize("role", [RECEIVER, SENDER])
async def test_an_attach_whose_echo_exceeds_the_peers_frame_size_is_refused(
    router_server: tuple[RouterServer, int], caplog: pytest.LogCaptureFixture, role: bool
) -> None:
    server, port = router_server
    address = "a" * 30_000  # fits our max-frame-size (64 KiB), not the peer's 8 KiB
    if role is RECEIVER:
        attach = Attach(name="big", handle=0, role=RECEIVER, source=Source(address=address), target=Target())
    else:
        attach = Attach(name="big", handle=0, role=SENDER, source=Source(), target=Target(address=address), initial_delivery_count=0)
    frames = await exchange(port, opened(8192) + BEGIN + frame(0, attach), until=Detach, then=frame(0, Close()))
    assert all(f.size <= 8192 for f in frames), [f.size for f in frames]
    got = bodies(frames)
    assert [type(b) for b in got] == [Open, Begin, Attach, Detach, Close]
    answer, detach = got[2], got[3]
    assert answer.source is None and answer.target is None  # a refusal (transport §2.6.3)
    assert detach.closed and detach.error is not None
    assert detach.error.condition == E.FRAME_SIZE_TOO_SMALL and "8192" in detach.error.description
    assert got[4].error is None  # the connection itself was fine: our close answered normally
    await no_connections_left(server)
    await still_routes(port)
    assert not [r for r in caplog.records if r.exc_info]


async def test_a_link_name_too_long_to_answer_at_all_ends_the_session(
    router_server: tuple[RouterServer, int],
) -> None:
    server, port = router_server
    # the attach must echo the name (transport §2.7.3): 600 bytes never fit the peer's 512
    attach = Attach(name="n" * 600, handle=0, role=RECEIVER, source=Source(address="q"), target=Target())
    frames = await exchange(port, opened(512) + BEGIN + frame(0, attach), until=End, then=frame(0, Close()))
    assert all(f.size <= 512 for f in frames), [f.size for f in frames]
    got = bodies(frames)
    assert [type(b) for b in got] == [Open, Begin, End, Close]
    assert got[2].error is not None and got[2].error.condition == E.FRAME_SIZE_TOO_SMALL
    await no_connections_left(server)


async def test_a_session_error_leaves_other_clients_routing(
    router_server: tuple[RouterServer, int], caplog: pytest.LogCaptureFixture
) -> None:
    # A consumer's session fails (a detach of an unattached handle) while its link holds credit:
    # the router sends nothing more on that session (its credit went with it), and a producer's
    # delivery to the address still gets an outcome once the broken consumer is gone.
    server, port = router_server
    consume = frame(0, Attach(name="r", handle=0, role=RECEIVER, source=Source(address="shared"), target=Target()))
    from router.amqp.performatives import Flow

    credit = frame(0, Flow(next_incoming_id=0, incoming_window=1000, next_outgoing_id=0, outgoing_window=1000,
                           handle=0, delivery_count=0, link_credit=10))  # fmt: skip
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    received = b""

    async def read_until(kind: type) -> None:
        nonlocal received
        with trio.fail_after(5):
            while not any(isinstance(f, WireFrame) and isinstance(f.body, kind) for f in parse_wire(received)):
                received += await stream.receive_some(65536)

    await stream.send_all(opened() + BEGIN + consume + credit)
    await read_until(Attach)  # the router answered: a consumer with credit
    await stream.send_all(frame(0, Detach(handle=9, closed=True)))  # unattached: session error
    await read_until(End)
    end = [f.body for f in parse_wire(received) if isinstance(f, WireFrame) and isinstance(f.body, End)][0]
    assert end.error is not None and end.error.condition == E.UNATTACHED_HANDLE
    async with connect("127.0.0.1", port) as client:
        sender = await client.open_sender("shared")
        with trio.fail_after(5):  # the address still has its (broken) consumer: credit comes
            tracker = await sender.start_send(Message.value("to-shared"))
        await stream.aclose()  # the broken consumer goes away
        with trio.fail_after(5):
            outcome = await tracker.wait()  # the sender learns its delivery's fate
        assert type(outcome).__name__ in ("Released", "Modified"), outcome
    await no_connections_left(server)
    await still_routes(port)
    assert not [r for r in caplog.records if r.exc_info and r.levelno >= logging.ERROR]


def test_a_session_the_engine_ended_takes_its_links_credit_with_it() -> None:
    # In process, deterministically: a consumer holding credit, whose session the engine ends
    # for a violation, is offered nothing more (a send on it could only fail, failing the
    # producer's connection), and the producer's delivery waits, then gets an outcome.
    from router.testing.routerharness import RouterHarness

    harness = RouterHarness()
    broken, other = harness.connect("broken"), harness.connect("other")
    link = broken.receiver("q")
    harness.pump()
    link.flow(10)
    harness.pump()
    assert broken.session is not None
    broken.engine.write_bytes(frame(broken.session.channel or 0, Detach(handle=77, closed=True)))
    harness.pump()  # the router ends the session: unattached-handle
    ends = [e for e in broken.events if type(e).__name__ == "RemoteEnd"]
    assert ends and ends[0].error.condition == E.UNATTACHED_HANDLE
    sender = other.sender("q")
    harness.pump()
    delivery_id = other.send(sender, Message.value("x"))
    harness.pump()  # nothing raises; the delivery waits (the broken link has no credit)
    assert delivery_id not in other.outcomes and not broken.received[link]
    harness.disconnect(broken)  # ... and its producer learns the delivery's fate
    assert type(other.outcomes[delivery_id]).__name__ in ("Released", "Modified")


def test_no_frame_the_engine_writes_exceeds_the_peers_max_frame_size() -> None:
    # The class behind the 30 KB echo: errors quoting the peer are cut to fit, an attach that
    # cannot fit raises FrameTooLarge and announces nothing, and Link.answer turns that into a
    # refusal; every frame written fits the peer's 512 bytes (transport §2.7.1).
    from router.amqp.errors import FrameTooLarge
    from router.amqp.performatives import Error
    from router.amqp.events import RemoteAttach

    from .test_engine_violations import Server, attach

    server = Server(peer_max_frame_size=512)
    session = server.begin(0)
    server.send(0, attach(0, "echo-me", SENDER, target=Target(address="t" * 400)))
    (remote,) = [e for e in server.peer.take_events() if isinstance(e, RemoteAttach)]
    link = remote.link
    with pytest.raises(FrameTooLarge) as raised:
        link.attach(target=Target(address="t" * 400, capabilities=("x" * 200,)))
    assert raised.value.condition == E.FRAME_SIZE_TOO_SMALL and link.state.local.name == "UNINIT"
    assert not link.answer(target=Target(address="t" * 400, capabilities=("x" * 200,)))
    frames = [f for f in parse_wire(server.engine.data_to_send()) if isinstance(f, WireFrame)]
    assert [type(f.body) for f in frames] == [Attach, Detach]
    assert frames[1].body.error.condition == E.FRAME_SIZE_TOO_SMALL
    # an end whose error quotes 2000 bytes of the peer's data still goes out, cut to fit
    session.end(Error(condition=E.INVALID_FIELD, description="q" * 2000, info={"k": "v" * 1000}))
    frames += [f for f in parse_wire(server.engine.data_to_send()) if isinstance(f, WireFrame)]
    end = frames[-1]
    assert isinstance(end.body, End) and end.body.error.condition == E.INVALID_FIELD
    assert end.body.error.description.startswith("q" * 100)
    assert all(f.size <= 512 for f in frames), [f.size for f in frames]


# --- what fuzzing found (bench/fuzz.py), in process ------------------------------------------------


def _core_and_engine() -> tuple[Any, Any, Any]:
    from router.config.models import Listener, RouterConfig, RouterSection
    from router.core.connections import new_engine
    from router.core.router import RouterCore

    config = RouterConfig(router=RouterSection(id="r"), listeners=(Listener(name="amqp", port=0),))
    core = RouterCore(config)
    engine = new_engine(config, config.listeners[0])
    core.accept(engine, config.listeners[0])
    return core, engine, config


@pytest.mark.parametrize(
    "data",
    [
        opened() + raw(0, 0x18, [True]),  # a connection error after open
        opened() + b"\x00\x00\x00\x09\x02\x00\x00\x00\x00",  # a 1-byte body cut at the frame's end
        b"AMQP\x01\x01\x00\x00",  # a refused protocol header
        opened() + BEGIN + frame(0, Detach(handle=5, closed=True)),  # a session error
    ],
)
def test_every_way_a_connection_ends_reports_the_end_of_its_stream_once(data: bytes) -> None:
    # The core forgets a connection on TransportClosed: a connection that failed first must
    # still report it when its stream ends (it used to stay in the core for ever).
    from router.amqp.events import TransportClosed

    core, engine, _ = _core_and_engine()
    engine.receive_data(data, 1.0)
    core.handle(engine, engine.events(), 1.0)
    engine.receive_data(b"", 1.0)
    events = engine.events()
    assert [type(e) for e in events if isinstance(e, TransportClosed)] == [TransportClosed]
    core.handle(engine, events, 1.0)
    assert engine not in core.connections
    engine.receive_data(b"", 1.0)
    assert engine.events() == []  # once


def test_a_reused_delivery_id_ends_the_session_and_the_router_carries_on() -> None:
    # Found by bench/fuzz.py: a producer repeating delivery-id 0 made the router's disposition
    # batch recurse without end (RecursionError out of the core).
    from router.amqp.performatives import Flow, Transfer

    core, engine, _ = _core_and_engine()
    data = opened() + BEGIN
    data += frame(0, Attach(name="r", handle=0, role=RECEIVER, source=Source(address="q"), target=Target()))
    data += frame(0, Attach(name="s", handle=1, role=SENDER, source=Source(), target=Target(address="q"), initial_delivery_count=0))
    data += frame(0, Flow(next_incoming_id=0, incoming_window=1000, next_outgoing_id=0, outgoing_window=1000,
                          handle=0, delivery_count=0, link_credit=10))  # fmt: skip
    engine.receive_data(data, 1.0)
    core.handle(engine, engine.events(), 1.0)  # the router answers and gives credit
    engine.data_to_send()
    body = b"\x00\x53\x77\xa1\x01x"  # amqp-value "x"
    data = b"".join(frame(0, Transfer(handle=1, delivery_id=0, delivery_tag=b"0", settled=False), body) for _ in range(3))
    engine.receive_data(data, 1.0)
    core.handle(engine, engine.events(), 1.0)  # raises nothing
    ends = [f.body for f in parse_wire(engine.data_to_send()) if isinstance(f, WireFrame) and isinstance(f.body, End)]
    assert ends and ends[0].error is not None and ends[0].error.condition == E.INVALID_FIELD


def test_a_disposition_batch_with_a_delivery_twice_keeps_its_latest_state() -> None:
    from router.amqp.connection import Connection, ConnectionConfig
    from router.amqp.messaging import Released
    from router.amqp.session import Session
    from router.core.dispositions import DispositionBatch

    # (a real Session: the compiled build checks the argument's type)
    batch = DispositionBatch(Session(Connection(ConnectionConfig(container_id="test")), None), RECEIVER, True)
    for delivery_id, state in [(3, Accepted()), (1, Accepted()), (3, Released()), (2, Accepted())]:
        batch.add(delivery_id, state)
    assert batch.ranges() == [(1, 2, Accepted()), (3, 3, Released())]


@pytest.mark.parametrize("section", [
    b"\x00\x53\x72\x45", b"\x00\x53\x72\xa1\x01x", b"\x00\x53\x71\x52\x07",  # no map
    b"\x00\x53\x72\xc1\x03\x02\xff\x40",  # a key with no valid constructor
    b"\x00\x53\x72\xc1\x05\x02\xa3\x01x\xff",  # a value with no valid constructor
    b"\x00\x53\x72\xc1\x04\x02\xa3\x05x\x40",  # a key running past the map
    b"\x00\x53\x72\xc1\x02\x01\x40",  # an odd count
])
@pytest.mark.parametrize("settled", [False, True])
def test_malformed_annotations_reject_the_delivery(section: bytes, settled: bool) -> None:
    # Found by bench/fuzz.py: message annotations encoded as a list (or a string) raised
    # DecodeError out of the core when it stripped the router's annotations, failing the
    # producer's connection. Later: a map whose entries are malformed (peek checks only the
    # section's bounds; the entries are read when the client's annotations are stripped) raised
    # it too, after the delivery was counted in flight. The message is malformed: the delivery
    # is rejected (dropped and counted if presettled), nothing else.
    from router.testing.routerharness import RouterHarness

    harness = RouterHarness()
    client = harness.connect("producer")
    receiver = client.receiver("q")
    harness.pump()
    receiver.flow(5)
    sender = client.sender("q")
    harness.pump()
    bad = client.send(sender, section + b"\x00\x53\x77\xa1\x01x", settled=settled)
    good = client.send(sender, Message.value("fine"))
    harness.pump()
    if not settled:
        rejected = client.outcomes[bad]
        assert type(rejected).__name__ == "Rejected" and rejected.error.condition == E.DECODE_ERROR
        assert rejected.error.description.startswith("malformed")
    assert isinstance(client.outcomes[good], Accepted) and client.bodies(receiver) == ["fine"]


def test_an_outcome_passed_on_fits_the_producers_max_frame_size() -> None:
    # The router passes a consumer's outcome to the producer: a rejection whose error quotes
    # kilobytes (written within the consumer's 64 KiB frames) must still reach a producer that
    # takes 512-byte frames, its condition intact (transport §2.7.1).
    from router.amqp.messaging import Rejected
    from router.amqp.performatives import Error

    from router.testing.routerharness import RouterHarness

    harness = RouterHarness()
    producer = harness.connect("producer", max_frame_size=512)
    consumer = harness.connect("consumer")
    consumer.auto_accept = False
    receiver = consumer.receiver("q")
    harness.pump()
    receiver.flow(5)
    sender = producer.sender("q")
    harness.pump()
    sent = producer.send(sender, Message.value("judge me"))
    harness.pump()
    (got,) = consumer.received[receiver]
    verdict = Rejected(error=Error(condition="app:too-dull", description="d" * 3000, info={"why": "w" * 2000}))
    receiver.dispose(got.delivery_id, state=verdict, settled=True)
    harness.pump()
    outcome = producer.outcomes[sent]
    assert isinstance(outcome, Rejected) and outcome.error is not None
    assert outcome.error.condition == "app:too-dull" and outcome.error.description.startswith("d" * 100)
    assert not [e for e in producer.events if type(e).__name__ in ("RemoteClose", "ProtocolViolation")]


async def test_a_transfer_behind_the_producers_close_in_one_write_holds_no_consumer(
    router_server: tuple[RouterServer, int], caplog: pytest.LogCaptureFixture
) -> None:
    """A producer writes its close and, behind it, the first frame of a streamed message
    (more=true): the frame must not be routed (the producer is gone with its close), or its
    consumer's link would wait for the rest of that message for ever (found by the peer-router
    fuzzer). The consumer gets the next producer's message."""
    from router.amqp.performatives import Flow, Transfer

    server, port = router_server
    async with connect("127.0.0.1", port) as client:
        receiver = await client.open_receiver("behind-close", credit=5)
        attach = frame(0, Attach(name="p", handle=0, role=SENDER, initial_delivery_count=0,
                                 source=Source(), target=Target(address="behind-close")))  # fmt: skip
        behind = frame(0, Close()) + frame(0, Transfer(handle=0, delivery_id=0, delivery_tag=b"t", more=True), b"\x00Sw\xa1\x01x")
        got = bodies(await exchange(port, opened() + BEGIN + attach, until=Flow, then=behind))
        assert isinstance(got[-1], Close) and got[-1].error is not None and "after close" in got[-1].error.description
        await no_connections_left(server, but=1)  # (the consumer's)
        await routes_to(client, receiver, "behind-close")  # its next message is the next producer's
    assert not [r for r in caplog.records if r.exc_info]
