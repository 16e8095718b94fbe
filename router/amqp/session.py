"""Session endpoints (transport §2.5): channels, windows, handles, delivery-ids, and the frames
of the links they carry.

Owns: incoming/outgoing windows and next-incoming-id/next-outgoing-id (transport §2.5.6), the
handle tables and handle-max, session-scoped delivery-id allocation, writing transfers (split to
the peer's max-frame-size) and the queue that holds them while the peer's incoming window is
closed, and the checks on incoming attach/flow/transfer/disposition/detach frames.
Must not touch: bytes on the socket (the connection writes), routing decisions.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Final, cast

from mypy_extensions import i64

from . import errors as E
from .endpoints import ACTIVE, CLOSED, UNINIT, Action, Halves, Input
from .events import (
    DispositionReceived,
    FlowReceived,
    RemoteAttach,
    RemoteDetach,
    TransferReceived,
)
from .fastparse import DispositionFields, FlowFields, TransferFields
from .fastpath import (
    disposition_frame,
    disposition_performative,
    flow_performative,
    frame_header,
    transfer_frame_id,
    transfer_middle,
    transfer_performative,
)
from .link import Link
from .messaging import Modified, Rejected, TransactionalState
from .performatives import RECEIVER, SENDER, Attach, Begin, Detach, End, Error, Fields, Symbols
from .serial import serial_add, serial_diff, serial_lt

if TYPE_CHECKING:
    from .connection import Connection
    from .messaging import AnyOutcome, DeliveryState

ZERO_COPY_MIN: Final = 2048  # payloads larger than this are handed on as memoryviews of the read
DEFAULT_WINDOW: Final = 0x7FFFFFFF  # "no session-level limit": link credit is what bounds traffic
_TRANSFER: Final = 0
_ORDERED: Final = 1
_LINK_FLOW: Final = 2


# Error descriptions often quote the peer's data (a link name, say). The close/end/detach that
# carries one must fit the peer's max-frame-size, which may be as small as 512 bytes
# (transport §2.7.1 MIN-MAX-FRAME-SIZE): cap the description well below that.
MAX_DESCRIPTION_BYTES: Final = 256
_LOW_BYTES: Final[tuple[bytes, ...]] = tuple(bytes((n,)) for n in range(256))  # Session.id_bytes


def wire_error(condition: str, description: str) -> Error:
    data = description.encode("utf-8")
    if len(data) > MAX_DESCRIPTION_BYTES:
        description = data[: MAX_DESCRIPTION_BYTES - 3].decode("utf-8", "ignore") + "..."
    return Error(condition=condition, description=description)


def fitting_state(state: DeliveryState | None) -> DeliveryState | None:
    """`state` without what may make a disposition larger than the peer's max-frame-size: a
    rejection's error cut as wire_error cuts it, a modification's annotations dropped. Outcomes
    often carry what another peer wrote (the router passes them on), in frames of any size."""
    if type(state) is Rejected and state.error is not None:
        error = state.error
        return Rejected(error=wire_error(str(error.condition)[:MAX_DESCRIPTION_BYTES], error.description or ""))
    if type(state) is Modified:
        return Modified(delivery_failed=state.delivery_failed, undeliverable_here=state.undeliverable_here)
    if type(state) is TransactionalState:
        # An outcome stays an outcome (fitting_state keeps each state's type).
        outcome = cast("AnyOutcome | None", fitting_state(state.outcome))
        return TransactionalState(txn_id=state.txn_id, outcome=outcome)
    return state


class Session:
    __slots__ = (
        "conn", "channel", "remote_channel", "state", "remote_begin", "remote_error",
        "next_outgoing_id", "incoming_window", "incoming_window_size", "outgoing_window",
        "next_incoming_id", "remote_incoming_window", "remote_outgoing_window",
        "handle_max", "remote_handle_max", "links_by_local", "links_by_remote", "links_by_name",
        "_next_delivery_id", "_next_incoming_delivery", "_blocked", "context",
        "_in_handle", "_in_link", "_id_high", "_id_prefix",
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
        # the delivery-id the peer's next delivery must have (its session-scoped sequence,
        # transport §2.6); -2 until its first delivery sets where the sequence starts: never
        # equal to a parsed delivery-id (-1 when absent), so that the first delivery always
        # takes _check_first_transfer
        self._next_incoming_delivery: i64 = -2
        # Frames that must wait for the peer's incoming window, in order (transport §2.5.6);
        # None until the first one (an empty deque is 600 bytes, on every idle session).
        self._blocked: deque[tuple[int, Any, Link | None, bool]] | None = None
        self.context: Any = None
        # The link the peer's last transfer came on, by its handle (-1: none): consecutive
        # transfers mostly share a link, and a dict lookup boxes the handle and hashes it.
        # Forgotten whenever links_by_remote changes.
        self._in_handle: i64 = -1
        self._in_link: Link | None = None

    def __repr__(self) -> str:
        return f"Session(channel={self.channel}, remote={self.remote_channel}, {self.state!r})"

    @property
    def links(self) -> list[Link]:
        return list(self.links_by_name.values())

    @property
    def blocked_frames(self) -> int:
        return len(self._blocked) if self._blocked else 0

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

    def end(self, error: Error | None = None) -> None:
        """Send our end (transport §2.7.8). Frames still waiting for window are dropped: the
        application learns their deliveries failed when it handles the session's end."""
        self.conn.check_not_closed()
        action = self.state.local_input(Input.CLOSE)
        if action is Action.SEND_OPEN_THEN_CLOSE:
            self.state.local = UNINIT
            self.begin()
            self.state.local = CLOSED
        if self._blocked:
            self._blocked.clear()
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
        if self.state.local is not ACTIVE:
            raise E.LocalUsageError("session is not begun")
        self.conn.check_not_closed()
        channel = self.channel or 0
        # The common kind is at most 30 bytes: it fits any max-frame-size (at least 512).
        pieces = disposition_frame(channel, role, first, last, settled, state)
        if len(pieces) == 0:
            body = disposition_performative(role, first, last, settled, state)
            if len(body) + 8 > self.conn.remote_max_frame_size:
                body = disposition_performative(role, first, last, settled, fitting_state(state))
            pieces = frame_header(8 + len(body), channel) + body
        # Settling deliveries we sent must not overtake their transfers still in the queue.
        blocked = self._blocked
        if role is SENDER and blocked:
            blocked.append((_ORDERED, pieces, None, False))
        else:
            self.conn.write_bytes(pieces)

    # --- used by links -------------------------------------------------------------------------

    def allocate_handle(self, link: Link) -> int:
        limit = min(self.remote_handle_max, self.handle_max)
        for handle in range(len(self.links_by_local) + 1):
            if handle not in self.links_by_local:
                if handle > limit:
                    break
                self.links_by_local[handle] = link
                return handle
        raise E.LocalUsageError(f"no free link handle (handle-max {limit})")

    def free_handle(self, link: Link) -> None:
        if link.local_handle is not None and self.links_by_local.get(link.local_handle) is link:
            del self.links_by_local[link.local_handle]
        link.local_handle = None

    def next_delivery_id(self) -> int:
        delivery_id = self._next_delivery_id
        self._next_delivery_id = serial_add(delivery_id, 1)
        return delivery_id

    def id_bytes(self, delivery_id: int) -> bytes:
        """`delivery_id` (one of this session's, 0 to 2**32 - 1) as four big-endian bytes: its
        top three made once per 256 consecutive ids, where `int.to_bytes` per delivery boxed the
        int, converted it and allocated (~500 instructions when compiled)."""
        high = delivery_id >> 8
        if high != self._id_high:
            self._id_high = high
            self._id_prefix = high.to_bytes(3, "big")
        return self._id_prefix + _LOW_BYTES[delivery_id & 0xFF]

    def write_control(self, performative: Any, *, ordered: bool) -> None:
        if self.state.local is not ACTIVE:
            raise E.LocalUsageError("session is not begun")
        self.conn.check_not_closed()
        assert self.channel is not None
        if ordered and isinstance(performative, Detach):
            self._purge_link(self.links_by_local.get(performative.handle))
        self.conn.write_frame(self.channel, performative)

    def write_link_flow(self, link: Link, echo: bool) -> None:
        blocked = self._blocked
        if link.role is SENDER and blocked:
            blocked.append((_LINK_FLOW, echo, link, False))
        else:
            self.conn.write_bytes(self._link_flow_frame(link, echo))

    def write_transfer(
        self,
        link: Link,
        delivery_id: int,
        tag: bytes,
        payload: bytes | memoryview,
        settled: bool,
        more: bool,
        message_format: int,
        state: DeliveryState | None,
        first: bool,
        aborted: bool = False,
        id_bytes: bytes = b"",
    ) -> None:
        """`id_bytes`: the delivery-id as four big-endian bytes when the caller has them."""
        blocked = self._blocked  # None unless the peer's window ever closed: no truth test then
        if (
            message_format == 0 and state is None and not aborted
            and (blocked is None or not blocked) and self.remote_incoming_window > 0
        ):  # fmt: skip
            size = len(payload)
            if size <= self.conn.remote_max_frame_size - 230:
                n = len(tag)
                if link.out_middle_tag_length != n:
                    assert link.local_handle is not None and self.channel is not None
                    link.out_middle = transfer_middle(self.channel, link.local_handle, n)
                    link.out_middle_tag_length = n
                middle = link.out_middle
                if len(middle) != 0:  # the common transfer: one concatenation, one frame
                    out = self.conn.output.buffer()
                    if len(id_bytes) == 0:  # (a truth test of bytes is a generic call)
                        id_bytes = delivery_id.to_bytes(4, "big")
                    out.append(transfer_frame_id(middle, id_bytes, tag, settled, more, size))
                    out.append(payload)
                    self.remote_incoming_window -= 1
                    self.next_outgoing_id = (self.next_outgoing_id + 1) & 0xFFFFFFFF
                    return
        assert link.local_handle is not None and self.channel is not None
        handle, channel = link.local_handle, self.channel
        last = transfer_performative(
            handle, delivery_id, tag, message_format, settled, more, aborted, state
        )
        conn = self.conn
        room = conn.remote_max_frame_size - 8 - len(last)
        size = len(payload)
        if size <= room and not self._blocked and self.remote_incoming_window > 0:
            # The common case: one frame, window open. Header and performative are one small
            # bytes object; the payload is appended as is (joined once per write batch).
            out = conn.output.buffer()
            out.append(frame_header(8 + len(last) + size, channel) + last)
            out.append(payload)
            self.remote_incoming_window -= 1
            self.next_outgoing_id = (self.next_outgoing_id + 1) & 0xFFFFFFFF
            return
        if room <= 0:
            raise E.LocalUsageError("delivery tag too long for the peer's max-frame-size")
        if size <= room:
            frames: list[tuple[bytes, bytes | memoryview]] = [(last, payload)]
        else:  # split (transport §2.6.14); every frame but the last carries more=true
            middle = transfer_performative(
                handle, delivery_id, tag, message_format, settled, True, False, state
            )
            view = memoryview(payload)
            frames = [(middle, view[i : i + room]) for i in range(0, size - room, room)]
            frames.append((last, view[len(frames) * room :]))
        if not self._blocked and self.remote_incoming_window >= len(frames):
            write = self.conn.write_pieces
            for body, chunk in frames:
                write(frame_header(8 + len(body) + len(chunk), channel) + body, chunk)
            self.remote_incoming_window -= len(frames)
            self.next_outgoing_id = serial_add(self.next_outgoing_id, len(frames))
            return
        blocked = self._blocked
        if blocked is None:
            blocked = self._blocked = deque()
        for i, (body, chunk) in enumerate(frames):
            pieces = (frame_header(8 + len(body) + len(chunk), channel) + body, chunk)
            blocked.append((_TRANSFER, pieces, link, first and i == 0))
        if first:
            link.queued_deliveries += 1
        self.flush_blocked()

    def flush_blocked(self) -> None:
        """Send queued frames as far as the peer's incoming window allows."""
        blocked = self._blocked
        if blocked is None:
            return
        while blocked:
            kind, data, link, first = blocked[0]
            if kind == _TRANSFER:
                if self.remote_incoming_window <= 0:
                    return
                self.remote_incoming_window -= 1
                self.next_outgoing_id = serial_add(self.next_outgoing_id, 1)
                if first and link is not None:
                    link.queued_deliveries -= 1
                self.conn.write_pieces(*data)
            elif kind == _LINK_FLOW:
                assert link is not None
                self.conn.write_bytes(self._link_flow_frame(link, bool(data)))
            else:
                self.conn.write_bytes(data)
            blocked.popleft()
        # Drained: dropped, so that the hot path's test is `is None` (a deque's truth is a
        # generic call) and an idle session holds no empty deque.
        self._blocked = None

    def _purge_link(self, link: Link | None) -> None:
        blocked = self._blocked
        if link is None or not blocked:
            return
        self._blocked = deque(item for item in blocked if item[2] is not link)
        link.queued_deliveries = 0

    def link_locally_detached(self, link: Link) -> None:
        if link.state.remote is not ACTIVE:
            self._release_link(link)

    def _release_link(self, link: Link) -> None:
        self._in_handle = -1
        self._in_link = None
        if link.local_handle is not None:
            self.links_by_local.pop(link.local_handle, None)
        if link.remote_handle is not None:
            self.links_by_remote.pop(link.remote_handle, None)
        if self.links_by_name.get((link.name, link.role)) is link:
            del self.links_by_name[(link.name, link.role)]

    def _session_fields(self) -> tuple[int | None, int, int, int]:
        next_incoming = self.next_incoming_id if self.state.remote is not UNINIT else None
        return next_incoming, self.incoming_window, self.next_outgoing_id, self.outgoing_window

    def _link_flow_frame(self, link: Link, echo: bool) -> bytes:
        delivery_count = link.delivery_count
        if link.role is SENDER:  # what the receiver has seen, not what waits in our queue
            delivery_count = serial_add(delivery_count, -link.queued_deliveries)
        body = flow_performative(
            *self._session_fields(),
            handle=link.local_handle,
            delivery_count=delivery_count,
            link_credit=link.credit,
            available=link.available if link.role is SENDER else None,
            drain=link.drain,
            echo=echo,
        )
        return frame_header(8 + len(body), self.channel or 0) + body

    def write_session_flow(self, echo: bool = False) -> None:
        body = flow_performative(*self._session_fields(), echo=echo)
        self.conn.write_bytes(frame_header(8 + len(body), self.channel or 0) + body)

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
            raise E.ProtocolError(
                f"link {attach.name!r} is already attached", E.NOT_ALLOWED, "session"
            )
        if link is None:
            link = Link(self, attach.name, role)
            self.links_by_name[(attach.name, role)] = link
        link.state.remote_input(Input.OPEN, "attach", E.NOT_ALLOWED)
        link.remote_handle = handle
        link.remote_attach = attach
        self.links_by_remote[handle] = link
        self._in_handle = -1
        self._in_link = None
        if role is RECEIVER:  # the sender's initial-delivery-count starts our count
            link.delivery_count = attach.initial_delivery_count or 0
        self.conn.emit(RemoteAttach(link=link, attach=attach))

    def on_detach(self, detach: Detach) -> None:
        link = self._remote_link(detach.handle, "detach")
        link.state.remote_input(Input.CLOSE, "detach", E.NOT_ALLOWED)
        del self.links_by_remote[detach.handle]
        self._in_handle = -1
        self._in_link = None
        link.remote_handle = None
        link.remote_closed = detach.closed
        link.remote_error = detach.error
        link.in_delivery = -1
        self.conn.emit(RemoteDetach(link=link, closed=detach.closed, error=detach.error))
        if link.state.local is not ACTIVE:
            self._release_link(link)

    def _remote_link(self, handle: int, frame_name: str) -> Link:
        link = self.links_by_remote.get(handle)
        if link is None:  # transport §2.6.5: input for an unattached handle ends the session
            raise E.ProtocolError(
                f"{frame_name} for unattached handle {handle}", E.UNATTACHED_HANDLE, "session"
            )
        return link

    def on_flow(self, fields: FlowFields) -> None:
        (next_in, in_window, next_out, out_window, handle, delivery_count, link_credit,
         available, drain, echo) = fields  # fmt: skip
        # transport §2.5.6: remote-incoming-window = next-incoming-id + incoming-window
        #                                            - next-outgoing-id
        base = self.next_outgoing_id if next_in is None else next_in
        self.remote_incoming_window = serial_diff(serial_add(base, in_window), self.next_outgoing_id)
        self.remote_outgoing_window = out_window
        # Frames on a session or link must follow our begin/attach (transport §2.5.1, §2.6.3):
        # an echo asked for before we answered is answered by the begin/attach itself.
        if handle is None:
            if echo and self.state.local is ACTIVE:
                self.write_session_flow()
        else:
            link = self._remote_link(handle, "flow")
            # A flow may arrive before we answer the peer's attach (pipelined): keep its credit.
            if link.state.local is not CLOSED:
                self._link_flow(link, delivery_count, link_credit, available, drain)
                if echo and link.state.local is ACTIVE:
                    self.write_link_flow(link, False)
        self.flush_blocked()

    def _link_flow(
        self, link: Link, delivery_count: int | None, credit: int | None,
        available: int | None, drain: bool,
    ) -> None:  # fmt: skip
        if link.role is SENDER:
            # transport §2.6.7: link-credit(snd) = delivery-count(rcv) + link-credit(rcv)
            #                                      - delivery-count(snd)
            base = link.initial_delivery_count if delivery_count is None else delivery_count
            # Our delivery-count already counts deliveries still queued for window, so what is
            # left for the application is the delivery-limit minus that count.
            limit = serial_add(base, credit or 0)
            link.credit = max(0, serial_diff(limit, link.delivery_count))
            link.drain = drain
            self.conn.emit(FlowReceived(link, False))
        else:
            # The sender's flow: its delivery-count moves ours; the delivery-limit stays.
            limit = serial_add(link.delivery_count, link.credit)
            if delivery_count is not None:
                link.delivery_count = delivery_count
            link.credit = max(0, serial_diff(limit, link.delivery_count))
            link.available = available or 0
            drained = link.drain and link.credit == 0
            if drained:
                link.drain = False
            self.conn.emit(FlowReceived(link, drained))

    def on_transfer(self, buf: bytes, fields: TransferFields, frame_end: int) -> None:
        (handle, delivery_id, tag, message_format, settled, more, rcv_settle_mode, state,
         _resume, aborted, payload_start) = fields  # fmt: skip
        if handle == self._in_handle and self._in_link is not None:
            link = self._in_link
        else:
            found = self.links_by_remote.get(handle)
            if found is None:
                found = self._remote_link(handle, "transfer")  # raises unattached-handle
            link = found
            self._in_handle = handle
            self._in_link = link
        # transport §2.5.6: each transfer frame uses one slot of our incoming window
        if self.incoming_window <= 0:
            raise E.ProtocolError(
                "transfer beyond the session incoming window", E.WINDOW_VIOLATION, "session"
            )
        self.incoming_window -= 1
        self.next_incoming_id = (self.next_incoming_id + 1) & 0xFFFFFFFF  # serial (§2.8.10)
        if self.incoming_window <= self.incoming_window_size // 2:
            self.incoming_window = self.incoming_window_size
            if self.state.local is ACTIVE:  # else our begin will announce the window
                self.write_session_flow()
        if link.role is not RECEIVER:
            raise E.ProtocolError(
                f"transfer on link {link.name!r} where the peer is the receiver",
                E.NOT_ALLOWED, "session",
            )  # fmt: skip
        if link.state.local is not ACTIVE:
            # in flight when we detached: discard (transport §2.6.5), following the sequence
            if delivery_id >= 0 and delivery_id != self._next_incoming_delivery - 1:
                self._next_incoming_delivery = delivery_id + 1
            return
        first = link.in_delivery < 0
        if first:
            expected = self._next_incoming_delivery
            if delivery_id != expected or tag is None:
                tag = self._check_first_transfer(delivery_id, tag, expected)
            # kept unwrapped (one add per delivery): 2**32 stands for 0 (_check_first_transfer)
            self._next_incoming_delivery = delivery_id + 1
            if link.credit > 0:
                link.credit -= 1
            elif link.granted_limit is None or not serial_lt(link.delivery_count, link.granted_limit):
                # transport §2.6.7: beyond any credit we granted. Within an earlier, larger grant
                # it was in flight when we reduced the credit: handled normally, as §2.6.7 allows.
                self.conn.link_error(link, E.TRANSFER_LIMIT_EXCEEDED, "transfer without credit")
                return
            link.delivery_count = (link.delivery_count + 1) & 0xFFFFFFFF
            link.in_tag = tag
            link.in_settled = bool(settled)
            link.in_bytes = 0
        else:
            if delivery_id >= 0 and delivery_id != link.in_delivery:
                raise E.ProtocolError(
                    f"transfer for delivery {delivery_id} interleaves delivery "
                    f"{link.in_delivery} on one link", E.NOT_ALLOWED, "session",
                )  # fmt: skip
            delivery_id, tag = link.in_delivery, link.in_tag
            if settled:
                link.in_settled = True
        link.in_delivery = delivery_id if more and not aborted else -1
        # Large payloads are views of the read (no copy until the output join); small ones are
        # copied, which costs no more than making a view and pins nothing.
        payload_size = frame_end - payload_start
        if payload_size > ZERO_COPY_MIN:
            payload: bytes | memoryview = memoryview(buf)[payload_start:frame_end]
        else:
            payload = buf[payload_start:frame_end]
        link.in_bytes += payload_size  # (len() of a bytes | memoryview is a generic call)
        limit = link.max_message_size
        if limit and link.in_bytes > limit and link.detach_on_oversize:
            link.in_delivery = -1
            self.conn.link_error(
                link, E.MESSAGE_SIZE_EXCEEDED, f"message larger than max-message-size {limit}"
            )
            return
        assert tag is not None
        self.conn.events_list().append(
            TransferReceived(
                link, delivery_id, tag, link.in_settled, more and not aborted, aborted,
                message_format, state, rcv_settle_mode, first, payload,
            )  # fmt: skip
        )

    def _check_first_transfer(self, delivery_id: int, tag: bytes | None, expected: int) -> bytes:
        """The rare first transfers: the peer's first delivery (no sequence yet), the sequence
        wrapping (transport §2.8.10), or a violation (raised). Returns the tag."""
        if delivery_id < 0 or tag is None:
            raise E.ProtocolError(
                "first transfer of a delivery lacks delivery-id or delivery-tag",
                E.INVALID_FIELD, "session",
            )  # fmt: skip
        if expected >= 0 and delivery_id != expected & 0xFFFFFFFF:
            # Delivery-ids are a session-scoped sequence (transport §2.6): a reused or skipped id
            # would make two deliveries one for their dispositions (Proton refuses it too).
            raise E.ProtocolError(
                f"delivery-id {delivery_id} out of sequence (expected {expected & 0xFFFFFFFF})",
                E.INVALID_FIELD, "session",
            )  # fmt: skip
        return tag

    def on_disposition(self, fields: DispositionFields) -> None:
        role, first, last, settled, state = fields
        if last is None:
            last = first
        if serial_diff(last, first) < 0:
            raise E.ProtocolError(
                f"disposition range {first}..{last} runs backwards", E.INVALID_FIELD, "session"
            )
        self.conn.emit(DispositionReceived(self, role, first, last, settled, state))
