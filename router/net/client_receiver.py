"""The receiver links of the client API (see client.py; what links share is client_links.py's).

Owns: a receiver's deliveries (multi-frame reassembly, the buffer `receive()` reads), keeping
its credit topped up, its drain, and settlement in both receiver settle modes (transport
§2.6.12, §3.4 of messaging: in mode second the sender settles first).
Must not touch: the engine's protocol state beyond the Link commands.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from ..amqp.events import DispositionReceived, TransferReceived
from ..amqp.link import Link
from ..amqp.message import Message, decode_message
from ..amqp.messaging import ACCEPTED, RELEASED, Modified, Rejected
from ..amqp.performatives import RCV_SECOND, Error
from ..amqp.serial import serial_ids_in
from .client_links import LinkEndpoint
from .errors import ClientError, LinkDetached

if TYPE_CHECKING:
    from .client import Client


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


class Receiver(LinkEndpoint):
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
