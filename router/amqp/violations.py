"""A peer's violations (transport §2.6.5, §2.5.5, §2.4.3): the right error on the wire, at the
narrowest scope that holds it, plus a ProtocolViolation event.

Owns: detaching a misused link with the condition, ending a session with it (our begin first if
we had not answered the peer's, as Session.end does), closing the connection with it and having
the connection discard all further input. The engine never raises on hostile bytes: the frame
loop and the session's checks raise ProtocolError, and land here.
Collaborators, passed in: the Connection (typed as its base, connbase.ConnectionBase: events,
whether it failed already, its local state, discarding input), the Session or Link at fault;
our close goes out through connout.py.
Must not touch: deciding what is a violation (the frame loop, connctl.py, sessionin.py), the
stage (connection.py), sockets.

Functions taking the connection, not methods of it: the error paths are cold, the connection
keeps the sans-IO surface and the frame loop. Plain functions of a native class argument, so
that compiled, the frame loop's call is a direct C call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import errors as E
from .connout import send_close
from .endpoints import ACTIVE, CLOSED
from .events import ProtocolViolation
from .sessionout import wire_error

if TYPE_CHECKING:
    from .connbase import ConnectionBase
    from .link import Link
    from .session import Session


def link_error(conn: ConnectionBase, link: Link, condition: str, description: str) -> None:
    """The peer misused a link: detach it with the condition (transport §2.6.5)."""
    conn.emit(ProtocolViolation(condition=condition, description=description, scope="link"))
    if link.state.local is ACTIVE:
        link.detach(closed=True, error=wire_error(condition, description))


def session_error(conn: ConnectionBase, session: Session, exc: E.ProtocolError) -> None:
    """End the session with the condition (transport §2.5.5, §2.8.17)."""
    conn.emit(ProtocolViolation(condition=exc.condition, description=exc.description, scope="session"))
    if session.state.local is CLOSED:
        return
    try:
        # A session we have not answered yet gets our begin first (transport §2.5.1, as
        # Session.end does): the end must reach the peer either way.
        session.end(wire_error(exc.condition, exc.description))
    except E.LocalUsageError:  # no channel left to answer on (the peer's channel-max)
        connection_error(conn, exc.condition, exc.description)


def connection_error(conn: ConnectionBase, condition: str, description: str) -> None:
    """Close the connection with the condition and discard all further input."""
    if conn.failed:
        return
    conn.failed = True
    conn.emit(ProtocolViolation(condition=condition, description=description, scope="connection"))
    if conn.state.local is not CLOSED:
        send_close(conn, wire_error(condition, description))
    conn.discard_input()
