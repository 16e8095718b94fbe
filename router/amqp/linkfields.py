"""A link endpoint's state (transport §2.6): what link.py's Link, which is a LinkFields, keeps.

Owns: one link's fields as seen by both halves (our role, handles, termini, settle modes,
link-credit and delivery-count (transport §2.6.7), the delivery being streamed in or out, the
application's context), what is read off them (attached, active, the peer's termini), and the
checks that the link and its session may still send (the errors a command raises otherwise).
Must not touch: frames and the commands that send them (link.py), session windows, connection
framing, routing decisions.

Why a base class: the fields are declared once per link and read by every module of the engine;
the commands of link.py change them. Compiled, both classes are native and a Link's fields are
the base's: reading them costs what it did in one class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from mypy_extensions import i64

from .endpoints import ACTIVE, Halves
from .errors import LocalUsageError
from .performatives import RCV_FIRST, SENDER, SND_MIXED, Attach, Error

if TYPE_CHECKING:
    from .session import Session


# A max-message-size no message reaches (it would not fit in memory): kept as none. Clients that
# mean "no limit" send 2**64 - 1 as often as 0, and an int above 2**62 is boxed when compiled
# (every comparison with it the slow path) and does not fit a native int.
BEYOND_ANY: Final = 1 << 61


def size_limit(max_message_size: int | None) -> int:
    """A max-message-size (a ulong, transport §2.7.3) as a limit sizes are compared with: 0 for
    none (absent, 0, or beyond any message). The link's own (LinkFields.in_limit) and a
    consumer's as the router keeps it (router.core.sizelimits) are read by this one rule."""
    if max_message_size is None or max_message_size <= 0 or max_message_size >= BEYOND_ANY:
        return 0
    return int(max_message_size)


class LinkFields:
    """One link endpoint's state. `role` is OUR role: SENDER (False) or RECEIVER (True)."""

    __slots__ = (
        "session", "name", "role", "state", "local_handle", "remote_handle",
        "source", "target", "snd_settle_mode", "rcv_settle_mode", "max_message_size", "in_limit",
        "remote_attach", "remote_closed", "remote_error",
        "delivery_count", "credit", "drain", "available", "initial_delivery_count",
        "queued_deliveries", "in_delivery", "in_tag", "in_settled", "in_bytes",
        "out_delivery", "out_tag", "out_middle", "out_middle_tag_length", "out_id_prefix", "out_middle_id",
        "detach_on_oversize", "held_flow",
        "granted_limit", "context",
    )  # fmt: skip

    def __init__(self, session: Session, name: str, role: bool) -> None:
        # Counters and delivery-ids are native ints (i64): compiled, their arithmetic on every
        # transfer is plain machine operations (they are uint32 serials or byte counts).
        self.session = session
        self.name = name
        self.role = role
        self.state = Halves("link")
        self.local_handle: int | None = None
        self.remote_handle: int | None = None
        self.source: Any = None
        self.target: Any = None
        self.snd_settle_mode = SND_MIXED
        self.rcv_settle_mode = RCV_FIRST
        self.max_message_size: int | None = None
        # The same as a native int, 0 for none: what every incoming transfer is checked against
        # (an optional int is an object to unbox per frame). Set with it, in Link's constructor.
        self.in_limit: i64 = 0
        self.remote_attach: Attach | None = None
        self.remote_closed = False
        self.remote_error: Error | None = None
        self.delivery_count: i64 = 0
        self.credit: i64 = 0
        self.drain = False
        self.available: i64 = 0
        self.initial_delivery_count: i64 = 0
        self.queued_deliveries: i64 = 0  # sender: deliveries accepted from the app, not yet on the wire
        self.held_flow: i64 = 0  # sender: a flow of ours waits behind held transfers (sessionheld.py)
        self.in_delivery: i64 = -1  # receiver: delivery-id being streamed in, -1 when none
        self.in_tag = b""
        self.in_settled = False
        self.in_bytes: i64 = 0
        # sender: delivery-id being streamed out, -1 when none (an int, not Optional: mypyc
        # would box every delivery-id that passes through it)
        self.out_delivery: i64 = -1
        self.out_tag = b""
        # sender: the constant part of this link's common transfer frames (fastpath.transfer_middle)
        # for tags of out_middle_tag_length bytes; the handle and channel never change once set
        self.out_middle = b""
        self.out_middle_tag_length: i64 = -1
        # sender: out_middle followed by out_id_prefix, the session's id_prefix of the last own-
        # tagged transfer (one piece fewer to format per transfer; made again every 256 ids)
        self.out_id_prefix = b""
        self.out_middle_id = b""
        self.detach_on_oversize = True
        # receiver: the highest delivery-limit (delivery-count + link-credit) we ever granted
        self.granted_limit: int | None = None
        self.context: Any = None  # free for the application (the router hangs its state here)

    def __repr__(self) -> str:
        role = "receiver" if self.role else "sender"
        return f"Link({self.name!r}, {role}, handle={self.local_handle}, {self.state!r})"

    @property
    def is_sender(self) -> bool:
        return self.role is SENDER

    @property
    def locally_attached(self) -> bool:
        return self.state.local is ACTIVE

    @property
    def remotely_attached(self) -> bool:
        return self.state.remote is ACTIVE

    @property
    def active(self) -> bool:
        return self.state.local is ACTIVE and self.state.remote is ACTIVE

    @property
    def remote_source(self) -> Any:
        return self.remote_attach.source if self.remote_attach else None

    @property
    def remote_target(self) -> Any:
        return self.remote_attach.target if self.remote_attach else None

    def _require_attached(self) -> None:
        if self.state.local is not ACTIVE:
            raise LocalUsageError(f"link {self.name!r} is not attached")
        self._require_session()

    def _require_session(self) -> None:
        # Ending the session detached the link implicitly, and nothing follows our end or close
        # (transport §2.5.4 / §2.4.3): no more frames for this link.
        if self.session.state.local is not ACTIVE:
            raise LocalUsageError(f"the session of link {self.name!r} has ended")
        self.session.conn.check_not_closed()
