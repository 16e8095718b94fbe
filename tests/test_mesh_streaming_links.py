"""Streaming links between routers (router/core/streamlinks.py; docs/mesh.md, "Streaming
links"): a message larger than its first frame crosses to the next router on a data link of its
own, each in a session of its own, so that a consumer stalling it stops only that link; small
messages keep their band's link; with every streaming link busy a stream takes its band's
link; a streaming link the peer detaches fails only its stream; links grown for a burst are
given back once idle (router/core/streamreclaim.py), and only then. Sans-IO routers
(router.testing.meshharness), virtual time."""

from __future__ import annotations

import math
from typing import Any

import pytest

from router.amqp.events import TransferReceived
from router.amqp.message import Message, encode_message
from router.amqp.messaging import Accepted, Modified, Source, Target
from router.amqp.performatives import Error
from router.config.models import PRIORITY_BANDS_DEFAULT, RouterConfig, STREAMING_LINKS_DEFAULT, STREAMING_LINKS_MAX
from router.core.delivery import Forward
from router.core.interrouter import DATA_CAPABILITY, GIVE_BACK_VERSION, MESH_VERSION, STREAM_CAPABILITY
from router.core.paths import band_of
from router.core.streamreclaim import IDLE_S, SCAN_S
from router.management import ManagementAgent
from router.testing.meshharness import MeshHarness

from .test_mesh_priority import _arrivals, refused_attaches

BIG = bytes(range(256)) * 1200  # ~300 KiB: several frames of 64 KiB
DEFAULT_BAND = "A>B/data"  # (the default priority's band keeps the plain name)


def _pair(streams: int = STREAMING_LINKS_DEFAULT) -> MeshHarness:
    h = MeshHarness()
    for i, rid in enumerate("AB"):
        h.router(rid, instance=i + 1)
        h.cores[rid].mesh.streaming_links = streams
    h.link("A", "B")
    h.converge()
    return h


def _names(arrivals: list[tuple[str, bytes]]) -> list[str]:
    """The data link each delivery from another router arrived on, in order."""
    return [name for name, _ in arrivals]


def _many_producers(h: MeshHarness, count: int, credit: int) -> tuple[list[Any], Any, Any, list[Any]]:
    """`count` producers on A, one consumer on B (with `credit`), all of address q."""
    producers = [h.client("A", f"p{i}") for i in range(count)]
    consumer = h.client("B", "c")
    rx = consumer.receiver("q")
    h.advance(0.5)
    rx.flow(credit)
    senders = [p.sender("q") for p in producers]
    h.pump()
    return producers, consumer, rx, senders


def _clients(h: MeshHarness, address: str = "q", at_p: str = "A", at_c: str = "B") -> tuple[Any, Any, Any, Any]:
    producer, consumer = h.client(at_p, f"p-{address}"), h.client(at_c, f"c-{address}")
    rx = consumer.receiver(address)
    h.advance(0.5)
    rx.flow(100)
    tx = producer.sender(address)
    h.pump()
    return producer, consumer, tx, rx


def test_a_large_message_crosses_on_a_streaming_link_and_small_ones_on_their_band() -> None:
    h = _pair()
    at_b = _arrivals(h, "B")
    producer, consumer, tx, rx = _clients(h)
    sent = [producer.send(tx, Message.value(body)) for body in ("small", BIG, "small again")]
    h.pump()
    assert consumer.bodies(rx) == ["small", BIG, "small again"]
    assert all(isinstance(producer.outcomes[d], Accepted) for d in sent)
    assert _names(at_b) == [DEFAULT_BAND, "A>B/stream.0", DEFAULT_BAND]


