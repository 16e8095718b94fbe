"""Flow control per priority band between routers: a band whose frames wait in this router for a
blocked consumer stops that band at the neighbour, not the whole connection (docs/mesh.md,
"Priorities").

Each data link a router sends on to a neighbour is in a session of its own (interrouter.
attach_links), so a session is one band, or one streaming link (streamlinks.py), of one
neighbour: "band" below means either. Receiving: the frames this router
holds for a blocked consumer (holding.py) count against the session they came on as well as
against their connection; a band session's incoming window is shut (transport §2.5.6:
announced as 0, sessionout.shut_window) once more than `shut_above` of them wait, and opened
again below half of that. The neighbour then sends nothing more on that band, while this router
keeps reading its connection: its other bands, its control link (HELLO and routing updates) and
the outcomes it sends back. What the neighbour wrote before it heard still arrives and is held:
reading a connection between routers stops only far above that (ConnState.held_pause_above: a
neighbour that ignored the window, or one whose data shares the control link's session).
Sending: a neighbour shutting one of our data links' sessions (events.WindowChanged, reported
for the sessions attach_links watches) marks its links `window_shut`: they take no delivery
(others go to other paths or wait, bounded by their producers' credit) and the frames of the one
streaming on them are held in the core against their producer's bound (holding.py), so that the
band's stop travels upstream band by band as the bound is reached. The engine's own window queue
(sessionheld.py) would hold them too, but counted as the whole connection's unsent output,
stopping every band. When the window opens they are written first.
Collaborators, passed in: the engine Session (its window, its SessionMaps), the Touched set (a
window's flow is written by the next flush), the core's log.
Must not touch: which frames are held and written when (holding.py), reading pauses (bounds.py).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from ..amqp.sessionout import shut_window
from .delivery import SessionMaps, maps_of

if TYPE_CHECKING:
    from ..amqp.session import Session
    from .connections import ConnState
    from .touched import Touched

log = logging.getLogger("router.core")

# A band's window shuts once this part of its connection's read_high_water_bytes waits for
# blocked consumers (2 MiB of the default 16 MiB), and opens again below half of it.
SHUT_SHARE: Final = 8
# How much more than its read_high_water_bytes a connection between routers may hold before it
# is not read at all: what a neighbour writes before it hears a band's window shut (its own
# write high-water mark and the kernels' socket buffers between), in multiples of this end's
# write high-water mark.
IN_FLIGHT_WRITES: Final = 4
NEVER_SHUT: Final = -1


def data_session(session: Session, conn: ConnState) -> None:
    """A neighbour's data link attached on `session`: it may be shut, unless the neighbour's
    control link is on it too (a router whose default band shares the control link's session:
    shutting it would stop the control link, so that connection is paused as a whole instead)."""
    maps = maps_of(session)
    if maps.shut_above == 0:
        maps.shut_above = max(1, conn.read_high_water // SHUT_SHARE)


def control_session(session: Session) -> None:
    """A neighbour's control link attached on `session`: never shut it."""
    maps_of(session).shut_above = NEVER_SHUT


def count_held(session: Session | None, nbytes: int, touched: Touched) -> None:
    """Frames that came on `session` are held (`nbytes` > 0) or no longer (< 0): shut or open
    its window as the band's held bytes cross its bounds."""
    if session is None:
        return
    maps = session.context
    if type(maps) is not SessionMaps or maps.shut_above <= 0:
        return
    held = maps.held_bytes = maps.held_bytes + nbytes
    if session.window_shut:
        if held <= maps.shut_above >> 1:
            _shut(session, False, held, touched)
    elif held > maps.shut_above:
        _shut(session, True, held, touched)


def _shut(session: Session, shut: bool, held: int, touched: Touched) -> None:
    shut_window(session, shut)
    engine = session.conn
    touched.touch(engine)  # (the flow goes out with the next flush)
    state = engine.context
    log.debug("connection %s: %s a band's window (session %s), %d bytes held for blocked consumers",
              getattr(state, "id", "?"), "shut" if shut else "opened", session.channel, held)  # fmt: skip


def held_pause_above(read_high_water: int, write_high_water: int, between_routers: bool) -> int:
    """Held frames past which a connection is not read (bounds.read_paused): its read bound;
    between routers, where bands shut first, that and what may be in flight after they did."""
    if between_routers:
        return read_high_water + IN_FLIGHT_WRITES * write_high_water
    return read_high_water
