"""Events the engine reports to its application, matched with `match`/`isinstance`.

Owns: the event types. Each names what the *peer* did (or what the engine decided about the
peer); the application answers by calling methods on the connection, sessions and links. And
TransferSink, what an application installs to take first frames as they are parsed instead.
Hot events (TransferReceived, DispositionReceived, FlowReceived) are plain slotted classes
rather than frozen dataclasses: frozen __init__ costs a setattr call per field per message.
Events that carry a Session or Link are plain classes too: those types are imported only for
type checking (they import this module), and a dataclass compiled by mypyc would need them at
run time.
Must not touch: engine state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mypy_extensions import i64, mypyc_attr

from .fastparse import tag_in
from .performatives import Attach, Begin, Error, Open

if TYPE_CHECKING:
    from .link import Link
    from .messaging import DeliveryState
    from .session import Session



@dataclass(frozen=True, slots=True, kw_only=True)
class Authenticated:
    """SASL finished successfully (server: the peer's identity; client: the server accepted)."""

    mechanism: str
    user: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthenticationFailed:
    """SASL failed; the connection ends without an AMQP open."""

    mechanism: str | None
    code: int
    description: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteOpen:
    open: Open


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteClose:
    error: Error | None


class RemoteBegin:
    """The peer began a session (it may be answering our begin: then `session.state.local` is
    ACTIVE)."""

    __slots__ = ("session", "begin")

    def __init__(self, *, session: Session, begin: Begin) -> None:
        self.session = session
        self.begin = begin

    def __repr__(self) -> str:
        return f"RemoteBegin({self.session!r})"


class RemoteEnd:
    __slots__ = ("session", "error")

    def __init__(self, *, session: Session, error: Error | None) -> None:
        self.session = session
        self.error = error

    def __repr__(self) -> str:
        return f"RemoteEnd({self.session!r}, error={self.error!r})"


class RemoteAttach:
    """The peer attached a link (it may be answering our attach: see `link.locally_attached`)."""

    __slots__ = ("link", "attach")

    def __init__(self, *, link: Link, attach: Attach) -> None:
        self.link = link
        self.attach = attach

    def __repr__(self) -> str:
        return f"RemoteAttach({self.link!r})"


class RemoteDetach:
    __slots__ = ("link", "closed", "error")

    def __init__(self, *, link: Link, closed: bool, error: Error | None) -> None:
        self.link = link
        self.closed = closed
        self.error = error

    def __repr__(self) -> str:
        return f"RemoteDetach({self.link!r}, closed={self.closed}, error={self.error!r})"


# _PER_FRAME: the per-frame events (flow, transfer, disposition) are not tracked by the cyclic
# collector (mypyc acyclic: cheaper to make and free, and not counted towards its collections).
# A cycle through an untracked object is never collected, so none may pass through them: their
# link or session reaches the connection, whose event list holds them only until events()
# hands them over, which every driver does after every receive_data (router/net/output.py
# _dispatch); nothing else keeps an event (the core and the client copy its fields).
@mypyc_attr(acyclic=True)  # untracked by the cyclic collector: see _PER_FRAME above
class FlowReceived:
    """The peer's flow changed a link's credit state (transport §2.6.7).

    On a sender link: credit granted or a drain request (read `link.credit`, `link.drain`).
    On a receiver link: the sender's view (`available`; `drained` when a drain completed).
    """

    __slots__ = ("link", "drained")

    def __init__(self, link: Link, drained: bool) -> None:
        self.link = link
        self.drained = drained

    def __repr__(self) -> str:
        return f"FlowReceived({self.link!r}, drained={self.drained})"


@mypyc_attr(acyclic=True)  # untracked by the cyclic collector: see _PER_FRAME above
class TransferReceived:
    """One transfer frame of a delivery on a receiver link (transport §2.7.5).

    A multi-frame delivery arrives as several events with `more=True` on all but the last; the
    last frame of an aborted delivery has `aborted=True` (discard what arrived). `payload` is
    this frame's part of the encoded message, never decoded by the engine: `bytes`, or for
    large frames a `memoryview` of the read it arrived in (keep it only briefly, or copy it).
    `source` is the bytes the frame was read in and `offset` where the payload starts there: a
    reader of a payload's first bytes needs no view sliced and copied (peek.peek_at).
    `delivery_tag` is sliced from `source` when first asked for (the router's anycast path
    never asks): keep an event only as long as its read may stay alive.
    """

    __slots__ = (
        "link", "delivery_id", "_tag", "_tag_at", "settled", "more", "aborted", "message_format",
        "state", "rcv_settle_mode", "first", "payload", "source", "offset",
    )  # fmt: skip

    def __init__(
        self,
        link: Link,
        delivery_id: int,
        delivery_tag: bytes | None,
        tag_at: i64,
        settled: bool,
        more: bool,
        aborted: bool,
        message_format: int,
        state: DeliveryState | None,
        rcv_settle_mode: int | None,
        first: bool,
        payload: bytes | memoryview,
        source: bytes,
        offset: i64,
    ) -> None:
        """`delivery_tag`: the tag, or None while it is still at `tag_at` in `source` (its
        vbin8 length byte just before)."""
        self.link = link
        self.delivery_id = delivery_id
        self._tag = delivery_tag
        self._tag_at = tag_at
        self.settled = settled
        self.more = more
        self.aborted = aborted
        self.message_format = message_format
        self.state = state
        self.rcv_settle_mode = rcv_settle_mode
        self.first = first
        self.payload = payload
        self.source = source
        self.offset = offset

    @property
    def delivery_tag(self) -> bytes:
        tag = self._tag
        if tag is None:
            tag = self._tag = tag_in(self.source, self._tag_at)
        return tag

    def __repr__(self) -> str:
        return (
            f"TransferReceived(delivery_id={self.delivery_id}, settled={self.settled}, "
            f"more={self.more}, aborted={self.aborted}, {len(self.payload)} bytes)"
        )


class TransferSink:
    """Takes the first frame of a delivery as the connection parses it, in place of its
    TransferReceived (Connection.transfer_sink): an event per message, made, queued, dispatched
    and freed, was ~440 instructions of the ~6,300 the router spends on one.

    The connection offers a frame only when no event of the same read waits before it, so that
    whoever handles the events sees everything in the order it arrived; only first frames not
    aborted are offered (the rest, and every frame the sink declines, become events). Whoever
    installs a sink must hand the connection's events on after every receive_data even when
    there are none but `Connection.sunk` says a frame was taken (router.net.output's dispatch):
    that call ends the batch the sunk frames began. A failure of the sink propagates out of
    receive_data."""

    def first_frame(
        self, link: Link, delivery_id: i64, settled: bool, more: bool, message_format: i64,
        payload: bytes | memoryview, source: bytes, offset: i64, now: float,
    ) -> bool:  # fmt: skip
        """The first frame of delivery `delivery_id` on receiver `link` (the fields as
        TransferReceived has them); False: not taken, the connection makes its event."""
        raise NotImplementedError


@mypyc_attr(acyclic=True)  # untracked by the cyclic collector: see _PER_FRAME above
class DispositionReceived:
    """The peer's disposition for deliveries first..last of `session` (transport §2.7.6).

    `role` is the peer's role: RECEIVER (True) means it concerns deliveries we sent.
    """

    __slots__ = ("session", "role", "first", "last", "settled", "state")

    def __init__(
        self, session: Session, role: bool, first: int, last: int, settled: bool, state: DeliveryState | None
    ) -> None:
        self.session = session
        self.role = role
        self.first = first
        self.last = last
        self.settled = settled
        self.state = state

    def __repr__(self) -> str:
        return (
            f"DispositionReceived(role={self.role}, {self.first}..{self.last}, "
            f"settled={self.settled}, state={self.state!r})"
        )


class WindowChanged:
    """The peer opened or shut its incoming window on a session whose `watch_window` is set
    (transport §2.5.6; read `session.remote_incoming_window`): its transfers wait until it opens."""

    __slots__ = ("session",)

    def __init__(self, session: Session) -> None:
        self.session = session

    def __repr__(self) -> str:
        return f"WindowChanged({self.session!r}, open={self.session.remote_incoming_window > 0})"


@dataclass(frozen=True, slots=True, kw_only=True)
class ProtocolViolation:
    """The peer broke the protocol; the engine already queued the close/end/detach carrying
    `condition` (scope says which: "connection", "session" or "link")."""

    condition: str
    description: str
    scope: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TransportClosed:
    """The byte stream ended (reported once, whatever ended the connection before). `clean`
    when both closes were exchanged before it did."""

    clean: bool


Event = (
    Authenticated | AuthenticationFailed | RemoteOpen | RemoteClose | RemoteBegin | RemoteEnd
    | RemoteAttach | RemoteDetach | FlowReceived | TransferReceived | DispositionReceived
    | WindowChanged | ProtocolViolation | TransportClosed
)  # fmt: skip
