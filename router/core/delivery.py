"""Records of deliveries in flight through the router: the only per-message state it keeps.

Owns: Forward (one incoming delivery, linked to its outgoing delivery for anycast, or to its
copies for multicast), Copy (one multicast copy), Meta (what routers say about a delivery that
crosses the mesh: router.core.annotations reads and writes it) and SessionMaps (per session: the
deliveries received on it awaiting settlement, and the ones sent on it, by delivery-id).
A Forward holds the message's frames only while it cannot be sent yet (waiting for consumer
credit) or while a multicast copy still needs them; once sent, only ids remain.
Must not touch: engine state, routing decisions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mypy_extensions import i64

from ..amqp.msgfields import MessageFields
from ..amqp.peek import RoutingView
from ..amqp.session import Session
from .deliverymap import DeliveryMap

Payload = bytes | memoryview

if TYPE_CHECKING:
    from .addressentry import AddressEntry
    from .annotparse import Record
    from .links import InLink, OutLink


class Forward:
    __slots__ = (
        "in_link", "in_id", "in_session", "presettled", "first", "rest", "complete", "size", "entry",
        "out", "out_id", "copies", "remaining", "best", "outcome_sent", "expiry", "done",
        "message_format", "state", "arrived", "view", "meta", "rframe", "holds_slot", "fields",
        "arrived_at", "sent_at", "hop", "waiting", "settles_first",
    )  # fmt: skip

    def __init__(
        self, in_link: InLink | None, in_id: i64, presettled: bool, payload: Payload, size: i64,
        complete: bool, entry: AddressEntry, message_format: i64,
    ) -> None:  # fmt: skip
        """A delivery whose first frame is `payload`, of `size` bytes (its length: the caller
        has it, where len() of a bytes-or-view is a generic call)."""
        # None once the producer is gone or settled first, or for a message the router itself
        # sends (an in-process endpoint's reply).
        self.in_link: InLink | None = in_link
        # Ids, sizes and counts are native ints (i64): compiled, set and read with no reference
        # counting.
        self.in_id = in_id
        self.in_session: Session | None = in_link.link.session if in_link is not None else None
        self.presettled = presettled
        # The frames while they may still be needed (`first` None once they are not): bytes, or
        # memoryviews of the reads they came in (copied to bytes as soon as the delivery has to
        # wait, so no read stays pinned). The first apart from those after it: most deliveries
        # are one frame, and a list per delivery was ~180 instructions of each (all_frames()).
        self.first: Payload | None = payload
        self.rest: list[Payload] | None = None
        self.complete = complete
        self.size = size  # bytes held
        self.arrived = self.size  # bytes received so far (for max-message-size)
        self.entry = entry
        self.out: OutLink | None = None  # anycast: the consumer link it went to
        self.out_id: i64 = -1
        self.copies: list[Copy] | None = None  # multicast
        self.remaining: i64 = 0  # multicast copies without an outcome yet
        self.best: i64 = -1  # multicast: rank of the strongest outcome so far
        self.outcome_sent = False  # the producer has been told (rcv-settle-mode second waits)
        self.expiry: float | None = None  # the core's `now` (monotonic) at expiry, while waiting to be sent
        self.done = False  # finished: outcome relayed, released, expired or aborted
        self.message_format = message_format
        self.state: Any = None  # the outcome told to the producer (multicast: the strongest)
        # The first frame's routing view (where its annotations are, its header's ttl), kept for
        # the mesh and, while it waits, for its reduced ttl (router.core.ttl).
        self.view: RoutingView | None = None
        # Router annotations: set when it came from another router or goes to one.
        self.meta: Meta | None = None
        self.rframe: Payload | None = None  # multicast: the first frame for other routers
        # It counts against its producer's credit window (InLink.held) until it is handed to a
        # local consumer or gets its outcome.
        self.holds_slot = False
        # What consumers' filters read of it (router.core.filtering), once one has asked.
        self.fields: MessageFields | None = None
        # Flow records only (router.flow): the core's `now` at its first frame and when it was
        # sent on (0.0: not yet), and its trace id when a hop record follows it.
        self.arrived_at = 0.0
        self.sent_at = 0.0
        self.hop: str | None = None
        # Its bytes count in the bounds (router.core.bounds): it waits for credit. Set and
        # cleared only by Waiting._wait_bytes, so that they leave the bounds once, and only if
        # they were counted (an abort cannot otherwise tell a waiting delivery from one whose
        # routing never finished, or one an in-process endpoint is collecting).
        self.waiting = False
        # Its producer's transfer asked rcv-settle-mode first on a link attached second
        # (transport §2.7.5): settled to the producer with its outcome, as on a first link.
        self.settles_first = False

    def __repr__(self) -> str:
        return f"Forward(in={self.in_id}, out={self.out_id}, done={self.done})"

    def all_frames(self) -> list[Payload] | None:
        """The frames kept, in order (a new list), or None when they are no longer kept."""
        first = self.first
        if first is None:
            return None
        rest = self.rest
        return [first] if rest is None else [first, *rest]

    def add_frame(self, payload: Payload) -> None:
        """A frame after the first (kept: the caller has checked `first`)."""
        rest = self.rest
        if rest is None:
            self.rest = [payload]
        else:
            rest.append(payload)

    def drop_frames(self) -> None:
        """The frames are not needed again."""
        self.first = None
        self.rest = None


class Meta:
    """The routing metadata of one delivery that may cross routers.

    `span`/`insert_at` locate the message-annotations section in the delivery's first frame as
    it is held now (`raw`: still with the router annotations it arrived with)."""

    __slots__ = ("to", "explicit_to", "ingress", "trace", "span", "insert_at", "raw", "came_from", "kept", "record",
                 "flow_trace")

    def __init__(
        self, to: str | None, explicit_to: bool, ingress: str | None, trace: tuple[str, ...],
        span: tuple[int, int] | None, insert_at: int, raw: bool, came_from: str | None = None,
    ) -> None:  # fmt: skip
        self.to = to
        self.explicit_to = explicit_to  # `to` travels as x-opt-qd.to (it is not properties.to)
        self.ingress = ingress  # None: this router (the message entered the mesh here)
        self.trace = trace
        self.span = span
        self.insert_at = insert_at
        self.raw = raw
        self.came_from = came_from  # the neighbour router it arrived from
        # The encoded entries of the annotations that are not router annotations (the client's
        # own), once known: rewriting then needs no second scan.
        self.kept: list[bytes] | None = None
        # What its annotations said when it came from another router (annotparse.Record): the
        # sections for the next router and for consumers are built once per distinct record.
        self.record: Record | None = None
        self.flow_trace: str | None = None  # x-opt-qd.flow-trace: the trace id of its hop records

    def __repr__(self) -> str:
        return f"Meta(to={self.to!r}, ingress={self.ingress!r}, trace={self.trace!r})"


class Copy:
    """One multicast copy of a Forward, to one consumer link."""

    __slots__ = ("forward", "out", "out_id", "sent_frames", "done", "sent_at")

    def __init__(self, forward: Forward, out: OutLink) -> None:
        self.sent_at = 0.0  # flow records: the core's `now` when it was sent (0.0: not yet)
        self.forward = forward
        self.out = out
        self.out_id: i64 = -1
        self.sent_frames = 0  # how many of the forward's frames went out (streaming)
        self.done = False


class SessionMaps:
    """Per session (hung on `session.context`): deliveries by delivery-id, each direction."""

    __slots__ = ("inbound", "outbound", "routed", "dispositions", "held_bytes", "shut_above")

    def __init__(self) -> None:
        self.inbound = DeliveryMap()  # Forwards received here, outcome not yet settled upstream
        self.outbound = DeliveryMap()  # sent here (Forward or Copy), not yet settled
        # Deliveries of link-routed links on this session (router.core.linkrelay.RoutedMaps);
        # None on a session that never carried one.
        self.routed: Any = None
        # The dispositions the router owes on this session, one DispositionBatch per role and
        # settled flag (router.core.dispositions), reused batch after batch; None until one.
        self.dispositions: list[Any] | None = None
        # A peer router's priority band (router.core.bandwindow): bytes of frames that came on
        # this session and wait in this router for a blocked consumer, and how many shut its
        # incoming window (0: a session that is never shut; -1: the control link's).
        self.held_bytes = 0
        self.shut_above = 0


def copies_out(fwd: Forward) -> bool:
    """Every copy of multicast `fwd` is out or failed: its frames are not needed again. (A loop:
    any() over a generator made an object per delivery.)"""
    copies = fwd.copies
    if copies is not None:
        for copy in copies:
            if copy.sent_frames == 0 and not copy.done:
                return False
    return True


def unpin(fwd: Forward) -> None:
    """`fwd` is about to wait: it must not pin the reads it came in, so its frames that are views
    of them become bytes (a new list only when one is: most small messages never were views)."""
    first = fwd.first
    if first is None:
        return
    if type(first) is not bytes:
        fwd.first = bytes(first)
    rest = fwd.rest
    if rest is not None:
        for frame in rest:
            if type(frame) is not bytes:
                fwd.rest = [f if type(f) is bytes else bytes(f) for f in rest]
                return


def forget_inbound(fwd: Forward) -> None:
    """Drop `fwd` from its producer session's map of deliveries awaiting settlement."""
    session = fwd.in_session
    if session is not None:
        maps = session.context
        if isinstance(maps, SessionMaps):
            maps.inbound.pop(fwd.in_id)


def maps_of(session: Session) -> SessionMaps:
    maps = session.context
    if maps is None:
        maps = session.context = SessionMaps()
    assert isinstance(maps, SessionMaps)
    return maps
