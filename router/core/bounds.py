"""Resource bounds of the routing core: unsettled deliveries per consumer, message bytes held for
producers, and credit sized by bytes.

Owns:
- the unsettled bound: a consumer link holding `max_unsettled_per_link` unsettled deliveries (or
  whose connection holds `max_unsettled_per_connection`) is *stuck*: the forwarder sends it
  nothing more (other consumers of the address get the traffic; with none, deliveries wait,
  bounded by the producers' credit) until it settles enough to fall below 7/8 of the bound;
- the byte accounting of deliveries waiting for credit (per connection and router-wide; frames
  held for deliveries streaming to a blocked output count too, for pausing reads only:
  ConnState.held_frame_bytes, kept by holding.py and linkrelay.py), the
  hard bounds at which a delivery that would have to wait is released instead (the connection's
  `read_high_water_bytes`, the router's `buffered_budget_bytes`), and which connections the
  network layer should stop reading (router-wide, once less than 1/32 of the budget is left,
  when reading more would only bring deliveries to release: the client connections holding at
  least the average, never one holding nothing, never a connection between routers: their
  control traffic must flow);
- credit by bytes: a producer link's observed message size (a decaying maximum; until a first
  delivery is complete, the largest single-frame message, our max-frame-size) turns its credit
  window into `min(link_capacity, room // size)`, never less than 1 while the router has room,
  where room is the link's part of its connection's bound and the connection's part of the
  router's budget (and of what is left of it: when the budget is nearly full, producers of small
  messages too get windows by bytes, and a producer may get none until room comes free). A producer
  that respects credit then never sends more than the router will hold, so the router keeps
  reading it (its close is never stuck behind data the router will not read, transport §2.4.3);
  what a first window of multi-frame messages brings beyond the bounds is released.
Counters for management: links stuck now, times a link reached the bound, deliveries released
at a byte bound.
Collaborators (given by RouterCore): the buffered budget, the core's connections (read only), and
the forwarder as a ports.Credit (producers' credit, consumers ready again).
Must not touch: choosing destinations (sending.py, multicast.py), outcomes (settlement.py), the engines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .links import UNKNOWN

if TYPE_CHECKING:
    from ..amqp.connection import Connection
    from .connections import ConnState
    from .delivery import Forward
    from .links import InLink, OutLink
    from .ports import Credit


def resume_below(limit: int) -> int:
    """A stuck link or connection takes deliveries again below this many unsettled: a margin, so
    that a consumer at its bound gets batches rather than one delivery per settlement. Never
    below 1: at a bound of 1 the margin would otherwise be 0, and no count is below 0 (the link
    stayed stuck after its first delivery for good)."""
    return max(1, limit - max(1, limit // 8))


class Bounds:
    # The forwarder, set by RouterCore once built (it is built with these bounds).
    credit: Credit

    def __init__(self, budget_bytes: int, connections: dict[Connection, ConnState]) -> None:
        """`connections`: the core's open connections (read: how many share the budget)."""
        self.connections = connections
        self.budget = budget_bytes
        # Reads pause past this (credit keeps the router under it: the windows of all connections
        # together fit the budget); deliveries that would pass the budget itself are released.
        self.pause_above = self.budget - self.budget // 32
        self.buffered_total = 0  # bytes of waiting deliveries, all connections
        self.nearly_full = False  # buffered_total > pause_above: every producer's window by bytes
        self.holders = 0  # connections holding some of them
        self.released_over_budget = 0  # deliveries released at a byte bound (management)
        self.stuck_now = 0  # consumer links stuck now
        self.stuck_total = 0  # times a consumer link (or connection) reached its unsettled bound
        self.resumable: list[OutLink] = []  # links that fell below their bound (flush sends to them)
        self.starved: set[InLink] = set()  # producers given less credit for a full budget
        self._freed = 0  # bytes freed since the starved producers were last looked at

    # --- unsettled deliveries per consumer --------------------------------------------------------

    def reached(self, out: OutLink) -> None:
        """`out` (or its connection) has as many unsettled deliveries as it may: stop sending to it."""
        conn = out.conn
        if out.outstanding >= out.unsettled_limit:
            self._stick(out)
        if conn.unsettled_out >= conn.unsettled_limit:
            if conn.stuck:  # a link attached since the connection got stuck
                self._stick(out, counted=False)
                return
            conn.stuck = True
            self.stuck_total += 1
            for link in conn.out_links:
                if link.neighbour is None:
                    self._stick(link, counted=False)

    def _stick(self, out: OutLink, counted: bool = True) -> None:
        if not out.stuck:
            out.stuck = True
            self.stuck_now += 1
            if counted:
                out.stuck_count += 1
                self.stuck_total += 1

    def settled(self, out: OutLink) -> None:
        """A stuck `out` has one unsettled delivery less: it may take deliveries again once below
        the margin (and its connection too). Sending waits for the next flush: this runs inside
        the walk of a disposition's range."""
        conn = out.conn
        if conn.stuck:
            if conn.unsettled_out >= resume_below(conn.unsettled_limit):
                return
            conn.stuck = False
            for link in conn.out_links:
                if link.stuck and link.outstanding < resume_below(link.unsettled_limit):
                    self._unstick(link)
        elif out.outstanding < resume_below(out.unsettled_limit):
            self._unstick(out)

    def _unstick(self, out: OutLink) -> None:
        out.stuck = False
        self.stuck_now -= 1
        self.resumable.append(out)

    def gone(self, out: OutLink) -> None:
        """`out` went away (its unsettled deliveries were failed first)."""
        if out.stuck:
            out.stuck = False
            self.stuck_now -= 1

    def resume(self) -> None:
        """Send to the links that fell below their bound (from the forwarder's flush)."""
        resumable, self.resumable = self.resumable, []
        forwarder = self.credit
        for out in resumable:
            if not out.stuck:
                forwarder.consumer_ready(out)

    # --- bytes held for producers -----------------------------------------------------------------

    def hold(self, conn: ConnState, nbytes: int) -> None:
        """`conn`'s waiting deliveries hold `nbytes` more (or fewer, if negative)."""
        before = conn.buffered_bytes
        after = conn.buffered_bytes = before + nbytes
        total = self.buffered_total = self.buffered_total + nbytes
        self.nearly_full = total > self.pause_above
        if before <= 0 < after:
            self.holders += 1
        elif after <= 0 < before:
            self.holders -= 1
        if nbytes < 0 and self.starved:
            # Room came free: look at their credit again, all together once 1/64 of the budget
            # is free (not at every delivery taken: each look is a pass over them all).
            self._freed -= nbytes
            if self._freed >= self.budget >> 6 or total <= 0:
                self._freed = 0
                credit_dirty = self.credit.credit_dirty
                for inl in self.starved:
                    credit_dirty(inl)
                self.starved.clear()

    def over(self, conn: ConnState, extra: int) -> bool:
        """Whether `conn` holding `extra` more bytes would pass its bound or the router's."""
        return (
            conn.buffered_bytes + extra > conn.read_high_water
            or self.buffered_total + extra > self.budget
        )

    def read_paused(self, conn: ConnState) -> bool:
        """Whether the network layer should stop reading `conn` for now."""
        held = conn.buffered_bytes
        if held + conn.held_frame_bytes > conn.held_pause_above:
            # With waiting deliveries alone it cannot happen to a peer that respects credit (a
            # last resort); frames held for a slow consumer's stream bring a client here
            # (holding.py). Between routers the band's window shuts first (bandwindow.py).
            return True
        if held <= 0:
            return False  # a connection holding nothing is never paused
        total = self.buffered_total
        # Nearly full: the client connections holding at least the average pause (there is
        # always one), so the largest holders wait first and small ones keep going.
        return total > self.pause_above and conn.role == "normal" and held * self.holders >= total

    def paused_count(self) -> int:
        """Connections the network layer is told not to read now (management)."""
        return sum(1 for conn in self.connections.values() if self.read_paused(conn))

    # --- credit by bytes ------------------------------------------------------------------------

    def observe(self, inl: InLink, size: int) -> None:
        """A delivery of `size` bytes arrived complete on `inl`: the first and larger sizes count
        at once, smaller ones pull the estimate down by an eighth of the difference each."""
        hint = inl.size_hint
        if size == hint:
            return  # a stream of one size (checked first: the checks below cost ~400 instructions)
        new = size if size >= hint or hint == UNKNOWN else hint - ((hint - size) >> 3)
        self._set_hint(inl, new)

    def growing(self, inl: InLink, arrived: int) -> None:
        """A delivery still arriving on `inl` already has `arrived` bytes."""
        if arrived > inl.size_hint:
            self._set_hint(inl, arrived)

    def _set_hint(self, inl: InLink, new: int) -> None:
        small = small_size(inl)
        if new <= small:
            new = 0  # small messages: the whole window fits, sizes need not be watched
        if new != inl.size_hint:
            inl.size_hint = new
            inl.size_watch = 0 if new else small
            self.credit.credit_dirty(inl)

    def window(self, inl: InLink) -> int:
        """The credit window of a producer link that sends large messages (or whose sizes are
        not known yet). Every connection may fill an equal part of the router's budget: a
        conservative share (idle connections count), so the windows of all producers together
        fit the budget and it is not a race for free room (a producer told released would send
        again at once)."""
        conn = inl.conn
        room = conn.read_high_water
        if inl.size_hint > 0:  # large messages: the connection's bound is shared by its links
            size = inl.size_hint
            room //= max(1, len(conn.in_links))
            # and no more in flight than keeps the path busy, but room for two messages: the
            # next may follow a large one before its outcome (as a window of one would not let it)
            target = conn.producer_window if conn.producer_window >= 2 * size else 2 * size
            if target < room:
                room = target
        elif inl.size_hint == 0:  # small messages (a budget nearly full): at most this size
            size = max(1, small_size(inl))
        else:  # not known yet: single-frame messages, the whole bound (each of a client's first
            size = conn.listener.max_frame_size  # links starts with its full window, as the anchors)
        share = self.budget // max(1, len(self.connections))
        if share < room:
            room = share
        window = max(1, min(inl.capacity, room // size))
        # The budget is full with others' bytes (connections that took more before this many
        # connections shared it): no more credit than its part of the room left, even none, or
        # deliveries would only be read to be released. Room coming free gives it credit again
        # (hold).
        connections = max(1, len(self.connections))
        free = (self.budget - self.buffered_total) // connections + conn.buffered_bytes
        if free < window * size:
            window = free // size
            if window <= 0 and self.buffered_total + size <= self.pause_above:
                window = 1  # a router with room never leaves a producer without any credit
            self.starved.add(inl)
        return window

    def release_waiting(self, fwd: Forward) -> bool:
        """Whether `fwd`, about to wait for credit, must be released instead: holding it would
        pass its connection's bound or the router's."""
        session = fwd.in_session
        if session is None:
            return False
        conn = session.conn.context
        if conn is None or not self.over(conn, fwd.size):
            return False
        self.released_over_budget += 1
        return True


def small_size(inl: InLink) -> int:
    """Message sizes at which a full window of `link_capacity` fits a quarter of the connection's
    bound: below it, credit does not depend on size."""
    return inl.conn.read_high_water // (4 * inl.capacity)
