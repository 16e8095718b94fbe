"""Relaying a routed link pair: what one link of a link-routed pair receives goes out on the other.

A link route pairs the link a client attached with a link the router attaches towards the route
container (router.core.linkroute): the pair is a RoutedLink on each side, each naming the other
as `peer`. After the attach no routing decision is made again: transfers are written to the peer
link as they arrive (the payload is never decoded), credit travels end to end (the receiver's
link-credit and drain go to the sender's side as they change), dispositions and settlement go
back along the deliveries they name, and a detach on one side detaches the other.

Between routers the routed links are in sessions of their own on each connection (one a pair,
up to linkpairs.routed_sessions(): `between_routers`): what waits here for a slow reader counts
against that session, whose window shuts as a band's does (bandwindow.py), and a shut window
towards the next router holds what follows here (`_blocked`), so a stalled routed stream never
pauses the connection between them.
Owns (the records are routedlink.py's): relaying transfers, flow (credit, drain, available)
and dispositions, holding what cannot be written yet and the stall watch over it, and
giving every delivery still unsettled when a pair breaks an outcome its sender can act on
(transport §2.6.12: a delivery the router holds because credit shrank is released; one that went
on towards the container is modified, delivery-failed: it may or may not have arrived).
Must not touch: attach matching (router.core.linkroute) and the pair's life cycle
(router.core.linkpairs), other links.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ..amqp import errors as E
from ..amqp.endpoints import ACTIVE
from ..amqp.errors import LocalUsageError
from ..amqp.events import DispositionReceived, FlowReceived, TransferReceived
from ..amqp.link import Link
from ..amqp.messaging import RELEASED, Modified
from ..amqp.performatives import RCV_FIRST, Error
from ..amqp.serial import serial_ids_in
from .bandwindow import count_held, data_session
from .delivery import maps_of
from .links import alive, stall_limit
from .routedlink import RoutedDelivery, RoutedLink, RoutedMaps, routed_maps

__all__ = ["Relay", "RoutedDelivery", "RoutedLink", "RoutedMaps", "between_routers", "routed_maps"]

if TYPE_CHECKING:
    from ..amqp.session import Session
    from .connections import ConnState
    from .touched import Touched

FAILED: Final = Modified(delivery_failed=True)


class Relay:
    """The per-message half of link routing; see the module docstring."""

    # LinkPairs.fail_pair, set by LinkRoutes: a pair that cannot go on (what one side sent
    # cannot be written to the other) is detached on both sides with the error.
    fail_pair: Callable[[RoutedLink, Error], None]

    def __init__(self, touched: Touched) -> None:
        self.touched = touched
        self.held_links: set[RoutedLink] = set()  # links that held transfers (the stall watch's)
        # A graceful stop began (RouterCore.quiesce): senders towards the router get no more credit.
        self.quiescing = False

    # --- transfers ----------------------------------------------------------------------------------

    def on_transfer(self, event: TransferReceived, now: float) -> None:
        src: RoutedLink = event.link.context
        dst = src.peer
        if dst is None or dst.gone:
            return  # the pair is breaking: the detach that follows tells the sender
        if dst.held or (event.first and dst.link.credit <= 0) or _blocked(dst):
            # Held in order: it waits for credit, for what waits before it, or for the output of
            # a consumer that reads slowly (a streaming delivery's frames would otherwise queue
            # there whatever the message's size), or for the next router's window. Counted
            # against the sender's connection: past its read_high_water it is not read
            # (router.core.bounds); from another router, against the session it came on as well,
            # whose window shuts first (bandwindow.py): only the routed links stop, not the
            # connection between the routers.
            payload = event.payload
            data = bytes(payload) if type(payload) is memoryview else payload
            if not dst.held:
                dst.held_since = now
                self.held_links.add(dst)
            dst.held.append((src, event.delivery_id, event.delivery_tag, data, event.settled, event.more,
                             event.message_format, event.state, event.aborted, event.first,
                             own_settle_mode(event)))  # fmt: skip
            src.conn.held_frame_bytes += len(data)
            count_held(src.link.session, len(data), self.touched)
            return
        self._send(src, dst, event.delivery_id, event.delivery_tag, event.payload, event.settled, event.more,
                   event.message_format, event.state, event.aborted, event.first, own_settle_mode(event))  # fmt: skip

    def _send(self, src: RoutedLink, dst: RoutedLink, delivery_id: int, tag: bytes, payload: Any, settled: bool,
              more: bool, message_format: int, state: Any, aborted: bool, first: bool,
              rcv_settle_mode: int | None) -> None:  # fmt: skip
        link = dst.link
        if not alive(link):
            return
        if aborted:
            record = dst.streaming
            dst.streaming = None
            if link.out_delivery >= 0:
                link.abort()
            if record is not None:
                routed_maps(src.link).received.pop(record.src_id, None)
                routed_maps(link).sent.pop(record.dst_id, None)
            self.touched.touch(dst.conn.engine)
            return
        try:
            out_id = link.send_transfer(tag, payload, settled=settled, more=more, message_format=message_format,
                                        state=state, rcv_settle_mode=rcv_settle_mode)  # fmt: skip
        except LocalUsageError as exc:  # e.g. settled on a link whose sender promised snd-settle-mode unsettled
            self.fail_pair(src, Error(condition=E.INVALID_FIELD, description=f"cannot relay this transfer: {exc}"))
            return
        if first:
            dst.delivered += 1
            if not settled:
                record = RoutedDelivery(src, delivery_id, dst, out_id)
                routed_maps(src.link).received[delivery_id] = record
                routed_maps(link).sent[out_id] = record
                if more:
                    dst.streaming = record
        if not more:
            dst.streaming = None
        self.touched.touch(dst.conn.engine)

    def flush_held(self, dst: RoutedLink) -> None:
        """Send what waited for `dst`'s credit or output, as far as the credit goes."""
        held = dst.held
        while held and (not held[0][9] or dst.link.credit > 0) and not _blocked(dst):
            item = held.popleft()
            self._unhold(item)
            dst.written += 1
            self._send(item[0], dst, *item[1:])

    def stalled(self, now: float) -> list[RoutedLink]:
        """Links holding transfers because their connection's output is blocked that wrote none
        of them for that connection's stalled_stream_timeout_s (what waits for credit is not
        stalled: the receiver may take credit back): they pin what they hold, and the sending
        connection's byte bound, for as long as they take nothing (a broker's connection, for
        a link-routed consumer). The core detaches them (linkpairs.detach_stalled)."""
        found = []
        for dst in self._holding():
            if dst.written != dst.written_seen or not _blocked(dst):
                dst.written_seen, dst.held_since = dst.written, now  # moving, or waiting for credit
            elif stall_limit(dst.held_since, dst.conn) <= now:
                found.append(dst)
        return found

    def stall_deadline(self) -> float | None:
        """When the watch must look again at the links holding transfers."""
        limits = [stall_limit(dst.held_since, dst.conn) for dst in self._holding()]
        return min(limits) if limits else None

    def _holding(self) -> list[RoutedLink]:
        """The watched links that still hold transfers (the others leave the watch)."""
        for dst in [dst for dst in self.held_links if not dst.held or dst.gone]:
            self.held_links.discard(dst)
        return list(self.held_links)

    def output_drained(self, dst: RoutedLink) -> None:
        """`dst`'s connection takes bytes again: what waited for its output goes out, and the
        sender's credit follows (as after a flow)."""
        if not dst.held or dst.gone:
            return
        self.flush_held(dst)
        other = dst.peer
        if dst.link.is_sender and other is not None and not other.gone and alive(other.link):
            self.pass_credit(dst)

    # --- flow -------------------------------------------------------------------------------------

    def on_flow(self, event: FlowReceived) -> None:
        ctx: RoutedLink = event.link.context
        other = ctx.peer
        if other is None or other.gone or not other.link.locally_attached or not alive(other.link):
            return  # not paired yet: the pair's set-up reads the credit (linkpairs.py)
        link = event.link
        if link.is_sender:  # the receiver's credit or drain: to the sender's side
            self.flush_held(ctx)
            self.pass_credit(ctx)
        else:  # the sender's view: available, or a drain it completed
            if event.drained:
                self.flush_held(other)
                if other.link.drain and not other.held:
                    other.link.complete_drain()
            elif other.link.available != link.available:
                other.link.set_available(link.available)
        self.touched.touch(other.conn.engine)

    def pass_credit(self, sender_side: RoutedLink) -> None:
        """Give the sending client's side of the pair the credit (and drain) the receiving side gave
        `sender_side` (our sending link), less what waits for it already."""
        receiver = sender_side.peer
        assert receiver is not None
        link = sender_side.link
        credit = max(0, link.credit - sum(1 for h in sender_side.held if h[9]))
        if self.quiescing and not receiver.towards_container:
            credit = 0  # draining: what the senders have sent finishes, nothing new comes in
        if receiver.link.credit != credit or receiver.link.drain != link.drain:
            receiver.link.flow(credit, drain=link.drain)
            self.touched.touch(receiver.conn.engine)

    # --- dispositions -------------------------------------------------------------------------------

    def on_disposition(self, event: DispositionReceived, maps: RoutedMaps) -> None:
        """A disposition of a session that carries routed links: relay what it says of routed deliveries."""
        if event.role:  # the receiver's: deliveries we sent (transport §2.7.6)
            held = maps.sent
            for delivery_id in serial_ids_in(event.first, event.last, held):
                record = held.get(delivery_id)
                if record is None:
                    continue
                if event.settled:
                    del held[delivery_id]
                    if record.src.link.session.context is not None:
                        routed_maps(record.src.link).received.pop(record.src_id, None)
                    record.dst.settled_count += 1
                self._dispose(record.src.link, record.src_id, event.state, event.settled)
        else:  # the sender's: deliveries we received
            held = maps.received
            for delivery_id in serial_ids_in(event.first, event.last, held):
                record = held.get(delivery_id)
                if record is None:
                    continue
                if event.settled:
                    del held[delivery_id]
                    routed_maps(record.dst.link).sent.pop(record.dst_id, None)
                self._dispose(record.dst.link, record.dst_id, event.state, event.settled)

    def _dispose(self, link: Link, delivery_id: int, state: Any, settled: bool) -> None:
        if not _session_alive(link):
            return  # that side is gone: its detach or close already told its peer
        link.dispose(delivery_id, state=state, settled=settled)
        self.touched.touch(link.session.conn)

    # --- a pair breaking ----------------------------------------------------------------------------

    def fail_unsettled(self, lost: RoutedLink) -> None:
        """`lost` (one side of a pair) is gone: every delivery its peer sent through it and that is
        not settled gets an outcome for its sender (modified, delivery-failed: it may have arrived),
        every one `lost` sent is forgotten (its peer's link goes too), and what waited for `lost`'s
        credit is released (it never left the router)."""
        other = lost.peer
        for held in (lost.held, other.held if other is not None else ()):
            while held:
                item = held.popleft()
                self._unhold(item)
                src, delivery_id, settled, first = item[0], item[1], item[4], item[9]
                if first and not settled and _session_alive(src.link):
                    self._dispose(src.link, delivery_id, RELEASED, True)
        for side in (lost, other):
            if side is None or side.link.session.context is None:
                continue
            maps = maps_of(side.link.session).routed
            if maps is None:
                continue
            for key, record in list(maps.sent.items()):
                if record.dst is side:
                    del maps.sent[key]
                    src_maps = maps_of(record.src.link.session).routed
                    if src_maps is not None:
                        src_maps.received.pop(record.src_id, None)
                    if _session_alive(record.src.link):
                        self._dispose(record.src.link, record.src_id, FAILED, True)
            for key, record in list(maps.received.items()):
                if record.src is side:
                    del maps.received[key]
                    dst_maps = maps_of(record.dst.link.session).routed
                    if dst_maps is not None:
                        dst_maps.sent.pop(record.dst_id, None)


    def _unhold(self, item: tuple[Any, ...]) -> None:
        """A held transfer leaves the held queue: its bytes no longer count against its sender
        (nor against the session it came on)."""
        src, size = item[0], len(item[3])
        src.conn.held_frame_bytes -= size
        count_held(src.link.session, -size, self.touched)

    def window_changed(self, session: Session) -> None:
        """The next router shut or opened its window on a session of our routed links: opened,
        what they held goes out (and their senders' credit follows)."""
        if session.remote_incoming_window <= 0:
            return
        for link in session.links:
            dst = link.context
            if type(dst) is RoutedLink and link.is_sender:
                self.output_drained(dst)


def between_routers(session: Session, conn: ConnState) -> None:
    """`session` carries routed links to or from another router (both routers' sides of it):
    its window may be shut while too much of what came on it waits here (bandwindow.py), and
    the other router's shutting it is watched (Relay.window_changed)."""
    session.watch_window = True
    data_session(session, conn)


def _blocked(dst: RoutedLink) -> bool:
    """Nothing can be written on `dst` now: its connection's output is blocked, or (towards
    another router) that router shut the session's window."""
    return dst.conn.output_blocked or (dst.conn.peer is not None and dst.link.session.remote_incoming_window <= 0)


def _session_alive(link: Link) -> bool:
    session = link.session
    return session.state.local is ACTIVE and session.conn.state.local is ACTIVE and not session.conn.finished


def own_settle_mode(event: TransferReceived) -> int | None:
    """The transfer's own rcv-settle-mode that counts: first (transport §2.7.5), which a receiver
    may be asked whatever its link's mode (relayed on a link route; the forwarder settles such a
    delivery with its outcome); a second the engine let through only repeats the link's and is
    not relayed, the next link's receiver may have attached first."""
    mode = event.rcv_settle_mode
    return mode if mode is not None and mode == RCV_FIRST else None
