"""A tiny AMQP 1.0 peer on our engine that keeps messages in memory queues, one per address.

It is a test double (and the engine demo's far end), NOT the router: the router never stores
messages. Clients attach senders and receivers to any address; a message sent to an address
waits in its queue until a receiver there has credit. Addresses starting with `reject/`,
`release/` or `modify/` answer with that outcome instead of queueing, so tests can see every
outcome. A receiver with `dynamic=true` gets a fresh `tmp/<n>` address.
Must not touch: anything outside tests and demos.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import trio

from ..amqp import errors as E
from ..amqp import events as ev
from ..amqp.connection import Connection, ConnectionConfig
from ..amqp.link import Link
from ..amqp.messaging import ACCEPTED, RELEASED, Modified, Rejected, Source, is_terminal
from ..amqp.peek import peek
from ..amqp.performatives import RECEIVER, SENDER, Error
from ..amqp.sasl import SaslServerConfig
from ..net.driver import ConnectionDriver

OFFERED = ("ANONYMOUS-RELAY",)


@dataclass
class PeerStats:
    received: int = 0
    sent: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    connections: int = 0


class QueuePeer:
    """Serve AMQP on a trio listener. `await peer.serve(listeners)` or use `start()`."""

    def __init__(
        self,
        *,
        container_id: str = "queue-peer",
        sasl: SaslServerConfig | None = SaslServerConfig(mechanisms=("ANONYMOUS",), allow_no_sasl=True),
        max_frame_size: int = 65536,
        idle_timeout_s: float | None = None,
    ) -> None:
        self.container_id = container_id
        self.sasl = sasl
        self.max_frame_size = max_frame_size
        self.idle_timeout_s = idle_timeout_s
        self.queues: dict[str, deque[tuple[bytes, bool]]] = {}
        self.receivers: dict[str, list[Link]] = {}
        self.stats = PeerStats()
        self.drivers: dict[Connection, ConnectionDriver] = {}
        self._partial: dict[Link, list[bytes | memoryview]] = {}
        self._dynamic = itertools.count()
        self._tags = itertools.count()

    async def serve(self, listeners: list[trio.SocketListener]) -> None:
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        engine = Connection(
            ConnectionConfig(
                container_id=self.container_id,
                server=True,
                max_frame_size=self.max_frame_size,
                idle_timeout_s=self.idle_timeout_s,
                sasl_server=self.sasl,
            )
        )
        driver = ConnectionDriver(stream, engine, lambda events: self._on_events(engine, events))
        self.drivers[engine] = driver
        self.stats.connections += 1
        try:
            await driver.run()
        finally:
            del self.drivers[engine]
            for links in self.receivers.values():
                links[:] = [link for link in links if link.session.conn is not engine]

    def _wake(self, engine: Connection) -> None:
        driver = self.drivers.get(engine)
        if driver is not None:
            driver.wake()

    def _on_events(self, engine: Connection, events: list[ev.Event]) -> None:
        for event in events:
            match event:
                case ev.RemoteOpen():
                    engine.open(offered_capabilities=OFFERED)
                case ev.RemoteBegin():
                    event.session.begin()
                case ev.RemoteAttach():
                    self._on_attach(event.link)
                case ev.FlowReceived():
                    if event.link.is_sender:
                        self._pump(event.link)
                case ev.TransferReceived():
                    self._on_transfer(event)
                case ev.DispositionReceived():
                    self._on_disposition(event)
                case ev.RemoteDetach():
                    self._forget(event.link)
                    if event.link.state.local.name == "ACTIVE":
                        event.link.detach(closed=event.closed)
                case ev.RemoteEnd():
                    for link in event.session.links:
                        self._forget(link)
                    if event.session.state.local.name == "ACTIVE":
                        event.session.end()
                case ev.RemoteClose():
                    engine.close()
                case _:
                    pass

    def _on_attach(self, link: Link) -> None:
        if link.state.local.name != "UNINIT":
            return
        if link.is_sender:  # the client receives from a queue
            source = link.remote_source
            address = getattr(source, "address", None)
            if getattr(source, "dynamic", False):
                address = f"tmp/{next(self._dynamic)}"
                source = Source(address=address, dynamic=True)
            if not address:
                link.reject(Error(condition=E.INVALID_FIELD, description="a receiver needs a source address"))
                return
            link.attach(source=source, target=link.remote_target)
            link.context = address
            self.receivers.setdefault(address, []).append(link)
        else:  # the client sends
            target = link.remote_target
            link.attach(source=link.remote_source, target=target)
            link.context = getattr(target, "address", None)
            link.flow(100)

    def _on_disposition(self, event: ev.DispositionReceived) -> None:
        """A receiver's outcome for deliveries we sent. In rcv-settle-mode second it comes
        unsettled and the receiver settles only after the sender has (transport §2.8.3,
        receiver-settle-mode): settle them, keeping the receiver's outcome."""
        if event.role is RECEIVER and not event.settled and is_terminal(event.state):
            event.session.disposition(
                SENDER, event.first, event.last, state=event.state, settled=True
            )
            self._wake(event.session.conn)

    def _forget(self, link: Link) -> None:
        links = self.receivers.get(link.context or "")
        if links and link in links:
            links.remove(link)
        self._partial.pop(link, None)

    def _on_transfer(self, event: ev.TransferReceived) -> None:
        link = event.link
        if event.aborted:
            self._partial.pop(link, None)
            return
        if event.more:
            self._partial.setdefault(link, []).append(event.payload)
            return
        payload = b"".join(self._partial.pop(link, []) + [event.payload])
        self.stats.received += 1
        address = link.context
        if address is None:  # anonymous relay: route by properties.to
            address = peek(payload).to
        state = self._outcome(address or "")
        if state is ACCEPTED:
            self.queues.setdefault(address or "", deque()).append((payload, event.settled))
        name = type(state).__name__.lower()
        self.stats.outcomes[name] = self.stats.outcomes.get(name, 0) + 1
        if not event.settled:
            link.dispose(event.delivery_id, state=state, settled=True)
        if link.credit < 50:
            link.flow(100)
        for receiver in list(self.receivers.get(address or "", [])):
            self._pump(receiver)

    @staticmethod
    def _outcome(address: str) -> Any:
        if address.startswith("reject/"):
            return Rejected(error=Error(condition=E.PRECONDITION_FAILED, description="rejected by test peer"))
        if address.startswith("release/"):
            return RELEASED
        if address.startswith("modify/"):
            return Modified(delivery_failed=True, undeliverable_here=True)
        return ACCEPTED

    def _pump(self, link: Link) -> None:
        """Send queued messages while the link has credit; then honour a drain."""
        queue = self.queues.get(link.context or "")
        while queue and link.credit > 0 and link.active:
            payload, _ = queue.popleft()
            link.send_transfer(str(next(self._tags)).encode(), payload, settled=link.snd_settle_mode == 1)
            self.stats.sent += 1
        if link.drain and link.credit > 0 and link.active:
            link.complete_drain()
        self._wake(link.session.conn)


async def start_peer(nursery: trio.Nursery, **kwargs: Any) -> tuple[QueuePeer, int]:
    """Start a QueuePeer on an ephemeral 127.0.0.1 port; return it and the port."""
    peer = QueuePeer(**kwargs)
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    nursery.start_soon(peer.serve, listeners)
    return peer, listeners[0].socket.getsockname()[1]


__all__ = ["QueuePeer", "PeerStats", "start_peer"]
