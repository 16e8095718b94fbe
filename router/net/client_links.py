"""Sender and receiver links of the client API (see client.py).

Owns: per-link waiting (attach, credit, outcomes, deliveries, drain), multi-frame reassembly,
and settlement for both receiver settle modes (transport §2.6.12, §3.4 of messaging).
Must not touch: the engine's protocol state beyond the Link commands.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from ..amqp.events import DispositionReceived, TransferReceived
from ..amqp.link import Link
from ..amqp.message import Message, decode_message, encode_message
from ..amqp.messaging import ACCEPTED, RELEASED, Modified, Rejected, is_terminal
from ..amqp.performatives import RCV_SECOND, Error
from ..amqp.serial import serial_ids_in
from .errors import ClientError, LinkDetached

if TYPE_CHECKING:
    from .client import Client


class SendTracker:
    """The fate of one sent delivery: `await tracker.wait()` returns its outcome."""

    __slots__ = ("delivery_id", "presettled", "state", "_done")

    def __init__(self, delivery_id: int, presettled: bool) -> None:
        self.delivery_id = delivery_id
        self.presettled = presettled
        self.state: Any = None
        self._done = trio.Event()
        if presettled:
            self._done.set()

    @property
    def settled(self) -> bool:
        return self._done.is_set()

    def finish(self, state: Any) -> None:
        self.state = state
        self._done.set()

    async def wait(self) -> Any:
        await self._done.wait()
        if isinstance(self.state, ClientError):
            raise self.state
        return self.state


class _Endpoint:
    def __init__(self, client: Client, link: Link) -> None:
        self.client = client
        self.link = link
        self._attached = trio.Event()
        self._detached = trio.Event()
        self.error: ClientError | None = None

    def on_remote_attach(self) -> None:
        # A refusal is an attach with a null terminus followed by a detach (transport §2.6.3):
        # wait for that detach to learn why.
        terminus = self.link.remote_target if self.link.is_sender else self.link.remote_source
        if terminus is not None:
            self._attached.set()

    def fail(self, error: ClientError) -> None:
        if self.error is None:
            self.error = error
        self._attached.set()
        self._detached.set()

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    async def wait_attached(self) -> None:
        await self._attached.wait()
        self.check()

    async def close(self) -> None:
        """Detach (closed=true) and wait for the peer's detach."""
        if self.link.state.local.name == "ACTIVE" and self.error is None:
            self.link.detach()
            self.client.driver.wake()
            with trio.move_on_after(5):
                await self._detached.wait()


class Sender(_Endpoint):
    def __init__(self, client: Client, link: Link) -> None:
        super().__init__(client, link)
        self._credit = trio.Event()
        self._waiting = 0  # start_send calls blocked on credit
        self._pending: dict[int, SendTracker] = {}
        self._tags = itertools.count()

    @property
    def unsettled(self) -> int:
        return len(self._pending)

    async def send(self, message: Message | bytes, *, presettled: bool = False) -> Any:
        """Send and wait for the outcome (None when presettled)."""
        tracker = await self.start_send(message, presettled=presettled)
        return await tracker.wait()

    async def start_send(
        self, message: Message | bytes, *, presettled: bool = False, tag: bytes | None = None
    ) -> SendTracker:
        """Send once credit allows; return a tracker for the outcome without waiting for it."""
        payload = message if isinstance(message, bytes) else encode_message(message)
        while self.link.credit <= 0:
            self.check()
            if self._credit.is_set():
                self._credit = trio.Event()  # one event for every send waiting on credit
            credit = self._credit
            self._waiting += 1
            try:
                await credit.wait()
            except BaseException:  # cancelled: a drain left for this send must not stay open
                self._waiting -= 1
                self._finish_drain()
                self.client.driver.wake()
                raise
            self._waiting -= 1
        self.check()
        delivery_id = self.link.send_transfer(
            tag if tag is not None else str(next(self._tags)).encode(),
            payload,
            settled=presettled or self.link.snd_settle_mode == 1,
        )
        tracker = SendTracker(delivery_id, presettled or self.link.snd_settle_mode == 1)
        if not tracker.presettled:
            self._pending[delivery_id] = tracker
        self._finish_drain()
        self.client.driver.wake()
        return tracker

    def on_flow(self) -> None:
        self._credit.set()
        self._finish_drain()

    def _finish_drain(self) -> None:
        """Answer a drain once no send waits for credit any more: the sends woken by the flow
        use the credit first, only the rest goes back (transport §2.6.7: the sender drains
        "after sending all available messages")."""
        if self.link.drain and self.link.credit > 0 and not self._waiting:
            self.link.complete_drain()

    def on_disposition(self, event: DispositionReceived) -> None:
        pending = self._pending
        if not pending:
            return
        for delivery_id in serial_ids_in(event.first, event.last, pending):
            tracker = pending.get(delivery_id)
            if tracker is None:
                continue
            if event.settled or is_terminal(event.state):
                del pending[delivery_id]
                if not event.settled:  # rcv-settle-mode second: we settle, then it does
                    self.link.dispose(delivery_id, state=event.state, settled=True)
                tracker.finish(event.state)
            else:
                tracker.state = event.state

    def fail(self, error: ClientError) -> None:
        super().fail(error)
        self._credit.set()
        for tracker in self._pending.values():
            tracker.finish(error)
        self._pending.clear()


