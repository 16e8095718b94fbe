"""A connection's sessions by channel (transport §2.5.1, §2.7.1): the sessions we begin and the
channels they take.

Owns: beginning a session of ours (only on an open connection), the lowest free channel for it
within both channel-maxes (ours, and the peer's once its open came), releasing a session's
channels on both sides once it is over, and the list of the connection's sessions.
Collaborators, passed in: the Connection (its local state, our config, the peer's open and
channel-max, the session registries by our channel and by the peer's), the Session.
Must not touch: the peer's begin and end, which fill and empty the registry by the peer's
channel (connctl.py), a session's own state (session.py), frames, sockets.

Functions taking the connection, not methods of it: the connection keeps the sans-IO surface
and the frame loop, and its methods begin_session (connection.py), sessions, allocate_channel
and release_session (its base's, connbase.py: hence that type here) hand over to these. Plain
functions of a native class argument, so that compiled, the call is a direct C call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import errors as E
from .endpoints import ACTIVE, claim_number
from .session import Session

if TYPE_CHECKING:
    from .connbase import ConnectionBase
    from .connection import Connection


def new_session(conn: Connection, **begin: Any) -> Session:
    """Create a session and send its begin (arguments as Session.begin)."""
    if conn.state.local is not ACTIVE:
        raise E.LocalUsageError("connection is not open")
    session = Session(conn, None)
    session.begin(**begin)
    return session


def sessions_of(conn: ConnectionBase) -> list[Session]:
    unique = {id(s): s for s in conn.sessions_by_local.values()}
    unique.update((id(s), s) for s in conn.sessions_by_remote.values())
    return list(unique.values())


def claim_channel(conn: ConnectionBase, session: Session) -> int:
    limit = min(conn.config.channel_max, conn.remote_channel_max if conn.remote_open else 0xFFFF)
    return claim_number(conn.sessions_by_local, session, limit, "channel", "channel-max")


def forget_session(conn: ConnectionBase, session: Session) -> None:
    if session.channel is not None and conn.sessions_by_local.get(session.channel) is session:
        del conn.sessions_by_local[session.channel]
    remote = session.remote_channel
    if remote is not None and conn.sessions_by_remote.get(remote) is session:
        del conn.sessions_by_remote[remote]
