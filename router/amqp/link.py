"""Link endpoints (transport §2.6): attach/detach, credit and delivery-count, drain, sending.

Owns: the application's commands on a link: attach (first or answering the peer's), answer,
reject, detach, flow (credit and drain, transport §2.6.7), complete_drain, set_available,
send_transfer, abort, dispose. The link's fields and the checks of them are linkfields.py's
(a Link is a LinkFields). Frames go out through the session's writers (sessionout.py), which own
windows and ordering.
Must not touch: session windows, connection framing, routing decisions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mypy_extensions import i64

from .endpoints import ACTIVE, CLOSED, UNINIT, Action, Input
from .errors import LocalUsageError
from .performatives import (
    RCV_FIRST,
    RCV_MODES,
    RCV_SECOND,
    RECEIVER,
    SENDER,
    SND_MIXED,
    SND_MODES,
    SND_SETTLED,
    SND_UNSETTLED,
    Attach,
    Detach,
    Error,
    Fields,
    Symbols,
)
from .linkfields import LinkFields, size_limit
from .serial import serial_add, serial_lt
from .sessionout import write_control, write_link_flow, write_transfer

if TYPE_CHECKING:
    from .messaging import DeliveryState


class Link(LinkFields):
    """One link endpoint and the application's commands on it (the fields: linkfields.py)."""

    __slots__ = ()

    def attach(
        self,
        *,
        source: Any = None,
        target: Any = None,
        snd_settle_mode: int | None = None,
        rcv_settle_mode: int | None = None,
        max_message_size: int | None = None,
        initial_delivery_count: int = 0,
        offered_capabilities: Symbols | None = None,
        desired_capabilities: Symbols | None = None,
        properties: Fields | None = None,
    ) -> None:
        """Send our attach (transport §2.7.3), either first or answering the peer's."""
        self.session.conn.check_not_closed()
        self.state.local_input(Input.OPEN)
        remote = self.remote_attach
        if snd_settle_mode is None:
            # Answering: a responder normally mirrors the initiator's settle modes; a mode that
            # does not exist (transport §2.8.2, §2.8.3) is not echoed (the router refuses it).
            snd_settle_mode = remote.snd_settle_mode if remote and remote.snd_settle_mode in SND_MODES else SND_MIXED
        if rcv_settle_mode is None:
            rcv_settle_mode = remote.rcv_settle_mode if remote and remote.rcv_settle_mode in RCV_MODES else RCV_FIRST
        self.source, self.target = source, target
        self.snd_settle_mode, self.rcv_settle_mode = snd_settle_mode, rcv_settle_mode
        self.max_message_size = max_message_size
        self.in_limit = size_limit(max_message_size)
        try:
            self.local_handle = self.session.allocate_handle(self)
            self.out_middle_tag_length = -1  # a new handle: transfer_middle again
        except LocalUsageError:
            self.state.local = UNINIT  # nothing was announced: the link can still be refused
            raise
        if self.role is SENDER:
            self.delivery_count = self.initial_delivery_count = initial_delivery_count
        attach = Attach(
            name=self.name,
            handle=self.local_handle,
            role=self.role,
            snd_settle_mode=snd_settle_mode,
            rcv_settle_mode=rcv_settle_mode,
            source=source,
            target=target,
            initial_delivery_count=initial_delivery_count if self.role is SENDER else None,
            max_message_size=max_message_size,
            offered_capabilities=offered_capabilities,
            desired_capabilities=desired_capabilities,
            properties=properties,
        )
        try:
            write_control(self.session, attach, ordered=False)
        except LocalUsageError:  # e.g. the attach does not fit the peer's max-frame-size
            self.session.free_handle(self)
            self.state.local = UNINIT
            raise

    def detach(self, *, closed: bool = True, error: Error | None = None) -> None:
        """Send our detach (transport §2.7.7). Closing a link we never attached first sends an
        attach with null termini, as a refusal must (transport §2.6.3)."""
        self.session.conn.check_not_closed()
        action = self.state.local_input(Input.CLOSE)
        if action is Action.SEND_OPEN_THEN_CLOSE:
            self.state.local = UNINIT
            self.attach(source=None, target=None)
            self.state.local = CLOSED
        if self.out_delivery >= 0:
            self.abort()
        assert self.local_handle is not None
        write_control(
            self.session, Detach(handle=self.local_handle, closed=closed, error=error), ordered=True
        )
        self.session.link_locally_detached(self)

    def answer(self, **attach: Any) -> bool:
        """Answer the peer's attach with ours (arguments as attach). When ours cannot be sent,
        because it would exceed the peer's max-frame-size (it echoes the peer's termini, which
        may be as large as our own frame limit) or no handle is free, refuse the link instead
        (reject: null termini, then a detach naming why) and return False."""
        try:
            self.attach(**attach)
        except LocalUsageError as exc:
            if self.state.local is not UNINIT:
                raise  # not a refusal case: the link was answered or closed before
            self.reject(Error(condition=exc.condition, description=f"cannot answer the attach: {exc}"))
            return False
        return True

    def reject(self, error: Error) -> None:
        """Refuse a link the peer attached: null-terminus attach, then detach with `error`.
        With no handle left even for that (the peer's handle-max, transport §2.7.2), the link
        cannot be answered at all: the session ends with the error."""
        if self.state.local is UNINIT:
            try:
                self.attach(source=None, target=None)
            except LocalUsageError:
                if self.session.state.local is ACTIVE:
                    self.session.end(error)
                return
        self.detach(closed=True, error=error)

    def flow(self, credit: int, *, drain: bool = False, echo: bool = False) -> None:
        """Receiver: grant `credit` (absolute link-credit, transport §2.6.7), optionally drain."""
        if self.role is not RECEIVER:
            raise LocalUsageError("only a receiver link grants credit")
        self._require_attached()
        if not 0 <= credit <= 0xFFFFFFFF:
            raise LocalUsageError(f"credit out of range: {credit}")
        self.credit = credit
        self.drain = drain
        limit = serial_add(self.delivery_count, credit)
        if self.granted_limit is None or serial_lt(self.granted_limit, limit):
            self.granted_limit = limit
        write_link_flow(self.session, self, echo)

    def complete_drain(self) -> None:
        """Sender: answer a drain request after sending what we had, consuming all credit by
        advancing delivery-count (transport §2.6.7)."""
        if self.role is not SENDER:
            raise LocalUsageError("only a sender link completes a drain")
        self._require_attached()
        self.delivery_count = serial_add(self.delivery_count, self.credit)
        self.credit = 0
        write_link_flow(self.session, self, False)

    def set_available(self, available: int) -> None:
        """Sender: tell the receiver how many messages wait to be sent (flow.available)."""
        if self.role is not SENDER:
            raise LocalUsageError("only a sender link reports available")
        self._require_attached()  # a flow names our handle: only after our attach
        self.available = available
        write_link_flow(self.session, self, False)

    def send_transfer(
        self,
        tag: bytes | None,
        payload: bytes | memoryview,
        *,
        settled: bool = False,
        more: bool = False,
        message_format: i64 = 0,
        state: DeliveryState | None = None,
        rcv_settle_mode: int | None = None,
    ) -> i64:
        """Send (part of) a delivery and return its delivery-id.

        The first call for a delivery consumes one credit; with `more=True` the delivery stays
        open and later calls append to it (cut-through streaming). A payload larger than the
        peer's max-frame-size is split into frames here. `tag` None: the delivery-id's four
        bytes are its tag, made once for both fields (a delivery-id is unique among the
        session's unsettled deliveries, so the tag is among the link's, transport §2.6.12).
        `rcv_settle_mode`: the transfer's own (transport §2.7.5): first, or second where the
        receiver attached second; None (the common case) leaves it to the link's.
        """
        if rcv_settle_mode is not None:
            self._check_transfer_settle_mode(rcv_settle_mode)
        session = self.session
        if (
            self.role is not SENDER or self.state.local is not ACTIVE
            or session.state.local is not ACTIVE or session.conn.state.local is not ACTIVE
        ):  # fmt: skip
            if self.role is not SENDER:
                raise LocalUsageError("cannot send on a receiver link")
            self._require_attached()  # raises the precise error
        if self.snd_settle_mode == SND_SETTLED:
            settled = True
        elif self.snd_settle_mode == SND_UNSETTLED and settled:
            raise LocalUsageError("link snd-settle-mode is unsettled: cannot send presettled")
        delivery_id = self.out_delivery
        if delivery_id < 0:
            if self.credit <= 0:
                raise LocalUsageError(f"no link credit on {self.name!r}")
            self.credit -= 1
            self.delivery_count = (self.delivery_count + 1) & 0xFFFFFFFF  # serial (§2.8.10)
            delivery_id = session.next_delivery_id()
            own_tag = tag is None
            if tag is None:
                # its delivery-id's four bytes (written without joining them, write_transfer);
                # kept as bytes only for the frames that follow
                tag = session.id_bytes(delivery_id) if more else b""
            self.out_tag = tag
            first = True
        else:
            tag = self.out_tag
            own_tag = False
            first = False
        # (an if, not a conditional expression: mixing i64 and an int literal boxes, compiled)
        if more:
            self.out_delivery = delivery_id
        else:
            self.out_delivery = -1
        write_transfer(
            session, self, delivery_id, tag, payload, settled, more, message_format, state, first,
            False, own_tag, rcv_settle_mode,
        )  # fmt: skip
        return delivery_id

    def _check_transfer_settle_mode(self, mode: int) -> None:
        remote = self.remote_attach
        if mode == RCV_FIRST or (mode == RCV_SECOND and remote is not None and remote.rcv_settle_mode == RCV_SECOND):
            return
        raise LocalUsageError(
            f"transfer rcv-settle-mode {mode}: first (0) only, or second (1) where the receiver attached "
            "second (transport 2.7.5)"
        )

    def abort(self) -> None:
        """Abort the delivery being streamed out (transport §2.6.12): the receiver discards it."""
        delivery_id = self.out_delivery
        if delivery_id < 0:
            raise LocalUsageError("no delivery in progress to abort")
        self._require_session()
        self.out_delivery = -1
        write_transfer(
            self.session, self, delivery_id, self.out_tag, b"", True, False, 0, None, False, aborted=True
        )

    def dispose(
        self, first: int, last: int | None = None, *, state: DeliveryState | None = None, settled: bool = True
    ) -> None:
        """Send a disposition for deliveries first..last of this link's session."""
        self.session.disposition(self.role, first, last, state=state, settled=settled)
