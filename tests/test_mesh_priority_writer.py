"""Priority bands at the writer, sans-IO (docs/mesh.md, "Priorities"; router.core.holding): while
an inter-router connection's output is blocked its band links' stream frames are held in the
router, counted against the producer's byte bound; when it drains the highest band goes first,
within half the write high-water mark at a time; a link's frames stay in order, every delivery
completes with its outcome, and a neighbour lost while frames are held loses nothing."""

from __future__ import annotations

from typing import Any

from router.amqp.connection import Connection
from router.amqp.events import TransferReceived
from router.amqp.message import Message, encode_message
from router.amqp.messaging import Accepted, Header, Modified, Released
from router.config.models import PRIORITY_BANDS_DEFAULT
from router.core.connections import ConnState
from router.core.links import InLink, OutLink
from router.core.router import RouterCore
from router.testing.meshharness import MeshHarness
from router.testing.routerharness import Client

from .support.release_checks import Fault, InjectedFault, needs_patchable_core

TOP = PRIORITY_BANDS_DEFAULT - 1
# A body whose every byte says where it belongs: frames out of order would change it.
BODY = bytes(range(251)) * 12_000  # ~3 MB, about 46 frames of 64 KiB


def _line(harness: type[MeshHarness] = MeshHarness) -> MeshHarness:
    h = harness()
    for i, rid in enumerate("ABC"):
        h.router(rid, instance=i + 1)
        h.cores[rid].mesh.streaming_links = 0  # (band links' holding: no stream on a link of its own)
    # Bounded socket buffers (a LAN mesh's setting): the write high-water mark is bounded too.
    h.link("A", "B", socket_buffer_bytes=512 * 1024)
    h.link("B", "C", socket_buffer_bytes=512 * 1024)
    h.converge()
    return h


def _clients(h: MeshHarness) -> tuple[Client, Client, dict[str, Any], dict[str, Any]]:
    producer, consumer = h.client("A", "p"), h.client("C", "c")
    rx = {a: consumer.receiver(a) for a in ("bulk", "urgent")}
    h.advance(0.5)
    for link in rx.values():
        link.flow(100)
    tx = {a: producer.sender(a) for a in ("bulk", "urgent")}
    h.pump()
    return producer, consumer, tx, rx


def _to_b(h: MeshHarness) -> tuple[RouterCore, Connection, list[OutLink]]:
    """A's core, its engine of the connection to B, and its band links to B (lowest first)."""
    core = h.cores["A"]
    peer = core.mesh.peers["B"]
    assert peer.bands is not None and len(peer.bands) == PRIORITY_BANDS_DEFAULT
    return core, peer.conn.engine, peer.bands


def _frames_at_b(h: MeshHarness) -> list[tuple[str, bool]]:
    """(data link name, first frame of a delivery?) of every transfer B reads from A."""
    seen: list[tuple[str, bool]] = []

    def observe(events: list[object]) -> None:
        for event in events:
            if isinstance(event, TransferReceived):
                ctx = event.link.context
                if isinstance(ctx, InLink) and ctx.peer == "A":
                    seen.append((event.link.name, event.first))

    h.tap("B", observe)
    return seen


def _holds(out: OutLink) -> bool:
    return out.held is not None


def _idle(out: OutLink) -> bool:
    return out.streaming is None


def _blocked(state: ConnState) -> bool:
    return state.output_blocked


def _message(body: Any, priority: int) -> Message:
    return Message.value(body, header=Header(priority=priority))


def _producer_conn_bytes(core: RouterCore) -> int:
    """Bytes A holds for its client connections (the producer's byte bound)."""
    return sum(state.held_frame_bytes for state in core.connections.values() if state.role == "normal")


