"""A small AMQP 1.0 client on our engine, for the project's CLI, demos and tests.

    async with connect("127.0.0.1", 5672) as client:
        sender = await client.open_sender("orders")
        outcome = await sender.send(Message.value("hello"))      # Accepted(), Rejected(...) ...
        receiver = await client.open_receiver("orders", credit=10)
        delivery = await receiver.receive()
        receiver.accept(delivery)

Owns: waiting for credit, outcomes and deliveries on top of the engine's events; reassembling
multi-frame deliveries; settlement in both receiver settle modes; turning the peer's refusals
and closes into exceptions (LinkDetached, ConnectionClosed, AuthenticationError).
Must not touch: protocol rules (the engine's), routing.
"""

from __future__ import annotations

import itertools
import ssl
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from ..amqp import events as ev
from ..amqp.connection import Connection, ConnectionConfig
from ..amqp.errors import NOT_IMPLEMENTED
from ..amqp.link import Link
from ..amqp.messaging import Source, Target
from ..amqp.performatives import RECEIVER, Error
from ..amqp.sasl import SaslClientConfig
from ..amqp.session import Session
from .client_links import Sender, SendTracker
from .client_receiver import Delivery, Receiver
from .driver import ConnectionDriver
from .errors import AuthenticationError, ClientError, ConnectionClosed, LinkDetached

__all__ = [
    "AuthenticationError", "Client", "ClientError", "ConnectionClosed", "Delivery",
    "LinkDetached", "Receiver", "Sender", "SendTracker", "connect",
]  # fmt: skip

SETTLE_MODES = {"unsettled": 0, "settled": 1, "mixed": 2}


class Client:
    """One connection with one session. Create it with `connect()`."""

    def __init__(self, engine: Connection, stream: trio.abc.Stream) -> None:
        self.engine = engine
        self.driver = ConnectionDriver(stream, engine, self._on_events)
        self.session: Session | None = None
        self._opened = trio.Event()
        self._begun = trio.Event()
        self._error: ClientError | None = None
        self._names = itertools.count()
        self._senders: dict[Link, Sender] = {}
        self._receivers: dict[Link, Receiver] = {}

    # --- public API ----------------------------------------------------------------------------

    @property
    def remote_open(self) -> Any:
        return self.engine.remote_open

    @property
    def offered_capabilities(self) -> tuple[str, ...]:
        remote = self.engine.remote_open
        return tuple(remote.offered_capabilities or ()) if remote else ()

    async def open_sender(
        self,
        address: str | None,
        *,
        settle: str = "mixed",
        name: str | None = None,
        target: Target | None = None,
        properties: dict[str, Any] | None = None,
    ) -> Sender:
        """Attach a sender to `address` (None: an anonymous sender routed by properties.to)."""
        session = self._require_session()
        link = session.attach_sender(
            name or f"sender-{next(self._names)}-{uuid.uuid4().hex[:8]}",
            source=Source(address=None),
            target=target if target is not None else Target(address=address),
            snd_settle_mode=SETTLE_MODES[settle],
            properties=properties,
        )
        sender = Sender(self, link)
        self._senders[link] = sender
        self.driver.wake()
        await sender.wait_attached()
        return sender

    async def open_receiver(
        self,
        address: str | None,
        *,
        credit: int = 100,
        dynamic: bool = False,
        second: bool = False,
        name: str | None = None,
        source: Source | None = None,
        max_message_size: int | None = None,
    ) -> Receiver:
        """Attach a receiver; `credit` is kept topped up (0: grant credit yourself with flow()).
        `dynamic=True` asks the peer for a temporary address (read `receiver.address`)."""
        session = self._require_session()
        link = session.attach_receiver(
            name or f"receiver-{next(self._names)}-{uuid.uuid4().hex[:8]}",
            source=source if source is not None else Source(address=address, dynamic=dynamic),
            target=Target(address=None),
            rcv_settle_mode=1 if second else 0,
            max_message_size=max_message_size,
        )
        receiver = Receiver(self, link, credit)
        self._receivers[link] = receiver
        self.driver.wake()
        await receiver.wait_attached()
        if credit:
            receiver.flow(credit)
        return receiver

    async def close(self, error: Error | None = None) -> None:
        """Close the connection and wait (briefly) for the peer's close."""
        if self.engine.state.local.name != "CLOSED":
            self.engine.close(error)
            self.driver.wake()
        # A peer that never opened (it does not speak AMQP, or never answered) will not
        # answer our close either: give it only a moment to take the bytes.
        opened = self._opened.is_set()
        with trio.move_on_after(5 if opened else 0.2):
            await self.driver.wait_closed()

    # --- plumbing ------------------------------------------------------------------------------

    def check(self) -> None:
        if self._error is not None:
            raise self._error

    def _require_session(self) -> Session:
        self.check()
        if self.session is None:
            raise ClientError(None, "not connected")
        return self.session

    def _fail_all(self, error: ClientError) -> None:
        if self._error is None:
            self._error = error
        self._opened.set()
        self._begun.set()
        for sender in self._senders.values():
            sender.fail(error)
        for receiver in self._receivers.values():
            receiver.fail(error)

    def _on_events(self, events: list[ev.Event]) -> None:
        for event in events:
            match event:
                case ev.TransferReceived():
                    receiver = self._receivers.get(event.link)
                    if receiver is not None:
                        receiver.on_transfer(event)
                case ev.DispositionReceived():
                    if event.role is RECEIVER:
                        for sender in self._senders.values():
                            sender.on_disposition(event)
                    else:
                        for receiver in self._receivers.values():
                            receiver.on_disposition(event)
                case ev.FlowReceived():
                    if event.link in self._senders:
                        self._senders[event.link].on_flow()
                    elif event.link in self._receivers:
                        self._receivers[event.link].on_flow(event.drained)
                case ev.RemoteAttach():
                    self._on_remote_attach(event.link)
                case ev.RemoteDetach():
                    self._on_remote_detach(event.link, event.error)
                case ev.RemoteOpen():
                    self._opened.set()
                case ev.RemoteBegin():
                    if event.session is self.session:
                        self._begun.set()
                    else:  # we never asked for this session
                        event.session.begin()
                        event.session.end(Error(condition=NOT_IMPLEMENTED))
                case ev.RemoteEnd():
                    self._fail_all(ConnectionClosed(event.error, "session ended by the peer"))
                case ev.RemoteClose():
                    self._fail_all(ConnectionClosed(event.error, "connection closed by the peer"))
                    self.engine.close()
                case ev.AuthenticationFailed():
                    self._fail_all(AuthenticationError(None, event.description))
                case ev.ProtocolViolation():
                    if event.scope == "connection":
                        self._fail_all(ConnectionClosed(None, f"{event.condition}: {event.description}"))
                case ev.TransportClosed():
                    self._fail_all(ConnectionClosed(None, "connection lost"))
                case _:
                    pass

    def _on_remote_attach(self, link: Link) -> None:
        endpoint = self._senders.get(link) or self._receivers.get(link)
        if endpoint is not None:
            endpoint.on_remote_attach()
        else:  # a link we did not ask for
            link.reject(Error(condition=NOT_IMPLEMENTED, description="this client accepts no links"))

    def _on_remote_detach(self, link: Link, error: Error | None) -> None:
        endpoint = self._senders.pop(link, None) or self._receivers.pop(link, None)
        if endpoint is not None:
            endpoint.fail(LinkDetached(error, f"link {link.name!r} detached by the peer"))
        if link.state.local.name == "ACTIVE":
            link.detach()