@dataclass(slots=True)
class Delivery:
    """A complete received delivery; `payload` is the encoded message."""

    delivery_id: int
    tag: bytes
    settled: bool
    payload: bytes
    message_format: int = 0
    state: Any = field(default=None)

    @property
    def message(self) -> Message:
        return decode_message(self.payload)


class Receiver(_Endpoint):
    def __init__(self, client: Client, link: Link, credit_window: int) -> None:
        super().__init__(client, link)
        self._window = credit_window
        self._in, self._out = trio.open_memory_channel[Delivery](math.inf)
        self._partial: list[bytes | memoryview] = []
        self._drained = trio.Event()
        self._awaiting_settle: dict[int, Any] = {}

    @property
    def address(self) -> str | None:
        """The source address the peer attached (for a dynamic receiver, the one it made)."""
        source = self.link.remote_source
        return getattr(source, "address", None)

    @property
    def buffered(self) -> int:
        return self._out.statistics().current_buffer_used

    async def receive(self) -> Delivery:
        try:
            delivery = await self._out.receive()
        except trio.EndOfChannel:
            raise self.error or LinkDetached(None, "receiver closed") from None
        self._top_up()
        return delivery

    def _top_up(self) -> None:
        link = self.link
        if self._window and self.error is None and link.state.local.name == "ACTIVE":
            if link.credit + self.buffered <= self._window // 2:
                link.flow(self._window - self.buffered)
                self.client.driver.wake()

    def flow(self, credit: int) -> None:
        self.link.flow(credit)
        self.client.driver.wake()

    async def drain(self) -> None:
        """Ask the sender to use or give back all credit; return when it has."""
        self.check()
        if self.link.credit == 0:
            return
        self._drained = trio.Event()
        self.link.flow(self.link.credit, drain=True)
        self.client.driver.wake()
        await self._drained.wait()
        self.check()

    def on_flow(self, drained: bool) -> None:
        if drained:
            self._drained.set()

    def on_transfer(self, event: TransferReceived) -> None:
        if event.aborted:
            self._partial.clear()
            return
        if event.more:
            self._partial.append(event.payload)
            return
        if self._partial:
            self._partial.append(event.payload)
            payload = b"".join(self._partial)
            self._partial.clear()
        else:
            payload = bytes(event.payload)
        self._in.send_nowait(
            Delivery(event.delivery_id, event.delivery_tag, event.settled, payload,
                     event.message_format, event.state)  # fmt: skip
        )

    def settle(self, delivery: Delivery, state: Any) -> None:
        """Send the outcome; in rcv-settle-mode second wait for the sender to settle first."""
        if delivery.settled:
            return
        delivery.state = state
        remote = self.link.remote_attach
        if remote is not None and remote.rcv_settle_mode == RCV_SECOND:
            self._awaiting_settle[delivery.delivery_id] = state
            self.link.dispose(delivery.delivery_id, state=state, settled=False)
        else:
            self.link.dispose(delivery.delivery_id, state=state, settled=True)
        delivery.settled = True
        self.client.driver.wake()

    def accept(self, delivery: Delivery) -> None:
        self.settle(delivery, ACCEPTED)

    def release(self, delivery: Delivery) -> None:
        self.settle(delivery, RELEASED)

    def reject(self, delivery: Delivery, condition: str, description: str | None = None) -> None:
        self.settle(delivery, Rejected(error=Error(condition=condition, description=description)))

    def modify(
        self, delivery: Delivery, *, delivery_failed: bool = True,
        undeliverable_here: bool = False, annotations: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        self.settle(
            delivery,
            Modified(delivery_failed=delivery_failed, undeliverable_here=undeliverable_here,
                     message_annotations=annotations),  # fmt: skip
        )

    def on_disposition(self, event: DispositionReceived) -> None:
        if not self._awaiting_settle or not event.settled:
            return
        for delivery_id in serial_ids_in(event.first, event.last, self._awaiting_settle):
            state = self._awaiting_settle.pop(delivery_id, None)
            if state is not None:
                self.link.dispose(delivery_id, state=state, settled=True)
        self.client.driver.wake()

    def fail(self, error: ClientError) -> None:
        super().fail(error)
        self._drained.set()
        self._in.close()