def test_more_streams_at_once_than_streaming_links_take_their_band_then_the_links_grow() -> None:
    h = _pair(streams=2)
    at_b = _arrivals(h, "B")
    producers, consumer, rx, senders = _many_producers(h, 3, 100)
    payloads = [encode_message(Message.value([i, BIG])) for i in range(3)]
    ids = [tx.send_transfer(b"t", payload[:100_000], more=True) for tx, payload in zip(senders, payloads, strict=True)]
    h.pump()
    # three streams under way: two on the streaming links, the third on its band's link
    assert sorted(_names(at_b)) == sorted(["A>B/stream.0", "A>B/stream.1", DEFAULT_BAND])
    for tx, payload in zip(senders, payloads, strict=True):
        tx.send_transfer(b"t", payload[100_000:])
    h.pump()
    assert sorted(body[0] for body in consumer.bodies(rx)) == [0, 1, 2]
    assert all(body[1] == BIG for body in consumer.bodies(rx))
    assert all(isinstance(p.outcomes[i], Accepted) for p, i in zip(producers, ids, strict=True))
    # the third found every streaming link carrying a stream: one more was attached for the
    # streams to come, and three at once now each have one
    assert [out.link.name for out in h.cores["A"].mesh.peers["B"].streams] == [f"A>B/stream.{i}" for i in range(3)]
    del at_b[:]
    for tx, payload in zip(senders, payloads, strict=True):
        tx.send_transfer(b"t", payload[:100_000], more=True)
    h.pump()
    assert sorted(_names(at_b)) == [f"A>B/stream.{i}" for i in range(3)]
    for tx, payload in zip(senders, payloads, strict=True):
        tx.send_transfer(b"t", payload[100_000:])
    h.pump()
    assert len(consumer.bodies(rx)) == 6


def test_a_streaming_link_the_peer_detaches_fails_only_its_stream() -> None:
    h = _pair()
    at_b = _arrivals(h, "B")
    producer, consumer, tx, rx = _clients(h)
    payload = encode_message(Message.value(BIG))
    delivery = tx.send_transfer(b"t", payload[:100_000], more=True)
    h.pump()
    assert _names(at_b) == ["A>B/stream.0"]
    wire = h.wire_between("A", "B")
    b_engine = wire.a if wire.a_core is h.cores["B"] else wire.b
    (link,) = [lk for s in b_engine.sessions for lk in s.links if lk.name == "A>B/stream.0"]
    link.detach(error=Error(condition="amqp:internal-error", description="gone"))
    h.pump()
    outcome = producer.outcomes[delivery]
    assert isinstance(outcome, Modified) and outcome.delivery_failed
    assert "B" in h.cores["A"].mesh.peers  # the connection and the other links carry on
    tx.send_transfer(b"t", payload[100_000:])  # (the rest of the failed one: discarded)
    again = producer.send(tx, Message.value(BIG))
    h.pump()
    assert isinstance(producer.outcomes[again], Accepted)
    assert consumer.bodies(rx) == [BIG] and _names(at_b)[-1] == "A>B/stream.1"


def test_the_default_band_choice_is_unchanged_by_streaming_links() -> None:
    """A message of priority 9 that fits one frame keeps its band; a large one streams."""
    h = _pair()
    at_b = _arrivals(h, "B")
    producer, consumer, tx, rx = _clients(h)
    from router.amqp.messaging import Header

    producer.send(tx, Message.value("urgent", header=Header(priority=9)))
    producer.send(tx, Message.value(BIG, header=Header(priority=9)))
    h.pump()
    top = band_of(9, PRIORITY_BANDS_DEFAULT)
    assert _names(at_b) == [f"A>B/data.{top}", "A>B/stream.0"]
    assert consumer.bodies(rx) == ["urgent", BIG]


def test_a_peer_attaching_more_streaming_links_than_allowed_is_refused_beyond_them() -> None:
    h = _pair()
    wire = h.wire_between("A", "B")
    b_engine = wire.a if wire.a_core is h.cores["B"] else wire.b
    extra = []
    for i in range(STREAMING_LINKS_MAX):
        session = b_engine.begin_session()
        extra.append(session.attach_sender(f"B>A/extra.{i}", source=Source(address=None),
                                           target=Target(address=None, capabilities=(DATA_CAPABILITY, STREAM_CAPABILITY))))  # fmt: skip
    refused = refused_attaches(h, "B")
    allowed = STREAMING_LINKS_MAX - STREAMING_LINKS_DEFAULT
    assert refused == {link.name: "amqp:resource-limit-exceeded" for link in extra[allowed:]}


def test_edge_connections_have_streaming_links_both_ways() -> None:
    """An edge router's consumers stall streams as any: interior -> edge and edge -> interior
    large messages cross on streaming links too, small ones on the data link."""
    h = MeshHarness()
    h.router("A", instance=1)
    h.router("E", mode="edge")
    h.uplink("E", "A")
    h.converge()
    at_e, at_a = _arrivals(h, "E"), _arrivals(h, "A")
    producer, consumer, tx, rx = _clients(h, "down", "A", "E")
    sent = [producer.send(tx, Message.value(body)) for body in ("small", BIG)]
    h.pump()
    assert consumer.bodies(rx) == ["small", BIG] and all(isinstance(producer.outcomes[d], Accepted) for d in sent)
    assert _names(at_e) == ["A>E/data", "A>E/stream.0"]
    up_producer, up_consumer, up_tx, up_rx = _clients(h, "up", "E", "A")
    up_producer.send(up_tx, Message.value(BIG))
    h.pump()
    assert up_consumer.bodies(up_rx) == [BIG]
    assert _names(at_a)[-1] == "E>A/stream.0"


