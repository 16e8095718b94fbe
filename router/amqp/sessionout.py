"""A session's outgoing frames (transport §2.5.6, §2.6.14, §2.7): what its links and the
application send on it, and when the peer's window lets it go.

Owns: writing transfers (the common one-frame transfer from the link's cached middle, others
split to the peer's max-frame-size), what goes to the queue of frames held while the peer's
incoming window is closed (sessionheld.py keeps it: transfers, and what must not overtake them:
a sender's link flows and dispositions) and flushing it as the window opens, session and link
flows (our incoming window announced as 0 while the application shuts it: shut_window),
dispositions (cut to fit the peer's max-frame-size), attach/detach frames (a detach drops its
link's frames still held), and error descriptions cut to fit a frame (wire_error).
Collaborators, passed in: the Session (windows, next-outgoing-id, the held queue, channel and
connection), the Link whose frames these are; bytes go to the connection's output.
Must not touch: what the peer sends (sessionin.py), the link registry, handles and delivery-id
allocation (session.py), link credit and delivery-count (link.py), bytes on the socket.

Functions taking the session, not methods of it: the session's state is the session's, what
goes out and in which order is this module's. Plain functions of a native class argument, so
that compiled, the call per message is a direct C call (no generic receiver, no bound method).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, cast

from mypy_extensions import i64

from . import errors as E
from .endpoints import ACTIVE, CLOSED, UNINIT
from .fastpath import (
    disposition_frame,
    disposition_performative,
    flow_performative,
    frame_header,
    queue_transfer_own_tag,
    transfer_frame_id,
    transfer_middle,
    transfer_performative,
)
from .messaging import Modified, Rejected, TransactionalState
from .performatives import RECEIVER, SENDER, Detach, Error
from .serial import serial_add
from .sessionheld import (
    LINK_FLOW, TRANSFER, drop_held, held_size, hold_link_flow, hold_ordered, hold_transfer,
    take_held_flow,
)  # fmt: skip

if TYPE_CHECKING:
    from .link import Link
    from .messaging import AnyOutcome, DeliveryState
    from .session import Session

# Error descriptions often quote the peer's data (a link name, say). The close/end/detach that
# carries one must fit the peer's max-frame-size, which may be as small as 512 bytes
# (transport §2.7.1 MIN-MAX-FRAME-SIZE): cap the description well below that.
MAX_DESCRIPTION_BYTES: Final = 256


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


def write_disposition(
    session: Session, role: bool, first: int, last: int | None, state: DeliveryState | None,
    settled: bool,
) -> None:  # fmt: skip
    """Session.disposition: deliveries first..last (transport §2.7.6) in `role`."""
    if session.state.local is not ACTIVE:
        raise E.LocalUsageError("session is not begun")
    session.conn.check_not_closed()
    channel = session.channel or 0
    # The common kind is at most 30 bytes: it fits any max-frame-size (at least 512).
    prefix = b""
    if role is RECEIVER and 255 < first <= 0xFFFFFFFF:
        # The peer's id (an outcome for its delivery, once per message a lone producer sends):
        # its top three bytes as the session keeps them per 256 ids. Ours (as sender: rarer)
        # are made in disposition_frame, so that they never move id_prefix, which transfers use.
        prefix = session.in_id_prefix(first)
    pieces = disposition_frame(channel, role, first, last, settled, state, prefix)
    if len(pieces) == 0:
        body = disposition_performative(role, first, last, settled, state)
        if len(body) + 8 > session.conn.remote_max_frame_size:
            body = disposition_performative(role, first, last, settled, fitting_state(state))
        pieces = frame_header(8 + len(body), channel) + body
    # Settling deliveries we sent must not overtake their transfers still in the queue.
    if role is SENDER and session.blocked:
        hold_ordered(session, pieces)
    else:
        session.conn.write_bytes(pieces)


def write_control(session: Session, performative: Any, *, ordered: bool) -> None:
    """An attach or detach. `ordered` (a detach): the link's frames still held are dropped, so
    that nothing of the link follows its detach (its held deliveries' ids stay as aborted
    transfers, and the detach waits behind them: sessionheld.drop_held)."""
    if session.state.local is not ACTIVE:
        raise E.LocalUsageError("session is not begun")
    session.conn.check_not_closed()
    assert session.channel is not None
    if ordered and isinstance(performative, Detach):
        link = session.links_by_local.get(performative.handle)
        if link is not None and drop_held(session, link):
            # Its held deliveries keep their delivery-ids as aborted transfers: it follows them.
            hold_ordered(session, session.conn.encode_frame(session.channel, performative))
            return
    session.conn.write_frame(session.channel, performative)


def write_link_flow(session: Session, link: Link, echo: bool) -> None:
    if link.role is SENDER and session.blocked:
        hold_link_flow(session, link, echo)
    else:
        session.conn.write_bytes(_link_flow_frame(session, link, echo))


def write_session_flow(session: Session, echo: bool = False) -> None:
    body = flow_performative(*_session_fields(session), echo=echo)
    session.conn.write_bytes(frame_header(8 + len(body), session.channel or 0) + body)


def write_transfer(
    session: Session,
    link: Link,
    delivery_id: i64,
    tag: bytes,
    payload: bytes | memoryview,
    settled: bool,
    more: bool,
    message_format: i64,
    state: DeliveryState | None,
    first: bool,
    aborted: bool = False,
    own_tag: bool = False,
    rcv_settle_mode: int | None = None,
) -> None:
    """One transfer of `link` (Link.send_transfer, Link.abort). `own_tag`: the delivery's tag
    is its delivery-id's four big-endian bytes (`tag` is then unused). `rcv_settle_mode`: the
    transfer's own (transport §2.7.5), None for the link's."""
    blocked = session.blocked  # None unless the peer's window ever closed: no truth test then
    if (
        message_format == 0 and state is None and not aborted and rcv_settle_mode is None
        and (blocked is None or not blocked) and session.remote_incoming_window > 0
    ):  # fmt: skip
        size = len(payload)
        if size <= session.conn.remote_max_frame_size - 230:
            n = 4 if own_tag else len(tag)
            if link.out_middle_tag_length != n:
                assert link.local_handle is not None and session.channel is not None
                link.out_middle = transfer_middle(session.channel, link.local_handle, n)
                link.out_middle_tag_length = n
                link.out_id_prefix = b""  # (out_middle_id is made again from the new middle)
            middle = link.out_middle
            if len(middle) != 0:  # the common transfer: one concatenation, one frame
                out = session.conn.output.buffer()
                if own_tag:
                    prefix = session.id_prefix(delivery_id)
                    if link.out_id_prefix is not prefix:  # (the session's, made once per 256 ids)
                        link.out_id_prefix = prefix
                        link.out_middle_id = middle + prefix
                    queue_transfer_own_tag(
                        out, middle, link.out_middle_id, prefix, delivery_id & 0xFF, settled, more, payload, size
                    )  # fmt: skip
                else:
                    out.append(transfer_frame_id(middle, session.id_bytes(delivery_id), tag, settled, more, size))
                    out.append(payload)
                session.remote_incoming_window -= 1
                session.next_outgoing_id = (session.next_outgoing_id + 1) & 0xFFFFFFFF
                return
    assert link.local_handle is not None and session.channel is not None
    if own_tag:
        tag = session.id_bytes(delivery_id)
    handle, channel = link.local_handle, session.channel
    last = transfer_performative(
        handle, delivery_id, tag, message_format, settled, more, aborted, state, rcv_settle_mode
    )
    conn = session.conn
    room = conn.remote_max_frame_size - 8 - len(last)
    size = len(payload)
    if size <= room and not session.blocked and session.remote_incoming_window > 0:
        # The common case: one frame, window open. Header and performative are one small
        # bytes object; the payload is appended as is (joined once per write batch).
        out = conn.output.buffer()
        out.append(frame_header(8 + len(last) + size, channel) + last)
        out.append(payload)
        session.remote_incoming_window -= 1
        session.next_outgoing_id = (session.next_outgoing_id + 1) & 0xFFFFFFFF
        return
    if room <= 0:
        raise E.LocalUsageError("delivery tag too long for the peer's max-frame-size")
    if size <= room:
        frames: list[tuple[bytes, bytes | memoryview]] = [(last, payload)]
    else:  # split (transport §2.6.14); every frame but the last carries more=true
        middle = transfer_performative(
            handle, delivery_id, tag, message_format, settled, True, False, state, rcv_settle_mode
        )
        view = memoryview(payload)
        frames = [(middle, view[i : i + room]) for i in range(0, size - room, room)]
        frames.append((last, view[len(frames) * room :]))
    if not session.blocked and session.remote_incoming_window >= len(frames):
        write = session.conn.write_pieces
        for body, chunk in frames:
            write(frame_header(8 + len(body) + len(chunk), channel) + body, chunk)
        session.remote_incoming_window -= len(frames)
        session.next_outgoing_id = serial_add(session.next_outgoing_id, len(frames))
        return
    held = [(frame_header(8 + len(body) + len(chunk), channel) + body, chunk) for body, chunk in frames]
    hold_transfer(session, link, held, first, delivery_id)
    flush_blocked(session)


def flush_blocked(session: Session) -> None:
    """Send held frames as far as the peer's incoming window allows."""
    blocked = session.blocked
    if blocked is None:
        return
    conn = session.conn
    while blocked:
        item = blocked[0]
        kind, data, link, first = item
        if kind == TRANSFER and session.remote_incoming_window <= 0:
            return
        blocked.popleft()
        conn.output.held_bytes -= held_size(item)
        if kind == TRANSFER:
            session.remote_incoming_window -= 1
            session.next_outgoing_id = serial_add(session.next_outgoing_id, 1)
            if first >= 0 and link is not None:
                link.queued_deliveries -= 1
            conn.write_pieces(*data)
        elif kind == LINK_FLOW:
            assert link is not None
            conn.write_bytes(_link_flow_frame(session, link, take_held_flow(link)))
        else:
            conn.write_bytes(data)
    # Drained: dropped, so that the hot path's test is `is None` (a deque's truth is a generic
    # call) and an idle session holds no empty deque.
    session.blocked = None


