"""What a connection itself sends (transport §2.4.1, §2.4.3, §2.7.1, §2.7.9): our open and
close, and every non-transfer frame within the peer's max-frame-size.

Owns: our open (our limits, an idle time-out advertised at half our threshold) and the release
of the frames a server deferred until it; our close, with an open first if we never sent one,
and the connection finished once both closes are exchanged (or it failed); cutting a detach's,
end's or close's error down so that the frame fits the peer's max-frame-size (anything else too
large raises FrameTooLarge and writes nothing).
Collaborators, passed in: the Connection (our config, its local and remote state, the peer's
open and max-frame-size, its output and the release of deferred frames).
Must not touch: the peer's frames (connctl.py), sessions' frames other than through send_frame
(sessionout.py), the stage, timers, sockets.

Functions taking the connection, not methods of it: the connection keeps the sans-IO surface
and the frame loop, and its methods open, close and write_frame (its base's, connbase.py: hence
that type here) hand over to these. Plain
functions of a native class argument, so that compiled, the call is a direct C call.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from . import errors as E
from .endpoints import CLOSED, UNINIT, Action, Input
from .framing import frame
from .performatives import Close, Detach, End, Error, Fields, Open, Symbols
from .sessionout import MAX_DESCRIPTION_BYTES, wire_error

if TYPE_CHECKING:
    from .connbase import ConnectionBase


def send_open(
    conn: ConnectionBase,
    *,
    hostname: str | None = None,
    offered_capabilities: Symbols | None = None,
    desired_capabilities: Symbols | None = None,
    properties: Fields | None = None,
) -> None:
    """Send our open (transport §2.7.1)."""
    conn.state.local_input(Input.OPEN)
    idle = conn.config.idle_timeout_s
    conn.output.defer_first(frame(
        0,
        Open(
            container_id=conn.config.container_id,
            hostname=hostname,
            max_frame_size=conn.config.max_frame_size,
            channel_max=conn.config.channel_max,
            # Advertise half our threshold, as transport §2.4.5 advises.
            idle_time_out=int(idle * 500) if idle else None,
            offered_capabilities=offered_capabilities,
            desired_capabilities=desired_capabilities,
            properties=properties,
        ),
    ))  # fmt: skip
    conn.release_deferred()


def send_close(conn: ConnectionBase, error: Error | None = None) -> None:
    """Send our close (transport §2.7.9); opens first if we never did."""
    if conn.state.local is CLOSED:
        return
    if conn.state.local_input(Input.CLOSE) is Action.SEND_OPEN_THEN_CLOSE:
        conn.state.local = UNINIT
        send_open(conn)
        conn.state.local = CLOSED
    send_frame(conn, 0, Close(error=error))
    if conn.state.remote is CLOSED or conn.failed:
        conn.finished = True


def send_frame(conn: ConnectionBase, channel: int, performative: Any) -> None:
    """Write one non-transfer frame; no frame may exceed the peer's max-frame-size
    (transport §2.7.1). A detach, end or close must always go out: an error too large for
    it (a description quoting the peer's data) is cut down to fit. Any other frame too
    large raises FrameTooLarge and writes nothing."""
    conn.write_bytes(frame_bytes(conn, channel, performative))


def frame_bytes(conn: ConnectionBase, channel: int, performative: Any) -> bytes:
    """The encoded frame send_frame writes (for one that must wait in a session's queue)."""
    data = frame(channel, performative)
    if len(data) > conn.remote_max_frame_size and conn.remote_open is not None:
        error = getattr(performative, "error", None)
        if isinstance(performative, (Detach, End, Close)) and error is not None:
            smaller = wire_error(str(error.condition)[:MAX_DESCRIPTION_BYTES], error.description or "")
            data = frame(channel, dataclasses.replace(performative, error=smaller))
        if len(data) > conn.remote_max_frame_size:
            raise E.FrameTooLarge(
                f"{type(performative).__name__} frame of {len(data)} bytes exceeds the "
                f"peer's max-frame-size {conn.remote_max_frame_size}"
            )
    return data