def test_streaming_links_grow_no_further_than_the_limit() -> None:
    """Streams started one after another and kept open: each that finds every streaming link
    busy (and its band's link busy with another stream) waits, and a link is added for the
    next one, until the limit."""
    h = _pair(streams=1)
    _, consumer, rx, senders = _many_producers(h, 2 * STREAMING_LINKS_MAX + 8, 1000)
    payload = encode_message(Message.value(BIG))
    for tx in senders:  # each starts a stream and keeps it open
        tx.send_transfer(b"t", payload[:70_000], more=True)
        h.pump()
    streams = h.cores["A"].mesh.peers["B"].streams
    assert len(streams) == STREAMING_LINKS_MAX
    assert all(out.streaming is not None for out in streams)
    for tx in senders:
        tx.send_transfer(b"t", payload[70_000:])
    h.pump()
    assert len(consumer.bodies(rx)) == len(senders) and all(body == BIG for body in consumer.bodies(rx))


def test_a_stream_waiting_for_its_band_takes_a_streaming_link_that_comes_free() -> None:
    """Three streams at once with one streaming link: the first takes it, the second its band's
    link (and a second streaming link is attached), the third waits for the band's link; once
    the new streaming link has its credit the third goes on it, while the second still
    streams (before, it waited for the second's last frame)."""
    h = _pair(streams=1)
    at_b = _arrivals(h, "B")
    producers, consumer, rx, senders = _many_producers(h, 3, 100)
    payloads = [encode_message(Message.value([i, BIG])) for i in range(3)]
    for tx, payload in zip(senders, payloads, strict=True):  # (one batch: the new link is not answered yet)
        tx.send_transfer(b"t", payload[:100_000], more=True)
    h.pump()
    assert _names(at_b) == ["A>B/stream.0", DEFAULT_BAND, "A>B/stream.1"]
    band = h.cores["A"].mesh.peers["B"].data_out
    assert band.streaming is not None and not band.pending  # (the second still streams on it)
    for tx, payload in zip(senders, payloads, strict=True):
        tx.send_transfer(b"t", payload[100_000:])
    h.pump()
    assert sorted(body[0] for body in consumer.bodies(rx)) == [0, 1, 2]


@pytest.mark.parametrize("high_first", [False, True])
def test_large_messages_on_streaming_links_keep_their_priority_at_a_blocked_output(high_first: bool) -> None:
    """Two large messages stream at once, priority 0 and 9, each on a streaming link (in either
    order); while the output to B is blocked the rest of both is held; when it drains, the
    priority-9 one's frames go first (a streaming link is served with its delivery's band)."""
    from router.amqp.messaging import Header

    h = _pair()
    seen: list[str] = []

    def observe(events: list[object]) -> None:
        for event in events:
            if isinstance(event, TransferReceived) and event.link.name.startswith("A>B/stream"):
                seen.append(event.link.name)

    h.tap("B", observe)
    producer, consumer, tx, rx = _clients(h)
    urgent_tx = h.client("A", "p2").sender("q")
    h.pump()
    low = encode_message(Message.value(BIG, header=Header(priority=0)))
    high = encode_message(Message.value(BIG, header=Header(priority=9)))
    starts = [(tx, b"low", low), (urgent_tx, b"high", high)]
    for link, tag, payload in reversed(starts) if high_first else starts:
        link.send_transfer(tag, payload[:70_000], more=True)
        h.pump()
    core = h.cores["A"]
    peer = core.mesh.peers["B"]
    link_of = {out.stream_band: out.link.name for out in peer.streams if out.streaming is not None}
    assert set(link_of) == {band_of(0, PRIORITY_BANDS_DEFAULT), band_of(9, PRIORITY_BANDS_DEFAULT)}
    core.set_output_blocked(peer.conn.engine, True, h.now)
    tx.send_transfer(b"low", low[70_000:])
    urgent_tx.send_transfer(b"high", high[70_000:])
    h.pump()
    assert all(out.held is not None for out in peer.streams if out.streaming is not None)
    del seen[:]
    core.set_output_blocked(peer.conn.engine, False, h.now)
    h.pump()
    high_link = link_of[band_of(9, PRIORITY_BANDS_DEFAULT)]
    assert seen and seen[0] == high_link
    assert seen.index(link_of[band_of(0, PRIORITY_BANDS_DEFAULT)]) > max(i for i, name in enumerate(seen) if name == high_link)


