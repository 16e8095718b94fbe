"""Auto-links (waypoints): links the router attaches itself to a broker's queue.

    autolinks = AutoLinks(connections, links, touched, router_id=...)
    autolinks.add(config, now) / remove(key, now)  # configuration and management at run time
    autolinks.connection_opened(conn, now)          # a route-container connection is up
    autolinks.link_attached(link, now)               # the broker answered one of our attaches
    autolinks.link_detached(link, error, now)        # ... or detached it (after Links did)
    autolinks.session_ended(session, now)            # ... or ended its session (after Links did)
    autolinks.connection_gone(conn, now, reattach=...)  # the connection is over
    autolinks.tick(now); autolinks.next_deadline()   # attaching again after a failure

Owns: one AutoLinkRun per configured auto-link: while a route-container connection matching its
`connection` (listener or connector name) or `container_id` (the broker's open) is up, the
router attaches to the queue: direction out, a sending link whose target is the queue, which
registers as a consumer of the address like any client's (the mesh advertises it, producers
anywhere reach it, several of them share the address by its distribution); direction in, a
receiving link from the queue, which registers as a producer into the address (credit only
while the address has a destination, bounded like any producer link: the router takes nothing
from the queue that has nowhere to go). The link counts as active only once the broker answers with a terminus (transport
§2.6.3: a null terminus is a refusal and a detach follows). After a detach, a session end or
a refusal, or no answer within attach_timeout_s, it is failed (with the broker's error) and
attached again after a backoff doubling from retry_initial_s to retry_max_s; with no matching connection it is inactive.
On a waypoint address (an address rule with `waypoint: true`) the out link consumes phase 0,
where producers send, and the in link produces phase 1, which the address's receivers consume
(router.core.table: PHASE1), so that one address serves both ways, as with the anchors. On
another address an in and an out auto-link would feed the queue's output back into it: such a
pair is failed (and retried, in case a rule makes the address a waypoint).
With `fallback: true` (router.core.fallback) the queue is a fallback destination: out consumes
the address's fallback address, in produces into the address with credit only while it has a
regular destination; on an address no rule gives fallback destinations such a link is failed
(and retried likewise).
Collaborators: the core's connections (to find matching ones), the Links unit (registering and
tearing down producer and consumer records), the Touched set.
Must not touch: message bytes, forwarding, the records' shape (router.core.links).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ..amqp.endpoints import ACTIVE
from ..amqp.link import Link
from ..amqp.messaging import Source, Target
from ..amqp.performatives import Error
from ..amqp.session import Session
from ..config.models import AutoLink
from .connections import ConnState
from .links import InLink, OutLink

if TYPE_CHECKING:
    from ..amqp.connection import Connection
    from .attach import Links
    from .touched import Touched

ROLE: Final = "route-container"
STATES: Final = ("inactive", "attaching", "active", "failed")


class AutoLinkRun:
    """One auto-link's configuration and state (management's router.config.autoLink)."""

    __slots__ = ("config", "state", "last_error", "conn", "link", "record", "failures", "retry_at", "answer_by", "attaches")

    def __init__(self, config: AutoLink) -> None:
        self.config = config
        self.state = "inactive"
        self.last_error: str | None = None
        self.conn: ConnState | None = None  # the connection it is attached (or attaching) on
        self.link: Link | None = None
        self.record: InLink | OutLink | None = None  # once active
        self.failures = 0  # consecutive, for the backoff
        self.retry_at: float | None = None
        self.answer_by: float | None = None  # while attaching: the broker must answer by then
        self.attaches = 0  # attach attempts (management)

    @property
    def key(self) -> str:
        return self.config.key

    @property
    def external_address(self) -> str:
        return self.config.external_address or self.config.address

    def matches(self, conn: ConnState) -> bool:
        if conn.role != ROLE or conn.closed or not conn.opened:
            return False
        if self.config.connection is not None:
            return conn.listener.name == self.config.connection
        remote = conn.engine.remote_open
        return remote is not None and remote.container_id == self.config.container_id

    def __repr__(self) -> str:
        return f"AutoLinkRun({self.key!r}, {self.state})"


class AutoLinks:
    def __init__(self, connections: dict[Connection, ConnState], links: Links, touched: Touched, *, router_id: str) -> None:
        self.connections = connections
        self.links = links
        self.touched = touched
        self.router_id = router_id
        self.runs: dict[str, AutoLinkRun] = {}
        self._by_link: dict[Link, AutoLinkRun] = {}
        self._sessions: dict[ConnState, Session] = {}  # one session of ours per connection
        self._names = 0

    # --- configuration ---------------------------------------------------------------------------

    def add(self, config: AutoLink, now: float) -> AutoLinkRun:
        if config.key in self.runs:
            raise ValueError(f"an auto-link named {config.key!r} exists")
        run = AutoLinkRun(config)
        self.runs[config.key] = run
        self._try_attach(run, now)
        return run

    def remove(self, key: str, now: float) -> bool:
        run = self.runs.pop(key, None)
        if run is None:
            return False
        link = run.link
        self._clear(run)
        if link is not None:
            self._by_link.pop(link, None)
            self.links.link_gone(link, now)  # what is in flight on it is reported upstream
            conn = link.session.conn
            if link.state.local is ACTIVE and link.session.state.local is ACTIVE and conn.state.local is ACTIVE:
                link.detach(closed=True)
                self.touched.touch(conn)  # (the engine)
        return True

    # --- events ----------------------------------------------------------------------------------

    def connection_opened(self, conn: ConnState, now: float) -> None:
        for run in self.runs.values():
            if run.conn is None:
                self._try_attach(run, now)

    def link_attached(self, link: Link, now: float) -> None:
        """The broker's attach for one of our links: a terminus makes it active; a null one is
        a refusal, whose detach follows (transport §2.6.3)."""
        run = self._by_link.get(link)
        if run is None or run.state != "attaching" or run.conn is None:
            return
        refused = link.remote_target is None if run.config.direction == "out" else link.remote_source is None
        if refused:
            return
        conn, config = run.conn, run.config
        if config.direction == "out":
            consumes = self.links.table.fallback_address(config.address) if config.fallback else config.address
            run.record = None if consumes is None else self.links.register_consumer(conn, link, consumes, now)
        else:
            run.record = self.links.register_producer(conn, link, config.address, now, from_fallback=config.fallback)
        if run.record is None:  # the address is not one of this router's: give up the link
            run.state, run.last_error = "failed", f"{run.config.address} is not an address of this router"
            self._by_link.pop(link, None)
            link.detach(closed=True)
            self.touched.touch(conn.engine)
            run.link = None
            return
        run.state, run.failures, run.retry_at, run.answer_by = "active", 0, None, None

    def link_detached(self, link: Link, error: Error | None, now: float) -> None:
        """The broker detached one of our links (Links has torn its record down already)."""
        run = self._by_link.pop(link, None)
        if run is None:
            return
        description = "the broker detached the link"
        if error is not None:
            description = f"{error.condition}: {error.description or ''}".rstrip(": ")
        self._failed(run, description, now)

    def session_ended(self, session: Session, now: float) -> None:
        for link in session.links:
            run = self._by_link.pop(link, None)
            if run is not None:
                self._failed(run, "the broker ended the session", now)
        for conn, ours in list(self._sessions.items()):
            if ours is session:
                del self._sessions[conn]

    def connection_gone(self, conn: ConnState, now: float, *, reattach: bool = True) -> None:
        self._sessions.pop(conn, None)
        for run in self.runs.values():
            if run.conn is conn:
                if run.link is not None:
                    self._by_link.pop(run.link, None)
                self._clear(run)
        # Another matching connection (a second listener connection) may take over at once.
        for run in self.runs.values() if reattach else ():
            if run.conn is None:
                self._try_attach(run, now)

    def tick(self, now: float) -> None:
        for run in self.runs.values():
            if run.state == "attaching" and run.answer_by is not None and run.answer_by <= now:
                self._unanswered(run, now)
            if run.retry_at is not None and run.retry_at <= now:
                run.retry_at = None
                conn = run.conn
                run.conn = None
                if conn is not None and run.matches(conn):
                    self._attach(run, conn, now)
                else:
                    self._try_attach(run, now)

    def next_deadline(self) -> float | None:
        deadlines = [run.retry_at for run in self.runs.values() if run.retry_at is not None]
        deadlines += [run.answer_by for run in self.runs.values() if run.state == "attaching" and run.answer_by is not None]
        return min(deadlines) if deadlines else None

    # --- attaching -------------------------------------------------------------------------------

    def _try_attach(self, run: AutoLinkRun, now: float) -> None:
        for conn in self.connections.values():
            if run.matches(conn):
                self._attach(run, conn, now)
                return

    def _loops(self, run: AutoLinkRun) -> bool:
        """An in and an out auto-link on one address that is no waypoint: a loop (unless the in
        one is a fallback's, which feeds regular destinations only)."""
        config = run.config
        if config.direction == "in" and config.fallback:
            return False
        opposite = "in" if config.direction == "out" else "out"
        if not any(o.config.address == config.address and o.config.direction == opposite
                   and not (opposite == "in" and o.config.fallback) for o in self.runs.values()):  # fmt: skip
            return False
        return self.links.table.egress_address(config.address) == config.address

    def _refusal(self, run: AutoLinkRun) -> str | None:
        """Why `run` must not attach now (it fails and is retried: a rule may change that)."""
        config = run.config
        if self._loops(run):
            return (f"auto-links in and out on {config.address!r}, which is no waypoint, would feed the queue's "
                    "output back into it (address rule waypoint: true)")  # fmt: skip
        if config.fallback and self.links.table.fallback_address(config.address) is None:
            return f"fallback: true, but no address rule with enable_fallback: true matches {config.address!r} here"
        return None

    def _attach(self, run: AutoLinkRun, conn: ConnState, now: float) -> None:
        engine = conn.engine
        if engine.state.local is not ACTIVE or engine.finished:
            return
        refusal = self._refusal(run)
        if refusal is not None:
            run.conn = conn
            self._failed(run, refusal, now)
            return
        session = self._sessions.get(conn)
        if session is None or session.state.local is not ACTIVE:
            session = engine.begin_session()
            self._sessions[conn] = session
        self._names += 1
        name = f"{self.router_id}.autolink.{self._names}"
        config = run.config
        if config.direction == "out":
            link = session.attach_sender(name, source=Source(address=config.address),
                                         target=Target(address=run.external_address))  # fmt: skip
        else:
            link = session.attach_receiver(name, source=Source(address=run.external_address),
                                           target=Target(address=config.address))  # fmt: skip
        link.context = run
        run.link, run.conn, run.record, run.state = link, conn, None, "attaching"
        run.answer_by = now + run.config.attach_timeout_s
        run.attaches += 1
        self._by_link[link] = run
        self.touched.touch(engine)

    def _unanswered(self, run: AutoLinkRun, now: float) -> None:
        """The broker never answered the attach (RabbitMQ 3 does not, for an address form it
        does not know): give the link up, and try again after the backoff."""
        link = run.link
        if link is not None:
            self._by_link.pop(link, None)
            conn = link.session.conn
            if link.state.local is ACTIVE and link.session.state.local is ACTIVE and conn.state.local is ACTIVE:
                link.detach(closed=True)
                self.touched.touch(conn)
        self._failed(run, f"the broker did not answer the attach in {run.config.attach_timeout_s:g} s", now)

    def _failed(self, run: AutoLinkRun, description: str, now: float) -> None:
        # run.conn is kept: the next attempt uses the same connection if it is still up then.
        run.state, run.last_error, run.link, run.record, run.answer_by = "failed", description, None, None, None
        run.failures += 1
        config = run.config
        run.retry_at = now + min(config.retry_max_s, config.retry_initial_s * 2.0 ** min(run.failures - 1, 32))

    def _clear(self, run: AutoLinkRun) -> None:
        if run.state in ("attaching", "active"):
            run.last_error = "the connection to the broker was lost"
        run.state = "inactive"
        run.conn, run.link, run.record, run.retry_at, run.answer_by = None, None, None, None, None
