"""Frames held in the router while a connection's output is blocked: a slow consumer never makes
the router buffer a large message whole, and on an inter-router connection a higher priority
band's delivery is written before them (docs/mesh.md, "Priorities").

Cut-through streaming writes each frame of a delivery as it arrives, and credit bounds
deliveries, not the frames of one: a consumer that reads slowly (or not at all) would otherwise
have the rest of a message of any size queued for it. And what is written is written: bytes
already queued below the router (the connection's output, the kernel's socket buffers) go out
first, in order. So:
- while a connection's output is blocked, the frames of the deliveries streaming on its links
  are held here (`hold`), in order, counted against the producer connection's byte bound
  (bounds.py: past it that connection is no longer read, as the anchors' Q2 stops reading a
  producer whose message buffers too much); new deliveries wait as on any blocked connection
  (bounded by credit);
- a delivery of several frames sent on a band link at once (it waited for credit) writes at most
  half the write high-water mark and holds the rest (`send_frames`);
- when the output drains (`release`), band links are served highest first, then the other
  links: each one's held frames, then the deliveries waiting for it, within half the
  high-water mark; what does not fit stays held and the connection counts as blocked again
  (the network layer asks the driver to call back when that drains: `held_output`).
- a data link to another router whose session window that router shut (bandwindow.py) holds
  the frames streaming on it the same way, and takes no delivery, until it opens
  (`window_changed`), whatever its connection's output says;
- a consumer's link whose held frames wait with none written for its connection's
  `stalled_stream_timeout_s` is named by `stalled` (the core detaches it: attach.py), since it
  would pin them, and its producer connection's byte bound, for as long as it takes nothing.
A delivery's completion (its outcome relay for presettled ones, the link taking the next one)
follows its last frame's writing: a link's frames are never reordered, nothing held is written
after the delivery was aborted or its link or connection went away (`drop_held`: the bytes are
uncounted, the outcome is the caller's, as for any delivery in flight).
A layer of the forwarder (see forwarding.py).
Must not touch: choosing links (sending.py, remote.py), reading frames (forwarding.py, streaming.py).
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING

from ..amqp.connection import Connection
from .bandwindow import count_held
from .delivery import Copy, Forward, Payload
from .links import OutLink, alive, stall_limit
from .sending import Sending

if TYPE_CHECKING:
    from ..amqp.session import Session
    from .bounds import Bounds
    from .connections import ConnState
    from .mesh import Mesh
    from .table import AddressTable
    from .touched import Touched


class Holding(Sending):
    """See the module docstring."""

    def __init__(self, table: AddressTable, bounds: Bounds, mesh: Mesh, touched: Touched, router_id: str) -> None:
        super().__init__(table, bounds, mesh, touched, router_id)
        # Connections whose band links hold frames while the network layer does not know their
        # output is blocked: it asks their drivers to call back when the output drains
        # (router.net.corepump), or releases more at once when everything is written.
        self.held_output: set[Connection] = set()
        # The links holding frames (holding.stalled looks at them; empty but for blocked streams).
        self.held_links: set[OutLink] = set()

    def _stream_done(self, out: OutLink, record: Forward | Copy) -> None:
        """The last frame of `record` is written on `out` (streaming.py)."""
        raise NotImplementedError

    # --- holding --------------------------------------------------------------------------------

    def hold(self, out: OutLink, payload: Payload, fwd: Forward, last: bool) -> None:
        """Keep a frame of the delivery streaming on band link `out` (`last`: it ends it)."""
        held = out.held
        if held is None:
            held = out.held = deque()
            session = fwd.in_session
            out.held_by = session.conn.context if session is not None else None
            out.held_in = session
            out.held_since = self.now
            self.held_links.add(out)
        data = payload if type(payload) is bytes else bytes(payload)  # (no read stays pinned)
        held.append(data)
        out.held_last = last
        self._count_held(out, len(data))

    def _count_held(self, out: OutLink, nbytes: int) -> None:
        """`out` holds `nbytes` more (fewer, if negative): counted on the link, against its
        producer connection (bounds.read_paused reads it) and the session they came on (a
        neighbour's band or streaming link: bandwindow.py), always together."""
        out.held_bytes += nbytes
        by = out.held_by
        if by is not None:
            by.held_frame_bytes += nbytes
            count_held(out.held_in, nbytes, self.touched)

    def _forget_held(self, out: OutLink) -> None:
        """`out` holds nothing any more (its count is 0)."""
        out.held = out.held_by = out.held_in = None
        out.held_last = False
        self.held_links.discard(out)

    def send_frames(self, out: OutLink, fwd: Forward, frames: list[Payload], settled: bool) -> int:
        """Send a delivery of several frames on band link `out`: at most half the write
        high-water mark now (its first frame always), the rest held. Its delivery-id."""
        conn = out.conn
        budget = conn.listener.write_high_water // 2
        link = out.link
        last = len(frames) - 1
        out_id = -1
        for i, frame in enumerate(frames):
            if i and budget <= 0:
                self.hold(out, frame, fwd, i == last and fwd.complete)
                continue
            budget -= len(frame)
            out_id = link.send_transfer(None, frame, settled=settled,
                                        more=i < last or not fwd.complete, message_format=fwd.message_format)  # fmt: skip
        if out.held is not None:
            self._blocked_by_held(conn)
        return out_id

    def _blocked_by_held(self, conn: ConnState) -> None:
        """`conn`'s links hold frames: it counts as blocked until its output drains."""
        conn.output_blocked = True
        self.held_output.add(conn.engine)

    def drop_held(self, out: OutLink) -> None:
        """Forget the frames `out` holds (their delivery was aborted or will never be sent on)."""
        if out.held is None:
            return
        self._count_held(out, -out.held_bytes)
        self._forget_held(out)

    def stalled(self, now: float) -> list[OutLink]:
        """Consumers' links whose held frames have waited, none written, for their connection's
        `stalled_stream_timeout_s` (never links to other routers): they pin the frames, and the
        byte bound of the stream's producer connection, for as long as they take nothing."""
        return [out for out in self.held_links if self._stall_limit(out) <= now]

    def stall_deadline(self) -> float | None:
        """When the first of the links holding frames would count as stalled."""
        limits = [self._stall_limit(out) for out in self.held_links]
        return min(limits) if limits else None

    @staticmethod
    def _stall_limit(out: OutLink) -> float:
        return math.inf if out.neighbour is not None else stall_limit(out.held_since, out.conn)

    # --- releasing ------------------------------------------------------------------------------

    def release(self, conn: ConnState, now: float) -> None:
        """`conn`'s output drained (it is no longer blocked): its band links, highest band first,
        write what they hold (and the streaming links whose delivery is of that band what they
        hold) and take waiting deliveries; then its other links, each writing what it holds
        first; all within half the write high-water mark. Stops, blocked again, where the
        budget ends."""
        budget = conn.listener.write_high_water // 2
        self.now = now
        peer = conn.peer
        bands: list[OutLink] | None = peer.bands if peer is not None else None
        if bands is not None:
            streams: list[OutLink] = peer.streams
            for out in reversed(bands):
                for link in [out, *(s for s in streams if s.stream_band == out.band)] if streams else (out,):
                    if link.held is not None and not link.window_shut:  # (shut: window_changed)
                        budget = self._release_link(link, budget)
                        if link.held is not None:  # no room left: lower bands wait for the next drain
                            self._blocked_by_held(conn)
                            return
                if out.window_shut:
                    continue
                self.consumer_ready(out, now)
                if conn.output_blocked:  # (it sent a delivery of several frames and holds some)
                    return
        for out in list(conn.out_links):
            if out.band < 0 and not out.window_shut:
                if out.held is not None:
                    budget = self._release_link(out, budget)
                    if out.held is not None:  # the rest waits for the next drain
                        self._blocked_by_held(conn)
                        return
                self.consumer_ready(out, now)
        routed = conn.routed_if_any
        if routed:  # link-routed links hold what arrived for them while blocked (linkrelay.py)
            for routed_link in list(routed):  # (not `link`: compiled, that name is an OutLink above)
                self.relay.output_drained(routed_link)

    def window_changed(self, session: Session, now: float) -> None:
        """A neighbour shut or opened its incoming window on the session of one of our data
        links (bandwindow.py): the link takes deliveries and writes what it holds only while
        it is open; opened, what it held goes first, within half the write high-water mark."""
        shut = session.remote_incoming_window <= 0
        self.now = now
        for link in session.links:
            out = link.context
            if type(out) is not OutLink or out.neighbour is None or out.window_shut == shut:
                continue
            out.window_shut = shut
            conn = out.conn
            if shut or conn.output_blocked:
                continue  # (the output's drain releases it: release)
            if out.held is not None:
                self._release_link(out, conn.listener.write_high_water // 2)
                if out.held is not None:
                    self._blocked_by_held(conn)
                    continue
            self.consumer_ready(out, now)

    def _release_link(self, out: OutLink, budget: int) -> int:
        """Write `out`'s held frames while `budget` lasts; what is left of it."""
        held = out.held
        record = out.streaming
        assert held is not None and record is not None
        fwd = record.forward if type(record) is Copy else record
        assert isinstance(fwd, Forward)
        link = out.link
        if not alive(link):  # going away: nothing more can be written (its end fails the delivery)
            self.drop_held(out)
            return budget
        settled = self._presettled_out(fwd, out)
        if budget > 0:
            out.held_since = self.now  # (frames go out: it is not stalled)
        while held and budget > 0:
            frame = held.popleft()
            size = len(frame)
            budget -= size
            self._count_held(out, -size)
            link.send_transfer(b"", frame, settled=settled, more=bool(held) or not out.held_last,
                               message_format=fwd.message_format)  # fmt: skip
        self.touched.touch(out.conn.engine)
        if not held:
            ends = out.held_last
            self._forget_held(out)
            if ends:
                self._stream_done(out, record)
        return budget
