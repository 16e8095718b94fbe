"""Links of the client API (see client.py): what a sender and a receiver share, and the sender.

Owns: per-link waiting for the peer's attach and detach and failing a link (LinkEndpoint, which
the receiver in client_receiver.py extends); the sender's waiting for credit and outcomes, its
drain, and its half of settlement in rcv-settle-mode second (transport §2.6.12).
Must not touch: the engine's protocol state beyond the Link commands.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import trio

from ..amqp.events import DispositionReceived
from ..amqp.link import Link
from ..amqp.message import Message, encode_message
from ..amqp.messaging import is_terminal
from ..amqp.serial import serial_ids_in
from .errors import ClientError

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


class LinkEndpoint:
    """What a sender and a receiver share: waiting for the peer's attach, failing, detaching."""

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


class Sender(LinkEndpoint):
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
