"""Session endpoints (transport §2.5): a session's state, its begin and end, and the links it
carries.

Owns: the session's halves (begin/end, transport §2.5.5, §2.7.2, §2.7.8), its windows and
next-incoming-id/next-outgoing-id (transport §2.5.6: kept here, moved by sessionin.py and
sessionout.py), the link registry (handle tables, handle-max, links by name; the peer's attach
and detach, transport §2.6.2, §2.6.5; a link the peer attaches again is stolen, transport 2.6.1:
_displace), session-scoped delivery-id allocation, and the
application's commands on a session (begin, end, attach a link, disposition).
Collaborators: the Connection (channels, frames out, events), its Links; what arrives in a
transfer, flow or disposition is sessionin.py's (the frame loop calls it with the session), what
goes out and the frames held for the peer's window are sessionout.py's.
Must not touch: bytes on the socket (the connection writes), routing decisions.

Why these seams: the session's state lives as long as the session and changes at begin, end,
attach and detach (here); what each transfer, flow and disposition does with it, coming in and
going out, is per-frame work with checks and ordering rules of its own. Those are functions of
the session in sessionin.py and sessionout.py, which the frame loop and the links call directly:
compiled, each is one C call, as the method was.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Final

from mypy_extensions import i64

from . import errors as E
from .endpoints import ACTIVE, CLOSED, UNINIT, Action, Halves, Input, claim_number
from .events import RemoteAttach, RemoteDetach
from .fastpath import BYTES
from .link import Link
from .performatives import RECEIVER, SENDER, Attach, Begin, Detach, End, Error, Fields, Symbols
from .sessionheld import drop_held
from .sessionout import wire_error, write_disposition

if TYPE_CHECKING:
    from .connection import Connection
    from .messaging import DeliveryState

DEFAULT_WINDOW: Final = 0x7FFFFFFF  # "no session-level limit": link credit is what bounds traffic


class Session:
    __slots__ = (
        "conn", "channel", "remote_channel", "state", "remote_begin", "remote_error",
        "next_outgoing_id", "incoming_window", "incoming_window_size", "outgoing_window",
        "next_incoming_id", "remote_incoming_window", "remote_outgoing_window",
        "handle_max", "remote_handle_max", "links_by_local", "links_by_remote", "links_by_name",
        "_next_delivery_id", "next_incoming_delivery", "blocked", "context",
        "in_handle", "in_link", "_id_high", "_id_prefix", "_in_id_high", "_in_id_prefix",
        "window_shut", "watch_window", "displaced",
    )  # fmt: skip

    def __init__(self, conn: Connection, channel: int | None) -> None:
        # Windows, counters and delivery-ids are native ints (i64): compiled, the arithmetic of
        # every transfer is plain machine operations (uint32 serials, transport §2.5.6).
        self.conn = conn
        self.channel = channel  # our outgoing channel, allocated when we begin
        self.remote_channel: int | None = None
        self.state = Halves("session")
        self.remote_begin: Begin | None = None
        self.remote_error: Error | None = None
        self.next_outgoing_id: i64 = 0
        self.incoming_window_size: i64 = DEFAULT_WINDOW
        self.incoming_window: i64 = DEFAULT_WINDOW
        self.outgoing_window: i64 = DEFAULT_WINDOW
        self.next_incoming_id: i64 = 0
        self.remote_incoming_window: i64 = 0
        self.remote_outgoing_window: i64 = 0
        self.handle_max = 0xFFFFFFFF
        self.remote_handle_max = 0xFFFFFFFF
        self.links_by_local: dict[int, Link] = {}
        self.links_by_remote: dict[int, Link] = {}
        self.links_by_name: dict[tuple[str, bool], Link] = {}
        self._next_delivery_id: i64 = 0
        # The top three bytes of the delivery-ids being sent now (id_bytes), and their value.
        self._id_high: i64 = 0
        self._id_prefix = b"\x00\x00\x00"
        # The same for the peer's delivery-ids, which our dispositions name (in_id_prefix).
        self._in_id_high: i64 = 0
        self._in_id_prefix = b"\x00\x00\x00"
        # the delivery-id the peer's next delivery must have (its session-scoped sequence,
        # transport §2.6); -2 until its first delivery sets where the sequence starts: never
        # equal to a parsed delivery-id (-1 when absent), so that the first delivery always
        # takes sessionin's _check_first_transfer
        self.next_incoming_delivery: i64 = -2
        # Frames that must wait for the peer's incoming window, in order (transport §2.5.6;
        # sessionout.py's); None until the first one (an empty deque is 600 bytes, on every
        # idle session).
        self.blocked: deque[tuple[int, Any, Link | None, int]] | None = None
        self.context: Any = None
        # The link the peer's last transfer came on, by its handle (-1: none): consecutive
        # transfers mostly share a link, and a dict lookup boxes the handle and hashes it
        # (sessionin.on_transfer). Forgotten whenever links_by_remote changes.
        self.in_handle: i64 = -1
        self.in_link: Link | None = None
        # Our incoming window as announced is 0 while the application has shut it (sessionout
        # shut_window): frames the peer sent before it heard so are still taken (incoming_window
        # counts what was granted). A router shuts a priority band's session this way while it
        # holds too much of what came on it (router.core.bandwindow).
        self.window_shut = False
        # Report the peer opening or shutting its incoming window (events.WindowChanged): set by
        # an application that holds frames for it itself (a router's data links to another).
        self.watch_window = False
        # Links whose name a later attach of the peer took (on_attach: stolen, transport 2.6.1,
        # or detached by the peer and not yet by us): out of links_by_name, still the session's
        # (in `links`) until both ends detached; None until the first (most sessions have none).
        self.displaced: dict[Link, None] | None = None

    def __repr__(self) -> str:
        return f"Session(channel={self.channel}, remote={self.remote_channel}, {self.state!r})"

    @property
    def links(self) -> list[Link]:
        links = list(self.links_by_name.values())
        if self.displaced:
            links.extend(self.displaced)
        return links

    @property
    def blocked_frames(self) -> int:
        return len(self.blocked) if self.blocked else 0

    # --- commands ------------------------------------------------------------------------------

    def begin(
        self,
        *,
        incoming_window: int = DEFAULT_WINDOW,
        handle_max: int = 0xFFFFFFFF,
        offered_capabilities: Symbols | None = None,
        desired_capabilities: Symbols | None = None,
        properties: Fields | None = None,
    ) -> None:
        """Send our begin (transport §2.7.2), first or answering the peer's."""
        self.conn.check_not_closed()
        self.state.local_input(Input.OPEN)
        if self.channel is None:
            try:
                self.channel = self.conn.allocate_channel(self)
            except E.LocalUsageError:
                self.state.local = UNINIT  # nothing was announced
                raise
        self.incoming_window_size = self.incoming_window = incoming_window
        self.handle_max = handle_max
        begin = Begin(
            remote_channel=self.remote_channel,
            next_outgoing_id=self.next_outgoing_id,
            incoming_window=incoming_window,
            outgoing_window=self.outgoing_window,
            handle_max=handle_max,
            offered_capabilities=offered_capabilities,
            desired_capabilities=desired_capabilities,
            properties=properties,
        )
        self.conn.write_frame(self.channel, begin)
        if self.displaced:  # links stolen before we could answer them (_displace)
            for link in list(self.displaced):
                if link.state.local is UNINIT and link.state.remote is ACTIVE:
                    link.reject(_stolen(link))

    def end(self, error: Error | None = None) -> None:
        """Send our end (transport §2.7.8). Frames still waiting for window are dropped: the
        application learns their deliveries failed when it handles the session's end."""
        self.conn.check_not_closed()
        action = self.state.local_input(Input.CLOSE)
        if action is Action.SEND_OPEN_THEN_CLOSE:
            self.state.local = UNINIT
            displaced, self.displaced = self.displaced, None  # (the end detaches them all)
            self.begin()
            self.displaced = displaced
            self.state.local = CLOSED
        drop_held(self)
        for link in self.links:
            link.queued_deliveries = 0
            # Nothing may follow our end on this session (transport §2.5.4): its links can send
            # nothing more, whoever ended it (the engine does on a session error, while the
            # application still holds the links), so none keeps credit that invites a send.
            link.credit = 0
        assert self.channel is not None
        self.conn.write_frame(self.channel, End(error=error))
        if self.state.remote is CLOSED or self.conn.failed:
            self.conn.release_session(self)

    def dismantle(self) -> None:
        """The session is over both ways and its application is done with it: its links and
        it let go of each other and of what the application hung on them (`context`), so that
        reference counting frees them at once, not the cyclic collector (Connection.dismantle
        does this for every session of a connection that is over). A link still referred to
        elsewhere (a delivery in flight) reads as it was; the session just has no links."""
        for links in (self.links_by_local, self.links_by_remote, self.links_by_name):
            for link in links.values():
                link.context = None
            links.clear()
        if self.displaced:
            for link in self.displaced:
                link.context = None
            self.displaced = None
        self.in_link = None
        self.context = None
        self.blocked = None

    def attach_sender(self, name: str, **attach: Any) -> Link:
        """Create a sender link and send its attach (arguments as Link.attach)."""
        return self._new_link(name, SENDER, attach)

    def attach_receiver(self, name: str, **attach: Any) -> Link:
        """Create a receiver link and send its attach (arguments as Link.attach)."""
        return self._new_link(name, RECEIVER, attach)

    def _new_link(self, name: str, role: bool, attach: dict[str, Any]) -> Link:
        if self.state.local is not ACTIVE:
            raise E.LocalUsageError("session is not begun")
        if (name, role) in self.links_by_name:
            raise E.LocalUsageError(f"a {('sender', 'receiver')[role]} link named {name!r} exists")
        link = Link(self, name, role)
        self.links_by_name[(name, role)] = link
        link.attach(**attach)
        return link

    def disposition(
        self, role: bool, first: int, last: int | None = None, *, state: DeliveryState | None, settled: bool
    ) -> None:
        """Send a disposition for deliveries first..last (transport §2.7.6) in `role`."""
        write_disposition(self, role, first, last, state, settled)

    # --- used by links -------------------------------------------------------------------------

    def allocate_handle(self, link: Link) -> int:
        return claim_number(self.links_by_local, link, min(self.remote_handle_max, self.handle_max),
                            "link handle", "handle-max")  # fmt: skip

    def free_handle(self, link: Link) -> None:
        if link.local_handle is not None and self.links_by_local.get(link.local_handle) is link:
            del self.links_by_local[link.local_handle]
        link.local_handle = None

    def next_delivery_id(self) -> i64:
        delivery_id = self._next_delivery_id
        # serial_add written out (native ints: a call per delivery cost more than its body)
        self._next_delivery_id = (delivery_id + 1) & 0xFFFFFFFF
        return delivery_id

    def take_back_ids(self, first: int) -> None:
        """The deliveries from delivery-id `first` on were never sent (sessionheld.drop_held:
        the last held, their link detached): the next delivery gets `first`."""
        self._next_delivery_id = first

    def id_bytes(self, delivery_id: i64) -> bytes:
        """`delivery_id` (one of this session's, 0 to 2**32 - 1) as four big-endian bytes."""
        return self.id_prefix(delivery_id) + BYTES[delivery_id & 0xFF]

    def id_prefix(self, delivery_id: i64) -> bytes:
        """The top three of `delivery_id`'s four big-endian bytes, made once per 256 consecutive
        ids, where `int.to_bytes` per delivery boxed the int, converted it and allocated (~500
        instructions when compiled)."""
        high = delivery_id >> 8
        if high != self._id_high:
            self._id_high = high
            self._id_prefix = int(high).to_bytes(3, "big")
        return self._id_prefix

    def in_id_prefix(self, delivery_id: i64) -> bytes:
        """id_prefix for the peer's delivery-ids (the first of our dispositions as receiver,
        fastpath.disposition_frame), kept apart so that the two sequences do not undo each other's."""
        high = delivery_id >> 8
        if high != self._in_id_high:
            self._in_id_high = high
            self._in_id_prefix = int(high).to_bytes(3, "big")
        return self._in_id_prefix

    def link_locally_detached(self, link: Link) -> None:
        # Released once both ends detached. A link we attached and detach before the peer
        # answered stays too: its answer (an attach, then a detach) is to this link, and released
        # here it would come in as a new link the peer attached.
        if link.state.remote is CLOSED:
            self._release_link(link)

    def _release_link(self, link: Link) -> None:
        self.in_handle = -1
        self.in_link = None
        if link.local_handle is not None:
            self.links_by_local.pop(link.local_handle, None)
        if link.remote_handle is not None:
            self.links_by_remote.pop(link.remote_handle, None)
        if self.links_by_name.get((link.name, link.role)) is link:
            del self.links_by_name[(link.name, link.role)]
        elif self.displaced is not None:
            self.displaced.pop(link, None)
            if not self.displaced:
                self.displaced = None

    # --- input from the peer (the connection has checked the channel) ---------------------------

    def on_begin(self, begin: Begin) -> None:
        self.state.remote_input(Input.OPEN, "begin", E.NOT_ALLOWED)
        self.remote_begin = begin
        self.next_incoming_id = begin.next_outgoing_id
        self.remote_incoming_window = begin.incoming_window
        self.remote_outgoing_window = begin.outgoing_window
        self.remote_handle_max = begin.handle_max

    def on_attach(self, attach: Attach) -> None:
        handle = attach.handle
        if handle > self.handle_max:  # transport §2.7.2 handle-max
            raise E.ProtocolError(
                f"attach handle {handle} above handle-max {self.handle_max}", E.FRAMING_ERROR
            )
        if handle in self.links_by_remote:
            raise E.ProtocolError(f"handle {handle} is in use", E.HANDLE_IN_USE, "session")
        role = not attach.role  # ours is the opposite of the peer's
        link = self.links_by_name.get((attach.name, role))
        if link is not None and link.state.remote is not UNINIT:
            # The peer attached this name before: the name is the new link's (transport 2.6.1).
            self._displace(link)
            if self.state.local is CLOSED:  # no handle left to refuse the old one: ended
                return
            link = None
        if link is None:
            link = Link(self, attach.name, role)
            self.links_by_name[(attach.name, role)] = link
        link.state.remote_input(Input.OPEN, "attach", E.NOT_ALLOWED)
        link.remote_handle = handle
        link.remote_attach = attach
        self.links_by_remote[handle] = link
        self.in_handle = -1
        self.in_link = None
        if role is RECEIVER:  # the sender's initial-delivery-count starts our count
            link.delivery_count = attach.initial_delivery_count or 0
        self.conn.emit(RemoteAttach(link=link, attach=attach))

    def _displace(self, link: Link) -> None:
        """A new attach of the peer takes `link`'s name. Transport 2.6.1 ("Naming a Link"): a
        link attached again while it is attached (and not suspended) is stolen: the second attach
        succeeds, the first is closed with amqp:link:stolen. We detach it (answering its attach
        first if we had not: then with null termini, as a refusal); once our session is begun,
        so a link stolen before that is detached by begin(). A link the peer detached already
        (awaiting our detach) is not stolen: it just gives up the name.
        Either way the link stays the session's, and holds its handles, until both ends detached:
        the peer's detach answering ours names the old handle, and a link that waits for it
        counts against the session's handles as any other. It sends nothing more: no credit
        (as Session.end), so that the application sees none that invites a send."""
        del self.links_by_name[(link.name, link.role)]
        if self.displaced is None:
            self.displaced = {}
        self.displaced[link] = None
        if link.state.remote is not ACTIVE:
            return
        link.credit = 0
        link.drain = False
        if link.state.local is CLOSED or self.state.local is not ACTIVE:
            return  # detached by us already (its answer is awaited); or detached by begin()
        link.reject(_stolen(link))

    def on_detach(self, detach: Detach) -> None:
        link = self.remote_link(detach.handle, "detach")
        link.state.remote_input(Input.CLOSE, "detach", E.NOT_ALLOWED)
        del self.links_by_remote[detach.handle]
        self.in_handle = -1
        self.in_link = None
        link.remote_handle = None
        link.remote_closed = detach.closed
        link.remote_error = detach.error
        link.in_delivery = -1
        self.conn.emit(RemoteDetach(link=link, closed=detach.closed, error=detach.error))
        if link.state.local is not ACTIVE:
            self._release_link(link)

    def remote_link(self, handle: int, frame_name: str) -> Link:
        """The link the peer attached with `handle`, for its `frame_name` frame."""
        link = self.links_by_remote.get(handle)
        if link is None:  # transport §2.6.5: input for an unattached handle ends the session
            raise E.ProtocolError(
                f"{frame_name} for unattached handle {handle}", E.UNATTACHED_HANDLE, "session"
            )
        return link


def _stolen(link: Link) -> Error:
    # (the name is the peer's: wire_error cuts it to fit the peer's frames)
    return wire_error(E.STOLEN, f"stolen: the peer attached link {link.name!r} again (transport 2.6.1)")