# --- giving back idle grown links (router/core/streamreclaim.py) ----------------------------------


def _start(h: MeshHarness, senders: list[Any], payloads: list[bytes]) -> None:
    """Each sender starts its stream (its first 100 kB), one after another."""
    for tx, payload in zip(senders, payloads, strict=True):
        tx.send_transfer(b"t", payload[:100_000], more=True)
        h.pump()


def _finish(h: MeshHarness, senders: list[Any], payloads: list[bytes]) -> None:
    for tx, payload in zip(senders, payloads, strict=True):
        tx.send_transfer(b"t", payload[100_000:])
    h.pump()


def _burst(h: MeshHarness, count: int, address: str = "q", *, rid: str = "A", to: str = "B") -> None:
    """`count` producers on `rid` each stream a large message to a consumer of `address` on
    `to`, all at once (the pool grows), then finish."""
    producers = [h.client(rid, f"burst{i}-{address}") for i in range(count)]
    consumer = h.client(to, f"burst-c-{address}")
    rx = consumer.receiver(address)
    h.advance(0.5)
    rx.flow(1000)
    senders = [p.sender(address) for p in producers]
    h.pump()
    payloads = [encode_message(Message.value([i, BIG])) for i in range(count)]
    _start(h, senders, payloads)
    _finish(h, senders, payloads)
    assert len(consumer.bodies(rx)) == count


def _pool(h: MeshHarness, rid: str = "A", to: str = "B") -> list[str]:
    return [out.link.name for out in h.cores[rid].mesh.peers[to].streams]


def _sessions(h: MeshHarness) -> tuple[int, int]:
    """The sessions of the connection between A and B, at A and at B."""
    wire = h.wire_between("A", "B")
    a_engine, b_engine = (wire.a, wire.b) if wire.a_core is h.cores["A"] else (wire.b, wire.a)
    return len(a_engine.sessions), len(b_engine.sessions)


def _session_counts(h: MeshHarness) -> tuple[int, int]:
    """The same as management shows them: `sessionCount` of the inter-router connection entity."""
    counts = []
    for rid in "AB":
        agent = ManagementAgent(h.cores[rid], RouterConfig())
        (conn,) = [c for c in agent.entity_type("connection").entities(agent, h.now) if c["role"] == "inter-router"]
        counts.append(conn["sessionCount"])
    return counts[0], counts[1]


def _b_engine(h: MeshHarness) -> Any:
    wire = h.wire_between("A", "B")
    return wire.a if wire.a_core is h.cores["B"] else wire.b


def _stream_names(count: int, rid: str = "A", to: str = "B") -> list[str]:
    return [f"{rid}>{to}/stream.{i}" for i in range(count)]


def test_grown_streaming_links_are_given_back_once_idle_and_the_configured_ones_stay() -> None:
    h = _pair(streams=2)
    baseline = _sessions(h)
    mesh_own = 2 * (1 + PRIORITY_BANDS_DEFAULT + 2)  # each side's control link, bands and streaming links
    assert _session_counts(h) == baseline == (mesh_own, mesh_own)
    peer, from_a = h.cores["A"].mesh.peers["B"], h.cores["B"].mesh.peers["A"]
    _burst(h, 5)
    assert _pool(h) == _stream_names(4) and from_a.streams_in == 4
    assert _sessions(h) == _session_counts(h) == (baseline[0] + 2, baseline[1] + 2)
    h.advance(IDLE_S - 1)  # (idle from the end of the burst: not yet)
    assert _pool(h) == _stream_names(4)
    h.advance(SCAN_S + 2)
    assert _pool(h) == _stream_names(2)
    assert from_a.streams_in == 2 and peer.streams_reclaimed == 2
    assert _sessions(h) == _session_counts(h) == baseline  # (their sessions ended, both sides)
    assert not any(inl.link.name in _stream_names(4)[2:] for inl in h.cores["B"].mesh.peers["A"].conn.in_links)
    assert h.cores["A"].idle_streams.deadline == math.inf  # (nothing watched: no timer left)
    (conn,) = [c for c in h.cores["A"].read.connections(h.now) if c.role == "inter-router"]
    assert (conn.streaming_links, conn.streaming_links_reclaimed) == (2, 2)
    h.advance(3 * IDLE_S)  # the configured ones are never given back
    assert _pool(h) == _stream_names(2) and h.cores["A"].mesh.peers["B"] is peer
    producer, consumer, tx, rx = _clients(h, "after")
    producer.send(tx, Message.value(BIG))
    h.pump()
    assert consumer.bodies(rx) == [BIG]


