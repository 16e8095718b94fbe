"""RouterHarness: a RouterCore and client engines wired back to back, no sockets, no tasks.

Each client is a plain engine (ours) with helpers to attach senders/receivers, send encoded
messages and collect deliveries and outcomes. `pump()` moves bytes both ways, feeds the
router's events to the core, and repeats until everything is quiet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from router.amqp import events as ev
from router.amqp.connection import Connection, ConnectionConfig
from router.amqp.link import Link
from router.amqp.message import Message, decode_message, encode_message
from router.amqp.messaging import DeliveryState, Source, Target
from router.amqp.performatives import RECEIVER
from router.amqp.serial import serial_range
from router.amqp.session import Session
from router.config.models import Listener, RouterConfig
from router.core.connections import new_engine
from router.core.router import RouterCore


@dataclass
class Received:
    link: Link
    delivery_id: int
    settled: bool
    payload: bytes

    @property
    def message(self) -> Message:
        return decode_message(self.payload)


@dataclass
class Client:
    name: str
    engine: Connection
    router_side: Connection
    session: Session | None = None
    events: list[ev.Event] = field(default_factory=list)
    received: dict[Link, list[Received]] = field(default_factory=dict)
    outcomes: dict[int, DeliveryState | None] = field(default_factory=dict)  # delivery-id -> state (our sends)
    settled: set[int] = field(default_factory=set)
    # What the router said about deliveries it sent us (role sender), by delivery-id.
    remote_states: dict[int, DeliveryState | None] = field(default_factory=dict)
    remote_settled: set[int] = field(default_factory=set)
    partial: dict[Link, list[bytes | memoryview]] = field(default_factory=dict)
    auto_accept: bool = True
    tags: int = 0

    def sender(self, address: str | None, **attach: Any) -> Link:
        assert self.session is not None
        return self.session.attach_sender(
            f"{self.name}-s{self.tags}-{address}", source=Source(address=None),
            target=Target(address=address), **attach,
        )  # fmt: skip

    def receiver(self, address: str | None, **attach: Any) -> Link:
        assert self.session is not None
        attach.setdefault("source", Source(address=address))
        self.tags += 1
        link = self.session.attach_receiver(f"{self.name}-r{self.tags}-{address}", **attach)
        self.received[link] = []
        return link

    def send(self, link: Link, message: Message | bytes, *, settled: bool = False) -> int:
        payload = message if isinstance(message, bytes) else encode_message(message)
        self.tags += 1
        return link.send_transfer(str(self.tags).encode(), payload, settled=settled)

    def bodies(self, link: Link) -> list[Any]:
        return [r.message.body_value for r in self.received.get(link, [])]

    def on_events(self, events: list[ev.Event]) -> None:
        self.events += events
        for event in events:
            if isinstance(event, ev.TransferReceived):
                chunks = self.partial.setdefault(event.link, [])
                if event.aborted:
                    chunks.clear()
                    continue
                chunks.append(event.payload)
                if event.more:
                    continue
                payload = b"".join(chunks)
                chunks.clear()
                self.received.setdefault(event.link, []).append(
                    Received(event.link, event.delivery_id, event.settled, payload)
                )
                if self.auto_accept and not event.settled:
                    from router.amqp.messaging import ACCEPTED

                    event.link.dispose(event.delivery_id, state=ACCEPTED, settled=True)
            elif isinstance(event, ev.DispositionReceived) and event.role is RECEIVER:
                for delivery_id in serial_range(event.first, event.last):
                    self.outcomes[delivery_id] = event.state
                    if event.settled:
                        self.settled.add(delivery_id)
            elif isinstance(event, ev.DispositionReceived):
                for delivery_id in serial_range(event.first, event.last):
                    self.remote_states[delivery_id] = event.state
                    if event.settled:
                        self.remote_settled.add(delivery_id)


class RouterHarness:
    def __init__(self, config: RouterConfig | None = None, now: float = 1_000_000.0) -> None:
        self.config = config or RouterConfig()
        self.core = RouterCore(self.config)
        self.clients: list[Client] = []
        self.now = now

    def connect(self, name: str = "client", listener: Listener | None = None, **cfg: Any) -> Client:
        listener = listener or self.config.listeners[0]
        router_side = new_engine(self.config, listener)
        self.core.accept(router_side, listener)
        engine = Connection(ConnectionConfig(container_id=name, **cfg))
        client = Client(name, engine, router_side)
        self.clients.append(client)
        engine.open()
        self.pump()
        client.session = engine.begin_session()
        self.pump()
        return client

    def pump(self, rounds: int = 10_000) -> None:
        for _ in range(rounds):
            moved = False
            for client in list(self.clients):
                out = client.engine.data_to_send()
                if out:
                    moved = True
                    client.router_side.receive_data(out, self.now)
                events = client.router_side.events()
                if events:
                    moved = True
                    self.handle(client, events)
            for client in list(self.clients):
                back = client.router_side.data_to_send()
                if back:
                    moved = True
                    client.engine.receive_data(back, self.now)
                events = client.engine.events()
                if events:
                    moved = True
                    client.on_events(events)
            self.core.take_touched()
            if not moved:
                return
        raise AssertionError("router harness never went quiet")

    def handle(self, client: Client, events: list[Any]) -> None:
        """The router side's events of `client` into the core (a subclass may end a client the
        core failed on, as the network layer does)."""
        self.core.handle(client.router_side, events, self.now)

    def disconnect(self, client: Client) -> None:
        """The client's TCP connection drops without a close."""
        client.router_side.receive_data(b"", self.now)
        self.core.handle(client.router_side, client.router_side.events(), self.now)
        self.clients.remove(client)
        self.pump()

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.core.tick(self.now)
        self.pump()