def test_a_higher_band_overtakes_a_low_band_stream_held_at_a_blocked_output() -> None:
    h = _line()
    producer, consumer, tx, rx = _clients(h)
    core, engine, bands = _to_b(h)
    at_b = _frames_at_b(h)
    big = encode_message(_message(BODY, 0))
    cut = len(big) // 4
    bulk_id = tx["bulk"].send_transfer(b"big", big[:cut], more=True)
    h.pump()
    assert bands[0].streaming is not None and not _holds(bands[0])
    core.set_output_blocked(engine, True, h.now)  # (as the network layer: past the high-water mark)
    tx["bulk"].send_transfer(b"big", big[cut:])  # the rest of it, while the output is blocked
    h.pump()
    held = bands[0].held
    assert held is not None and sum(map(len, held)) == bands[0].held_bytes > 0
    assert _producer_conn_bytes(core) == bands[0].held_bytes  # counted against the producer's bound
    urgent_id = producer.send(tx["urgent"], _message("urgent", 9))
    h.pump()
    assert not consumer.bodies(rx["urgent"])  # it waits too: nothing new goes to a blocked output
    before = len(at_b)
    core.set_output_blocked(engine, False, h.now)  # drained below half the mark
    h.pump()
    after = at_b[before:]
    assert after[0] == (f"A>B/data.{TOP}", True)  # the urgent one first, then the rest of the stream
    assert {name for name, _ in after[1:]} == {"A>B/data.0"} and not any(first for _, first in after[1:])
    assert consumer.bodies(rx["urgent"]) == ["urgent"] and consumer.bodies(rx["bulk"]) == [BODY]
    assert isinstance(producer.outcomes[bulk_id], Accepted) and isinstance(producer.outcomes[urgent_id], Accepted)
    assert not _holds(bands[0]) and _idle(bands[0]) and _producer_conn_bytes(core) == 0


def test_held_frames_go_out_half_the_high_water_mark_at_a_time_in_order() -> None:
    h = _line()
    producer, consumer, tx, rx = _clients(h)
    core, engine, bands = _to_b(h)
    state = core.connections[engine]
    big = encode_message(_message(BODY, 0))
    bulk_id = tx["bulk"].send_transfer(b"big", big[:1000], more=True)
    h.pump()
    core.set_output_blocked(engine, True, h.now)
    tx["bulk"].send_transfer(b"big", big[1000:])
    h.pump()
    held_before = bands[0].held_bytes
    budget = state.listener.write_high_water // 2
    assert held_before > 2 * budget
    core.set_output_blocked(engine, False, h.now)
    written = held_before - bands[0].held_bytes
    assert budget <= written < budget + 65536  # at most one frame past half the mark
    # the rest waits for the output to drain again: the connection counts as blocked meanwhile
    assert _blocked(state) and engine in core.held_output
    h.pump()  # (the harness's wire takes everything at once: it releases until nothing is held)
    assert consumer.bodies(rx["bulk"]) == [BODY]
    assert isinstance(producer.outcomes[bulk_id], Accepted)
    assert not _blocked(state) and not core.held_output and _producer_conn_bytes(core) == 0


def test_a_large_message_that_waited_is_not_written_all_at_once() -> None:
    h = _line()
    producer, consumer, tx, rx = _clients(h)
    core, engine, bands = _to_b(h)
    state = core.connections[engine]
    core.set_output_blocked(engine, True, h.now)
    bulk_id = producer.send(tx["bulk"], _message(BODY, 0))  # all of it waits at A
    urgent_id = producer.send(tx["urgent"], _message("urgent", 9))
    h.pump()
    assert bands[0].pending and not consumer.bodies(rx["bulk"])
    at_b = _frames_at_b(h)
    core.set_output_blocked(engine, False, h.now)
    assert _holds(bands[0]) and state.output_blocked  # a part went, the rest is held
    h.pump()
    assert at_b[0] == (f"A>B/data.{TOP}", True)
    assert consumer.bodies(rx["bulk"]) == [BODY] and consumer.bodies(rx["urgent"]) == ["urgent"]
    assert isinstance(producer.outcomes[bulk_id], Accepted) and isinstance(producer.outcomes[urgent_id], Accepted)


def test_presettled_and_multicast_streams_held_complete() -> None:
    h = _line()
    for core in h.cores.values():
        core.table.add_rule(_multicast_rule())
    producer, consumer = h.client("A", "p"), h.client("C", "c")
    rx = consumer.receiver("mc/news")
    h.advance(0.5)
    rx.flow(10)
    tx = producer.sender("mc/news")
    h.pump()
    core, engine, bands = _to_b(h)
    big = encode_message(_message(BODY, 0))
    tx.send_transfer(b"mc", big[:1000], more=True, settled=True)
    h.pump()
    core.set_output_blocked(engine, True, h.now)
    tx.send_transfer(b"mc", big[1000:], settled=True)
    h.pump()
    assert _holds(bands[0])
    core.set_output_blocked(engine, False, h.now)
    h.pump()
    assert consumer.bodies(rx) == [BODY]
    assert not _holds(bands[0]) and _idle(bands[0]) and _producer_conn_bytes(core) == 0


def _multicast_rule() -> Any:
    from router.config.models import AddressConfig

    return AddressConfig(prefix="mc", distribution="multicast")