def test_a_grown_link_carrying_a_stream_is_kept_until_it_ends() -> None:
    """A presettled stream: nothing unsettled on the link, only the stream holds it."""
    h = _pair(streams=1)
    at_b = _arrivals(h, "B")
    _, consumer, rx, senders = _many_producers(h, 3, 100)
    payloads = [encode_message(Message.value([i, BIG])) for i in range(3)]
    _start(h, senders[:2], payloads[:2])
    senders[2].send_transfer(b"t", payloads[2][:100_000], more=True, settled=True)
    h.pump()
    assert _names(at_b) == ["A>B/stream.0", DEFAULT_BAND, "A>B/stream.1"]  # (the third on the grown one)
    _finish(h, senders[:2], payloads[:2])
    h.advance(2 * IDLE_S)
    assert _pool(h) == _stream_names(2)
    senders[2].send_transfer(b"t", payloads[2][100_000:], settled=True)
    h.pump()
    assert len(consumer.bodies(rx)) == 3
    h.advance(IDLE_S - 1)
    assert _pool(h) == _stream_names(2)
    h.advance(SCAN_S + 2)
    assert _pool(h) == _stream_names(1)


def test_a_grown_link_with_an_unsettled_delivery_is_kept_until_it_is_settled() -> None:
    from router.amqp.messaging import ACCEPTED

    h = _pair(streams=1)
    at_b = _arrivals(h, "B")
    _, consumer, rx, senders = _many_producers(h, 3, 100)
    consumer.auto_accept = False
    payloads = [encode_message(Message.value([i, BIG])) for i in range(3)]
    _start(h, senders, payloads)
    _finish(h, senders, payloads)
    assert _names(at_b) == ["A>B/stream.0", DEFAULT_BAND, "A>B/stream.1"] and len(consumer.bodies(rx)) == 3
    h.advance(2 * IDLE_S)
    assert _pool(h) == _stream_names(2)
    for received in consumer.received[rx]:
        rx.dispose(received.delivery_id, state=ACCEPTED, settled=True)
    h.pump()
    h.advance(IDLE_S - 1)
    assert _pool(h) == _stream_names(2)
    h.advance(SCAN_S + 2)
    assert _pool(h) == _stream_names(1)


def test_a_grown_link_that_carries_a_delivery_between_two_looks_is_idle_again_from_then() -> None:
    """Idle at every look, but a stream crossed on it in between: its idle time starts again."""
    h = _pair(streams=1)
    at_b = _arrivals(h, "B")
    _, consumer, rx, senders = _many_producers(h, 3, 100)
    payloads = [encode_message(Message.value([i, BIG])) for i in range(3)]
    _start(h, senders, payloads)
    _finish(h, senders, payloads)
    h.advance(IDLE_S - SCAN_S - 1)
    del at_b[:]
    _start(h, senders[:2], payloads[:2])  # (the second on the grown link, between two looks)
    _finish(h, senders[:2], payloads[:2])
    assert _names(at_b) == _stream_names(2)
    h.advance(2 * SCAN_S + 2)  # IDLE_S since it was first idle, not since this stream
    assert _pool(h) == _stream_names(2)
    h.advance(IDLE_S)
    assert _pool(h) == _stream_names(1)
    assert len(consumer.bodies(rx)) == 5


