"""A connection's idle time-out and heartbeats (transport §2.4.5), once AMQP frames flow.

Owns: when the connection's timers are next due (our idle time-out from the last read after the
peer's open, a heartbeat at half the peer's), closing with resource-limit-exceeded when the peer
stayed silent past our time-out, and the empty frame that keeps the peer's from firing.
Collaborators, passed in: the Connection (our config, the peer's open and idle time-out, when
bytes last came and went, its output, its error path: violations.py).
Must not touch: the stage and a held-back failed login's deadline (connection.py, handshake.py:
the connection asks here only in the AMQP stage, before both closes and any failure), frames
other than the heartbeat, sockets, clocks (time is a parameter).

Functions taking the connection, not methods of it: the timers are a unit of their own, the
connection keeps the sans-IO surface and the frame loop. Plain functions of a native class
argument, so that compiled, the connection's call is a direct C call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import errors as E
from .endpoints import ACTIVE
from .framing import EMPTY_FRAME
from .violations import connection_error

if TYPE_CHECKING:
    from .connection import Connection


def next_deadline(conn: Connection) -> float | None:
    """When run_timers must next be called, or None if no timer runs."""
    # Asked after every read: no list, no min().
    deadline: float | None = None
    idle = conn.config.idle_timeout_s
    if idle and conn.remote_open is not None:
        deadline = conn.last_received + idle
    remote = conn.remote_idle_timeout_s
    if remote and conn.state.local is ACTIVE:
        beat = conn.last_sent + remote / 2
        if deadline is None or beat < deadline:
            deadline = beat
    return deadline


def run_timers(conn: Connection, now: float) -> None:
    """Close on our idle time-out, send a heartbeat if the peer needs one."""
    timeout = conn.config.idle_timeout_s
    if timeout and conn.remote_open is not None and now >= conn.last_received + timeout:
        connection_error(conn, E.RESOURCE_LIMIT_EXCEEDED, "local-idle-timeout expired")
        return
    remote = conn.remote_idle_timeout_s
    if remote and conn.state.local is ACTIVE and now >= conn.last_sent + remote / 2:
        if not conn.output.pieces:
            conn.output.pieces.append(EMPTY_FRAME)  # transport §2.4.5
        # Restart the heartbeat timer now: what is queued goes out next. Left in the past
        # (frames waiting behind a slow write), the deadline would have the driver tick in
        # a loop and never read the peer's frames, until our own idle time-out fired.
        conn.last_sent = now