def test_a_neighbour_lost_while_frames_are_held_loses_no_delivery() -> None:
    h = _line()
    producer, consumer, tx, rx = _clients(h)
    core, engine, bands = _to_b(h)
    big = encode_message(_message(BODY, 0))
    bulk_id = tx["bulk"].send_transfer(b"big", big[:1000], more=True)
    h.pump()
    core.set_output_blocked(engine, True, h.now)
    tx["bulk"].send_transfer(b"big", big[1000:])
    urgent_id = producer.send(tx["urgent"], _message("urgent", 9))
    h.pump()
    assert _holds(bands[0])
    h.cut(h.wire_between("A", "B"))
    # the stream was partly sent: modified; the urgent one never left A: released
    assert isinstance(producer.outcomes[bulk_id], Modified) and bulk_id in producer.settled
    assert isinstance(producer.outcomes[urgent_id], Released) and urgent_id in producer.settled
    assert not _holds(bands[0]) and _producer_conn_bytes(core) == 0 and core.bounds.buffered_total == 0
    assert not core.held_output and all(out.streaming is None and not out.outstanding for out in bands)


def _held_stream(h: MeshHarness, tx: Any, core: RouterCore, engine: Connection, bands: list[OutLink]) -> bytes:
    """A large low-band message whose first 200 kB were sent while A's output to B was blocked:
    A's lowest band link holds its frames. The whole message (its rest not sent yet)."""
    big = encode_message(_message(BODY, 0))
    tx.send_transfer(b"big", big[:1000], more=True)
    h.pump()
    core.set_output_blocked(engine, True, h.now)
    tx.send_transfer(b"big", big[1000:200_000], more=True)
    h.pump()
    assert _holds(bands[0])
    return big


def test_a_producer_aborting_a_held_stream_uncounts_its_bytes() -> None:
    h = _line()
    producer, consumer, tx, rx = _clients(h)
    core, engine, bands = _to_b(h)
    _held_stream(h, tx["bulk"], core, engine, bands)
    tx["bulk"].abort()
    h.pump()
    assert not _holds(bands[0]) and _idle(bands[0]) and _producer_conn_bytes(core) == 0
    core.set_output_blocked(engine, False, h.now)
    urgent_id = producer.send(tx["urgent"], _message("urgent", 9))
    bulk_id = producer.send(tx["bulk"], _message(b"small", 0))
    h.pump()
    assert consumer.bodies(rx["bulk"]) == [b"small"] and consumer.bodies(rx["urgent"]) == ["urgent"]
    assert isinstance(producer.outcomes[bulk_id], Accepted) and isinstance(producer.outcomes[urgent_id], Accepted)


class _EndsFailed(MeshHarness):
    """Ends a connection its core failed on, as the network layer does."""

    def handle(self, wire: Any, core: RouterCore, engine: Connection, events: list[Any]) -> None:
        try:
            super().handle(wire, core, engine, events)
        except InjectedFault:
            self.drop(wire, engine)


@needs_patchable_core
def test_a_stream_held_when_its_producer_fails_in_the_core_is_aborted_and_nothing_held_follows() -> None:
    # The core fails on the producer's next frame (a bug a hostile peer could reach): its
    # connection ends and its release aborts the delivery on A's band link to B. What that link
    # still held for it must go too: a frame written after the abort would reach B as a transfer
    # of no delivery (a protocol violation that would cost B the whole connection).
    h = _line(_EndsFailed)
    producer, consumer, tx, rx = _clients(h)
    core, engine, bands = _to_b(h)
    big = _held_stream(h, tx["bulk"], core, engine, bands)
    fault = Fault(core, core.forwarder, "on_transfer")
    fault.doomed = next(state.engine for state in core.connections.values() if state.peer is None and state.in_links)
    tx["bulk"].send_transfer(b"big", big[200_000:300_000], more=True)
    h.pump()
    assert fault.fired
    assert not _holds(bands[0]) and _producer_conn_bytes(core) == 0
    core.set_output_blocked(engine, False, h.now)
    h.pump()
    assert "B" in core.mesh.peers and engine in core.connections  # A and B still connected
    again = h.client("A", "p2")
    urgent = again.sender("urgent")
    h.pump()
    urgent_id = again.send(urgent, _message("urgent", 9))
    h.pump()
    assert consumer.bodies(rx["urgent"]) == ["urgent"] and consumer.bodies(rx["bulk"]) == []
    assert isinstance(again.outcomes[urgent_id], Accepted)