def test_after_giving_back_a_burst_grows_the_pool_again_to_the_limit_reusing_the_names() -> None:
    h = _pair(streams=1)
    _, consumer, rx, senders = _many_producers(h, 2 * STREAMING_LINKS_MAX + 8, 1000)
    payload = encode_message(Message.value(BIG))
    payloads = [payload] * len(senders)
    for _ in range(2):
        refused = refused_attaches(h, "A")
        _start(h, senders, payloads)
        assert sorted(_pool(h)) == sorted(_stream_names(STREAMING_LINKS_MAX))
        assert h.cores["B"].mesh.peers["A"].streams_in == STREAMING_LINKS_MAX
        _finish(h, senders, payloads)
        assert not refused  # (the peer counted the links given back: no attach over its limit)
        h.advance(IDLE_S + SCAN_S + 1)
        assert _pool(h) == _stream_names(1) and h.cores["B"].mesh.peers["A"].streams_in == 1
    assert h.cores["A"].mesh.peers["B"].streams_reclaimed == 2 * (STREAMING_LINKS_MAX - 1)
    assert len(consumer.bodies(rx)) == 2 * len(senders)


def test_a_grown_link_the_peer_detaches_first_leaves_nothing_behind() -> None:
    h = _pair(streams=1)
    baseline = _sessions(h)
    _burst(h, 3)
    assert _pool(h) == _stream_names(2)
    (link,) = [lk for s in _b_engine(h).sessions for lk in s.links if lk.name == "A>B/stream.1"]
    link.detach(error=Error(condition="amqp:internal-error", description="gone"))
    h.pump()
    core = h.cores["A"]
    peer = core.mesh.peers["B"]
    assert _pool(h) == _stream_names(1) and core.idle_streams.since == {}
    assert not any(out.link is link for out in peer.conn.out_links)
    assert _sessions(h) == baseline and h.cores["B"].mesh.peers["A"].streams_in == 1
    assert peer.streams_reclaimed == 0  # (the peer's doing, not a link given back)
    _burst(h, 3, "q2")  # the pool grows again, under the same name
    assert _pool(h) == _stream_names(2)


def test_a_grown_link_takes_the_place_of_a_configured_one_the_peer_detached() -> None:
    """The pool never shrinks below the configured count by giving links back."""
    h = _pair(streams=1)
    _burst(h, 3)
    (link,) = [lk for s in _b_engine(h).sessions for lk in s.links if lk.name == "A>B/stream.0"]
    link.detach(closed=True)
    h.pump()
    assert _pool(h) == ["A>B/stream.1"]
    h.advance(3 * IDLE_S)
    assert _pool(h) == ["A>B/stream.1"]
    _burst(h, 3, "q2")  # one more grows, named with the lowest free index; it is given back
    assert _pool(h) == ["A>B/stream.1", "A>B/stream.0"]
    h.advance(IDLE_S + SCAN_S + 1)
    assert _pool(h) == ["A>B/stream.1"]


def test_an_unanswered_grown_link_is_not_given_back_until_answered_and_idle() -> None:
    from router.core.interrouter import add_stream_link

    h = _pair(streams=1)
    core = h.cores["A"]
    peer = core.mesh.peers["B"]
    out = add_stream_link("A", peer, h.now)  # (as streamlinks.grow: its attach not read by B yet)
    core.idle_streams.watch(out, h.now)
    for k in range(1, 10):
        assert core.idle_streams.due(h.now + k * SCAN_S) == []
    assert _pool(h) == _stream_names(2)
    h.pump()  # answered
    h.advance(10 * SCAN_S + IDLE_S + 1)
    assert _pool(h) == _stream_names(1) and h.cores["B"].mesh.peers["A"].streams_in == 1


def test_the_connection_closing_while_links_are_watched_or_given_back_leaves_nothing_behind() -> None:
    h = _pair(streams=1)
    producers, consumer, rx, senders = _many_producers(h, 5, 100)
    payloads = [encode_message(Message.value([i, BIG])) for i in range(5)]
    _start(h, senders, payloads)
    core = h.cores["A"]
    peer = core.mesh.peers["B"]
    assert _pool(h) == _stream_names(4)
    busy = peer.streams[3].streaming
    assert isinstance(busy, Forward) and busy.in_link is not None
    (open_one,) = [i for i, tx in enumerate(senders) if tx.name == busy.in_link.link.name]
    done = [i for i in range(5) if i != open_one]
    _finish(h, [senders[i] for i in done], [payloads[i] for i in done])
    while len(peer.streams) == 4:  # up to the look that gives the idle ones back, its detaches not read
        due = core.idle_streams.deadline
        h.advance(due - h.now - 0.01)
        h.now = due
        core.tick(due)
    assert _pool(h) == ["A>B/stream.0", "A>B/stream.3"]  # (stream.3 still streams: watched)
    assert list(core.idle_streams.since) == [peer.streams[1]]
    h.cut(h.wire_between("A", "B"))
    assert peer.streams == [] and core.idle_streams.since == {} and core.idle_streams.delivered == {}
    assert core.idle_streams.deadline == math.inf and "B" not in core.mesh.peers
    assert isinstance(producers[open_one].outcomes.get(busy.in_id), (Modified, type(None)))


