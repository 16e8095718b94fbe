"""The connection's control frames (transport §2.4, §2.5.1, §2.5.4, §2.7): every frame the
frame loop does not handle on its per-message path.

Owns: the dispatch of a non-hot frame (open first of all, nothing after the peer's close, our
close discarding all but the peer's, a channel's session or a violation, our end discarding
until the peer's), the peer's open (its limits: max-frame-size, channel-max, idle time-out),
close, begin (a new session, or the answer to ours) and end, and their events. Attach and
detach go to the session; a transfer, flow or disposition that came with a symbolic descriptor
goes to sessionin.py as the per-message path's would.
Collaborators, passed in: the Connection (its state, the peer's open and limits, the session
registries by channel, events); the Session a frame's channel is for.
Must not touch: the frame loop and frame-level checks, the stage, timers, error handling
(connection.py), a session's own state (session.py), sockets.

Functions taking the connection, not methods of it: the control frames are a unit of their
own, the connection keeps the sans-IO surface and the frame loop. Plain functions of a native
class argument, so that compiled, the frame loop's call is a direct C call, as the method's was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import errors as E
from .endpoints import ACTIVE, CLOSED, UNINIT, Input
from .events import RemoteBegin, RemoteClose, RemoteEnd, RemoteOpen
from .fastparse import transfer_fields
from .framing import MIN_MAX_FRAME_SIZE
from .performatives import Attach, Begin, Close, Detach, Disposition, End, Flow, Open, Transfer
from .session import Session
from .sessionin import on_disposition, on_flow, on_transfer

if TYPE_CHECKING:
    from .connection import Connection


def control(
    conn: Connection,
    channel: int,
    session: Session | None,
    performative: Any,
    buf: bytes,
    stop: int,
    end: int,
) -> None:
    """Dispatch a non-hot frame. Checks that no open precede everything else (§2.4.1)."""
    if type(performative) is Open:
        on_open(conn, performative)
        return
    if conn.remote_open is None:
        raise E.ProtocolError(
            f"{type(performative).__name__} before open", E.NOT_ALLOWED
        )
    if conn.state.remote is CLOSED:
        raise E.ProtocolError(f"{type(performative).__name__} after close", E.NOT_ALLOWED)
    if type(performative) is Close:
        on_close(conn, performative)
        return
    if conn.state.local is CLOSED:
        return  # we closed: discard everything until the peer's close (transport §2.4.3)
    if type(performative) is Begin:
        on_begin(conn, channel, performative)
        return
    if session is None:
        raise E.ProtocolError(
            f"{type(performative).__name__} on channel {channel} with no session",
            E.NOT_ALLOWED,
        )
    if type(performative) is End:
        on_end(conn, session, performative)
    elif session.state.local is CLOSED:
        return  # we ended the session: discard until the peer's end (transport §2.5.4)
    elif type(performative) is Attach:
        session.on_attach(performative)
    elif type(performative) is Detach:
        session.on_detach(performative)
    elif type(performative) is Transfer:  # reached here only with a symbolic descriptor
        on_transfer(session, buf, transfer_fields(performative, stop), end)
    elif type(performative) is Flow:
        f = performative
        on_flow(
            session,
            (f.next_incoming_id, f.incoming_window, f.next_outgoing_id, f.outgoing_window,
             f.handle, f.delivery_count, f.link_credit, f.available, f.drain, f.echo)
        )  # fmt: skip
    elif type(performative) is Disposition:
        d = performative
        on_disposition(session, (d.role, d.first, d.last, d.settled, d.state))
    else:
        raise E.ProtocolError(
            f"{type(performative).__name__} is not a frame body", E.NOT_ALLOWED
        )


def on_open(conn: Connection, open_: Open) -> None:
    conn.state.remote_input(Input.OPEN, "open", E.NOT_ALLOWED)
    conn.remote_open = open_
    conn.remote_max_frame_size = max(MIN_MAX_FRAME_SIZE, min(open_.max_frame_size, 0xFFFFFFFF))
    conn.remote_channel_max = open_.channel_max
    idle_ms = open_.idle_time_out
    conn.remote_idle_timeout_s = idle_ms / 1000 if idle_ms else None
    conn.emit(RemoteOpen(open=open_))


def on_close(conn: Connection, close: Close) -> None:
    conn.state.remote_input(Input.CLOSE, "close", E.NOT_ALLOWED)
    conn.remote_error = close.error
    conn.emit(RemoteClose(error=close.error))
    if conn.state.local is CLOSED:
        conn.finished = True


def on_begin(conn: Connection, channel: int, begin: Begin) -> None:
    if channel in conn.sessions_by_remote:
        raise E.ProtocolError(f"begin on channel {channel}, already in use", E.NOT_ALLOWED)
    if begin.remote_channel is not None:
        session = conn.sessions_by_local.get(begin.remote_channel)
        if session is None or session.state.remote is not UNINIT:
            raise E.ProtocolError(
                f"begin answers unknown channel {begin.remote_channel}", E.NOT_ALLOWED
            )
    else:
        session = Session(conn, None)
    session.remote_channel = channel
    conn.sessions_by_remote[channel] = session
    session.on_begin(begin)
    conn.emit(RemoteBegin(session=session, begin=begin))


def on_end(conn: Connection, session: Session, end: End) -> None:
    session.state.remote_input(Input.CLOSE, "end", E.NOT_ALLOWED)
    session.remote_error = end.error
    if session.remote_channel is not None:
        conn.sessions_by_remote.pop(session.remote_channel, None)
    conn.emit(RemoteEnd(session=session, error=end.error))
    if session.state.local is not ACTIVE:
        conn.release_session(session)
