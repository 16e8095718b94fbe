"""Multicast: a copy of a delivery for each consumer, local and per next hop.

Owns: making the copies of a multicast delivery (one per local consumer whose filters pass it
and whose max-message-size it fits, and one per next hop towards other routers with consumers, where their own
routers filter; the first that cannot go now waits or is failed), sending a copy, and a copy that failed (its outcome combined into the delivery's:
settlement.py).
A layer of the forwarder (see forwarding.py).
Must not touch: anycast choices (sending.py), waiting queues (waiting.py), reading frames.
"""

from __future__ import annotations

from typing import Any

from ..amqp.messaging import ACCEPTED, RELEASED
from . import filtering, remote, sizelimits
from .delivery import Copy, Forward, copies_out, maps_of
from .fifo import Fifo
from .links import OutLink
from .holding import Holding
from .sending import write_frames


class Multicast(Holding):
    """See the module docstring."""

    def _multicast(self, fwd: Forward) -> None:
        entry = fwd.entry
        # The consumers to copy to. Never changed in place: most often it is the entry's own
        # list (the loop below changes no entry's consumers), where a copy per delivery cost
        # ~130 instructions; the rarer additions make new lists.
        targets: list[OutLink]
        mesh = self.mesh
        meta = fwd.meta
        oversize = False  # a consumer here passed over for its max-message-size
        if meta is None or remote.local_ok(mesh, meta):
            targets = entry.consumers
            filtered = entry.filtered
            limited = entry.limited
            if entry.key[0] == "T":  # _topo/0/all/x: this router's consumers of x too
                alias = self.table.entries.get("L" + entry.key[1:])
                if alias is not None:
                    targets = targets + alias.consumers
                    filtered += alias.filtered
                    limited += alias.limited
            if filtered:
                targets = filtering.matching(fwd, targets)
            if limited:  # not to a consumer whose max-message-size it passes (sizelimits.py)
                fitting = sizelimits.within(fwd, targets)
                oversize = len(fitting) < len(targets)
                targets = fitting
            if meta is not None and meta.came_from is not None:  # never back where it came from
                targets = [out for out in targets if out.neighbour != meta.came_from]
            fwd.fields = None  # read at most once: the copies are chosen
        else:
            targets = []
            if not entry.has_remote:
                mesh.dropped_invalid_origin += 1
        if entry.has_remote and (meta is not None or fwd.view is not None):
            targets = targets + remote.multicast(mesh, fwd)
        if not targets:
            # Too large for every consumer: its producer hears so (rejected), if it is this
            # router's client's. From another router it is released: that router combines its
            # copies' outcomes, where a rejected would outweigh the other copies' accepted.
            if oversize and (meta is None or meta.came_from is None):
                self.too_large(fwd)
            else:
                self.unroutable(fwd)
            return
        # A Copy only for a copy that has something left to wait for: credit, the rest of its
        # frames, or its consumer's outcome. One settled as it is written, of a delivery that has
        # all its frames, is finished then (presettled: the common multicast) and leaves no record.
        copies: list[Copy] = []
        fwd.copies = copies
        fwd.remaining = len(targets)  # (every target, so that no outcome combines before the last)
        for out in targets:
            ready = out.can_take()
            if ready and fwd.complete and self._presettled_out(fwd, out):
                self._send_copy(fwd, out, None)
                continue
            copy = Copy(fwd, out)
            copies.append(copy)
            if ready:
                self._send_copy(fwd, out, copy)
            else:
                if out.pending is None:
                    out.pending = Fifo()
                if len(out.pending) >= out.capacity:  # this consumer is too far behind
                    self._copy_failed(copy)
                else:
                    out.pending.append(copy)
        if fwd.presettled:
            self._presettled_sent(fwd)  # finished unless a copy still waits or streams
        if copies_out(fwd):
            # The bytes are not needed again, nor the routing view (one object less per
            # delivery in flight for the garbage collector to walk).
            fwd.first = fwd.rest = None  # (drop_frames)
            fwd.view = None

    def _send_copy(self, fwd: Forward, out: OutLink, copy: Copy | None) -> None:
        """Send `fwd` on `out` now: as `copy`, or, None, as a copy settled as it is written of a
        delivery with all its frames (nothing to record: a presettled delivery's copy is done,
        an unsettled one's counts as accepted, as _settled_on_send)."""
        link = out.link
        settled = self._presettled_out(fwd, out)
        first = fwd.first
        if first is not None and fwd.rest is None and fwd.meta is None and not out.rewrites:
            # One frame, as it came (sending._send's way: no list of frames per copy)
            out_id = link.send_transfer(None, first, settled=settled, more=not fwd.complete,
                                        message_format=fwd.message_format)  # fmt: skip
            sent_frames = 1
        else:
            frames = fwd.all_frames() or []
            if frames and (fwd.meta is not None or out.rewrites):
                frames = self._egress(fwd, out, frames)
            out_id = write_frames(fwd, link, frames, settled)
            sent_frames = len(frames)
        if out.neighbour is None:
            fwd.entry.deliveries_egress += 1
        else:
            fwd.entry.deliveries_transit += 1
        out.delivered += 1
        if self.flow_on:
            self.flow_copy_sent(fwd, out, self.now)
        if link.credit == 0 and out.zero_credit_since is None:
            out.zero_credit_since = self.now
        conn = out.conn
        conn.last_delivery = self.now
        self.touched.touch_conn(conn)  # (the copies alternate between connections)
        if copy is None:
            out.presettled += 1
            if not fwd.presettled:
                self.combine_outcome(fwd, ACCEPTED)
            return
        copy.out_id = out_id
        copy.sent_frames = sent_frames
        if self.flow_on:
            copy.sent_at = self.now
        if not settled:
            maps_of(link.session).outbound.put(out_id, copy)
            out.outstanding += 1
            conn.unsettled_out += 1
            if out.outstanding >= out.unsettled_limit or conn.unsettled_out >= conn.unsettled_limit:
                self.bounds.reached(out)
        else:
            out.presettled += 1
        if not fwd.complete:
            out.streaming = copy
        elif fwd.presettled:
            copy.done = True
            self._presettled_sent(fwd)
        elif settled:
            self._settled_on_send(copy)

    def _copy_failed(self, copy: Copy, state: Any = None) -> None:
        if copy.forward.presettled:
            copy.done = True
            copy.forward.entry.dropped += 1
            self._presettled_sent(copy.forward)
        else:
            self._copy_outcome(copy, state if state is not None else RELEASED)