def test_one_producers_order_is_kept_while_the_pool_grows_again() -> None:
    h = _pair(streams=1)
    _burst(h, 3)
    h.advance(IDLE_S + SCAN_S + 1)
    assert _pool(h) == _stream_names(1)
    _, _, other, _ = _clients(h, "elsewhere")
    other_payload = encode_message(Message.value(BIG))
    other.send_transfer(b"o", other_payload[:100_000], more=True)  # (it keeps stream.0 busy)
    producer, consumer, tx, rx = _clients(h, "ordered")
    sent = [["small", i] if i % 2 else ["big", i, BIG] for i in range(9)]
    for body in sent:
        producer.send(tx, Message.value(body))
        h.pump()
    assert consumer.bodies(rx) == sent
    assert len(_pool(h)) == 2  # (it grew for them)
    other.send_transfer(b"o", other_payload[100_000:])
    h.pump()


def test_grown_links_of_an_edge_connection_are_given_back_too() -> None:
    h = MeshHarness()
    h.router("A", instance=1)
    h.router("E", mode="edge")
    for core in h.cores.values():
        core.mesh.streaming_links = 1
    h.uplink("E", "A")
    h.converge()
    _burst(h, 3, rid="E", to="A")
    edge = h.cores["E"].mesh.edges
    (peer,) = [s.peer for s in h.cores["E"].connections.values() if s.role == "edge"]
    (from_e,) = [s.peer for s in h.cores["A"].connections.values() if s.role == "edge"]
    assert [out.link.name for out in peer.streams] == _stream_names(2, "E", "A") and from_e.streams_in == 2
    h.advance(IDLE_S + SCAN_S + 1)
    assert [out.link.name for out in peer.streams] == _stream_names(1, "E", "A") and from_e.streams_in == 1
    assert edge.active == "A"  # (the uplink stays)


def test_grown_links_to_a_router_of_the_first_mesh_version_are_kept() -> None:
    # A router announcing mesh.version 1 takes the detach of a streaming link it received for a
    # broken connection: links to it are never given back (interrouter.GIVE_BACK_VERSION).
    h = _pair(streams=2)
    peer = h.cores["A"].mesh.peers["B"]
    assert peer.version == MESH_VERSION >= GIVE_BACK_VERSION  # (what a router of this version announces)
    peer.version = 1
    _burst(h, 5)
    h.advance(3 * IDLE_S)
    assert _pool(h) == _stream_names(4) and peer.streams_reclaimed == 0
    assert h.cores["A"].mesh.peers["B"] is peer  # the same connection all along


def test_a_large_message_does_not_overtake_a_small_one_waiting_for_its_band() -> None:
    """One producer's small message waits for its band's link (busy with a stream that found no
    streaming link free); its large message after it waits behind it, though a streaming link
    is free by then. Before, the large one took that link and reached the consumer first (seen
    in the churn soak, bench/soakchurn.py: 34 reorderings in a minute)."""
    h = _pair(streams=1)
    _, _, rx_busy, busy = _many_producers(h, 2, 100)
    payloads = [encode_message(Message.value([i, BIG])) for i in range(2)]
    for tx, payload in zip(busy, payloads, strict=True):  # the first on stream.0, the second on the band's link
        tx.send_transfer(b"t", payload[:100_000], more=True)
        h.pump()
    band = h.cores["A"].mesh.peers["B"].data_out
    assert band.streaming is not None and _pool(h) == _stream_names(2)  # (stream.1 grown, free)
    producer, consumer, tx, rx = _clients(h, "ordered")
    sent = [["small", 0], ["big", 1, BIG], ["small", 2]]
    for body in sent:
        producer.send(tx, Message.value(body))
        h.pump()
    assert consumer.bodies(rx) == []  # (all three wait for the band's link, in order)
    for sender, payload in zip(busy, payloads, strict=True):
        sender.send_transfer(b"t", payload[100_000:])
    h.pump()
    assert consumer.bodies(rx) == sent