def _session_fields(session: Session) -> tuple[int | None, int, int, int]:
    next_incoming = session.next_incoming_id if session.state.remote is not UNINIT else None
    window = 0 if session.window_shut else session.incoming_window
    return next_incoming, window, session.next_outgoing_id, session.outgoing_window


def shut_window(session: Session, shut: bool) -> None:
    """Announce our incoming window as 0 (`shut`), or open it again (transport §2.5.6): the peer
    sends no more transfers on the session until it is open. What it sent before it heard is
    still taken: the window shrinks at the peer, not the frames already on their way."""
    if session.window_shut == shut:
        return
    session.window_shut = shut
    if session.state.local is ACTIVE and session.conn.state.local is not CLOSED:
        write_session_flow(session)


def _link_flow_frame(session: Session, link: Link, echo: bool) -> bytes:
    delivery_count = link.delivery_count
    if link.role is SENDER:  # what the receiver has seen, not what waits in our queue
        delivery_count = serial_add(delivery_count, -link.queued_deliveries)
    body = flow_performative(
        *_session_fields(session),
        handle=link.local_handle,
        delivery_count=delivery_count,
        link_credit=link.credit,
        available=link.available if link.role is SENDER else None,
        drain=link.drain,
        echo=echo,
    )
    return frame_header(8 + len(body), session.channel or 0) + body
