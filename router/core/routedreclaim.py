"""Giving back idle routed sessions: a session of routed links towards another router is ended
once no link has been in it for IDLE_S (docs/mesh.md, "Link routes").

Between two routers each routed pair gets a session of its own while the channels allow
(linkpairs.routed_sessions), and a session whose pairs all went is reused by the next pair.
Such a session costs a session on both routers (its maps, its window's bookkeeping, a channel):
kept for the connection's life, every session a burst of pairs made stayed, up to
routed_sessions() (213 with the default channels) on each connection to another router. The
router that began one (it attached the routed links in it, towards the container) watches it
(`watch`), and once it is proven idle ends it (transport §2.5.4); the peer answers the end and
forgets its side, as for a streaming link's session (a session with no link left never breaks
the connection between routers: streamreclaim.end_breaks). A later pair begins a new one.

Proven idle: no link in it (every pair that was in it detached both ways) and nothing of it
waiting for the peer's window, when first looked at and again at a look IDLE_S later, and not
handed to a pair in between (`used`). The looks are a timer's, every SCAN_S while a session is
watched (RouterCore's tick and next_deadline): the minute of idle streaming links
(streamreclaim.IDLE_S), long enough that the pairs of a burst reuse the sessions of the last one.
Never watched: the session towards a route container (one for the connection's life), and
sessions towards a router of mesh version 1, which would take the end for a broken connection.
Owns: the watched sessions and since when each is idle.
Collaborators: LinkPairs (hands sessions to pairs, ends those found idle, forgets a lost
connection's), RouterCore (tick, next_deadline).
Must not touch: the pairs themselves (linkpairs.py), what is relayed (linkrelay.py).
"""

from __future__ import annotations

import math

from ..amqp.endpoints import ACTIVE, CLOSED
from ..amqp.session import Session
from .streamreclaim import IDLE_S, SCAN_S


class IdleRoutedSessions:
    """The routed sessions towards other routers (see the module docstring): since when each has
    been seen idle."""

    __slots__ = ("since", "deadline")

    def __init__(self) -> None:
        # Watched sessions, by the time they were first seen idle (-1: not idle when last looked
        # at, or handed to a pair since).
        self.since: dict[Session, float] = {}
        self.deadline = math.inf  # when to look next (inf: nothing watched)

    def watch(self, session: Session, now: float) -> None:
        """`session` was begun for routed links towards another router: ended once idle."""
        self.since[session] = -1.0
        if self.deadline == math.inf:
            self.deadline = now + SCAN_S

    def used(self, session: Session) -> None:
        """`session` was handed to a new pair: not idle since the last look."""
        if session in self.since:
            self.since[session] = -1.0

    def forget(self, session: Session) -> None:
        if self.since.pop(session, None) is not None and not self.since:
            self.deadline = math.inf

    def due(self, now: float) -> list[Session]:
        """Look at the watched sessions: those idle for IDLE_S now, to be ended (no longer watched)."""
        if now < self.deadline:
            return []
        found: list[Session] = []
        for session, since in list(self.since.items()):
            if not _open(session):
                del self.since[session]  # ended (by the peer) or its connection is going
            elif session.links_by_name or session.blocked_frames or session.state.remote is not ACTIVE:
                self.since[session] = -1.0  # (or its begin not answered yet)
            elif since < 0:
                self.since[session] = now  # idle from here, unless a pair comes
            elif now - since >= IDLE_S:
                found.append(session)
                del self.since[session]
        self.deadline = now + SCAN_S if self.since else math.inf
        return found


def _open(session: Session) -> bool:
    conn = session.conn
    return (session.state.local is ACTIVE and session.state.remote is not CLOSED and conn.state.local is ACTIVE
            and not conn.finished)  # fmt: skip
