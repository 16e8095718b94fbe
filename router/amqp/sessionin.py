"""A session's incoming transfer, flow and disposition frames (transport §2.5.6, §2.6.7, §2.7.4
to §2.7.6): their checks, and what they change in the session and its links.

Owns: our incoming window and next-incoming-id as transfers use them (a session flow when half
the window is used), the peer's session-scoped delivery-id sequence, a transfer's checks (the
link attached with the peer as sender, credit we granted, one delivery at a time per link,
max-message-size) and its TransferReceived event (large payloads as views of the read), or
the first frame offered to the connection's transfer sink (events.TransferSink); the
peer's incoming window and link credit from its flows (FlowReceived, echoes; WindowChanged when
a watched session's window opens or shuts); a disposition's
range check (DispositionReceived).
Collaborators, passed in: the Session (windows, the link registry by the peer's handles, its
connection: events, link errors), the Link a frame is for; sessionout.py writes what a frame
asks for (flows, held frames the window lets go). The connection's frame loop calls on_transfer,
on_flow and on_disposition once it has checked the channel (and the session is not ended).
Must not touch: attach, detach and begin (session.py), what we send (sessionout.py), frame
parsing (fastparse.py, fastparse_fields.py), bytes on the socket.

Functions taking the session, not methods of it: the per-frame checks are a unit of their own,
the session keeps its state and registry. Plain functions of a native class argument, so that
compiled, the frame loop's call per message is a direct C call, as the method's was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from mypy_extensions import i64

from . import errors as E
from .endpoints import ACTIVE, CLOSED
from .events import DispositionReceived, FlowReceived, TransferReceived, WindowChanged
from .fastparse import TransferFields, tag_in
from .fastparse_fields import DispositionFields, FlowFields
from .performatives import RCV_FIRST, RECEIVER, SENDER
from .serial import serial_add, serial_diff, serial_lt
from .sessionout import flush_blocked, write_link_flow, write_session_flow

if TYPE_CHECKING:
    from .link import Link
    from .session import Session

ZERO_COPY_MIN: Final = 2048  # payloads larger than this are handed on as memoryviews of the read


def on_flow(session: Session, fields: FlowFields) -> None:
    (next_in, in_window, next_out, out_window, handle, delivery_count, link_credit,
     available, drain, echo) = fields  # fmt: skip
    # transport §2.5.6: remote-incoming-window = next-incoming-id + incoming-window
    #                                            - next-outgoing-id
    base = session.next_outgoing_id if next_in is None else next_in
    was_open = session.remote_incoming_window > 0
    session.remote_incoming_window = serial_diff(serial_add(base, in_window), session.next_outgoing_id)
    session.remote_outgoing_window = out_window
    # Frames on a session or link must follow our begin/attach (transport §2.5.1, §2.6.3):
    # an echo asked for before we answered is answered by the begin/attach itself.
    if handle is None:
        if echo and session.state.local is ACTIVE:
            write_session_flow(session)
    else:
        link = session.remote_link(handle, "flow")
        # A flow may arrive before we answer the peer's attach (pipelined): keep its credit.
        if link.state.local is not CLOSED:
            _link_flow(session, link, delivery_count, link_credit, available, drain)
            if echo and link.state.local is ACTIVE:
                write_link_flow(session, link, False)
    flush_blocked(session)
    if session.watch_window and (session.remote_incoming_window > 0) != was_open:
        session.conn.emit(WindowChanged(session))


def _link_flow(
    session: Session, link: Link, delivery_count: int | None, credit: int | None,
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
        session.conn.emit(FlowReceived(link, False))
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
        session.conn.emit(FlowReceived(link, drained))


def on_transfer(session: Session, buf: bytes, fields: TransferFields, frame_end: i64) -> None:
    (handle, delivery_id, tag, tag_at, message_format, settled, more, rcv_settle_mode, state,
     _resume, aborted, payload_start) = fields  # fmt: skip
    if handle == session.in_handle and session.in_link is not None:
        link = session.in_link
    else:
        found = session.links_by_remote.get(handle)
        if found is None:
            found = session.remote_link(handle, "transfer")  # raises unattached-handle
        link = found
        session.in_handle = handle
        session.in_link = link
    # transport §2.5.6: each transfer frame uses one slot of our incoming window
    if session.incoming_window <= 0:
        raise E.ProtocolError(
            "transfer beyond the session incoming window", E.WINDOW_VIOLATION, "session"
        )
    session.incoming_window -= 1
    session.next_incoming_id = (session.next_incoming_id + 1) & 0xFFFFFFFF  # serial (§2.8.10)
    if session.incoming_window <= session.incoming_window_size // 2:
        session.incoming_window = session.incoming_window_size
        if session.state.local is ACTIVE:  # else our begin will announce the window
            write_session_flow(session)
    if link.role is not RECEIVER:
        raise E.ProtocolError(
            f"transfer on link {link.name!r} where the peer is the receiver",
            E.NOT_ALLOWED, "session",
        )  # fmt: skip
    if link.state.local is not ACTIVE:
        # in flight when we detached: discard (transport §2.6.5), following the sequence
        if delivery_id >= 0 and delivery_id != session.next_incoming_delivery - 1:
            session.next_incoming_delivery = delivery_id + 1
        return
    first = link.in_delivery < 0
    if first:
        expected = session.next_incoming_delivery
        if delivery_id != expected or (tag is None and tag_at < 0):
            _check_first_transfer(delivery_id, tag is not None or tag_at >= 0, expected)
        # kept unwrapped (one add per delivery): 2**32 stands for 0 (_check_first_transfer)
        session.next_incoming_delivery = delivery_id + 1
        if link.credit > 0:
            link.credit -= 1
        elif link.granted_limit is None or not serial_lt(link.delivery_count, link.granted_limit):
            # transport §2.6.7: beyond any credit we granted. Within an earlier, larger grant
            # it was in flight when we reduced the credit: handled normally, as §2.6.7 allows.
            session.conn.link_error(link, E.TRANSFER_LIMIT_EXCEEDED, "transfer without credit")
            return
        link.delivery_count = (link.delivery_count + 1) & 0xFFFFFFFF
        if more and not aborted:  # the frames that follow carry no tag: theirs is this one
            link.in_tag = tag if tag is not None else tag_in(buf, tag_at)
        link.in_settled = bool(settled)
        link.in_bytes = 0
    else:
        if delivery_id >= 0 and delivery_id != link.in_delivery:
            raise E.ProtocolError(
                f"transfer for delivery {delivery_id} interleaves delivery "
                f"{link.in_delivery} on one link", E.NOT_ALLOWED, "session",
            )  # fmt: skip
        delivery_id, tag, tag_at = link.in_delivery, link.in_tag, -1
        if settled:
            link.in_settled = True
    # (an if, not a conditional expression: mixing i64 and an int literal boxes, compiled)
    if more and not aborted:
        link.in_delivery = delivery_id
    else:
        link.in_delivery = -1
    asks_first = False  # the transfer's own rcv-settle-mode differs from its link's: first
    if rcv_settle_mode is not None and rcv_settle_mode != link.rcv_settle_mode:
        if rcv_settle_mode != RCV_FIRST:
            # transport §2.7.5: second on a link negotiated first is illegal (and
            # receiver-settle-mode has no third value, §2.8.3).
            link.in_delivery = -1
            session.conn.link_error(
                link, E.INVALID_FIELD,
                f"transfer rcv-settle-mode {int(rcv_settle_mode)} on a link attached with rcv-settle-mode "
                f"{int(link.rcv_settle_mode)} (transport 2.7.5)",
            )  # fmt: skip
            return
        # First on a link negotiated second is the peer's right: the delivery is settled as soon
        # as its outcome is known (the core's, from the event: never the sink's straight path).
        asks_first = True
    # Large payloads are views of the read (no copy until the output join); small ones are
    # copied, which costs no more than making a view and pins nothing.
    payload_size = frame_end - payload_start
    if payload_size > ZERO_COPY_MIN:
        payload: bytes | memoryview = session.conn.read_view(buf)[payload_start:frame_end]
    else:
        payload = buf[payload_start:frame_end]
    link.in_bytes += payload_size  # (len() of a bytes | memoryview is a generic call)
    limit = link.in_limit
    if limit != 0 and link.in_bytes > limit and link.detach_on_oversize:
        link.in_delivery = -1
        session.conn.link_error(
            link, E.MESSAGE_SIZE_EXCEEDED, f"message larger than max-message-size {limit}"
        )
        return
    conn = session.conn
    events = conn.events_list()
    sink = conn.transfer_sink
    if (
        sink is not None and first and not aborted and len(events) == 0 and not asks_first
        and sink.first_frame(
            link, delivery_id, link.in_settled, more, message_format, payload, buf, payload_start, conn.now
        )
    ):  # fmt: skip
        conn.sunk = True
        return
    events.append(
        TransferReceived(
            link, delivery_id, tag, tag_at, link.in_settled, more and not aborted, aborted,
            message_format, state, rcv_settle_mode, first, payload, buf, payload_start,
        )  # fmt: skip
    )


def _check_first_transfer(delivery_id: int, tagged: bool, expected: int) -> None:
    """The rare first transfers: the peer's first delivery (no sequence yet), the sequence
    wrapping (transport §2.8.10), or a violation (raised)."""
    if delivery_id < 0 or not tagged:
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


def on_disposition(session: Session, fields: DispositionFields) -> None:
    role, first, last, settled, state = fields
    if last is None:
        last = first
    if serial_diff(last, first) < 0:
        raise E.ProtocolError(
            f"disposition range {first}..{last} runs backwards", E.INVALID_FIELD, "session"
        )
    session.conn.emit(DispositionReceived(session, role, first, last, settled, state))