@asynccontextmanager
async def connect(
    host: str = "127.0.0.1",
    port: int = 5672,
    *,
    container_id: str | None = None,
    hostname: str | None = None,
    username: str | None = None,
    password: str | None = None,
    mechanisms: tuple[str, ...] | None = None,
    sasl: bool = True,
    max_frame_size: int = 65536,
    idle_timeout_s: float | None = None,
    ssl_context: ssl.SSLContext | None = None,
    open_timeout_s: float = 10.0,
    stream: trio.abc.Stream | None = None,
) -> AsyncIterator[Client]:
    """Connect, authenticate, open a connection and a session; close them on exit. `stream`
    (a connection made elsewhere, e.g. inside another network namespace) is used instead of
    dialling `host`:`port`; `host` is still the name SASL and TLS are told."""
    sasl_config = None
    if sasl:
        sasl_config = SaslClientConfig(
            mechanisms=mechanisms or ("SCRAM-SHA-256", "SCRAM-SHA-1", "PLAIN", "ANONYMOUS"),
            username=username,
            password=password,
            hostname=hostname or host,
        )
    engine = Connection(
        ConnectionConfig(
            container_id=container_id or f"client-{uuid.uuid4()}",
            max_frame_size=max_frame_size,
            idle_timeout_s=idle_timeout_s,
            sasl_client=sasl_config,
        )
    )
    if stream is None:
        stream = await trio.open_tcp_stream(host, port)
    if ssl_context is not None:
        stream = trio.SSLStream(stream, ssl_context, server_hostname=hostname or host)
    client = Client(engine, stream)
    try:
        async with _client_nursery(client, engine, hostname or host, open_timeout_s) as ready:
            yield ready
    except BaseExceptionGroup as group:
        # The driver's nursery wraps whatever the caller's block raised; hand it back as is.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


@asynccontextmanager
async def _client_nursery(
    client: Client, engine: Connection, hostname: str, open_timeout_s: float
) -> AsyncIterator[Client]:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.driver.run)
        try:
            with trio.fail_after(open_timeout_s):
                engine.open(hostname=hostname)
                client.driver.wake()
                await client._opened.wait()
                client.check()
                client.session = engine.begin_session()
                client.driver.wake()
                await client._begun.wait()
                client.check()
            yield client
        finally:
            with trio.CancelScope(shield=True):
                await client.close()
            nursery.cancel_scope.cancel()


