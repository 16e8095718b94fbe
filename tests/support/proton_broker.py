"""A small broker-like AMQP 1.0 server on Proton's reactor (python-qpid-proton), for testing our
client against a third-party implementation.

One queue per address. A message sent to an address waits in its queue until a receiver attached
there has credit. Like router.testing.peer.QueuePeer, addresses starting with `reject/`,
`release/` or `modify/` answer that outcome instead of queueing (the rejection carries
REJECT_CONDITION / REJECT_DESCRIPTION, the modification MODIFY_ANNOTATIONS), and messages sent
out of a `presettled/` address go presettled. Senders honour drain: what is queued goes out, the
rest of the credit is handed back. A dynamic source gets `dynamic/<n>`. The answering attach
mirrors the client's settle modes, so rcv-settle-mode second works end to end.

Links the client sends on get `credit` at once and more as messages arrive, except those to a
`held/` address: they get credit only when the same connection sends a message to `control`
whose body is {"grant": <address>, "credit": <n>, "drain": <bool>}.

The handler runs on the container's thread; it records what it saw (messages with their settled
flag, the outcomes our receivers sent, drains) under a lock, and `wait_for` lets another thread
wait for a condition on those records.

    with ProtonBroker.running(max_frame_size=512) as broker:
        ... connect to 127.0.0.1:broker.port ...
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from proton import Condition, Delivery, Endpoint, Message, symbol
from proton.handlers import MessagingHandler
from proton.reactor import Container

from .interop import THREAD_PREFIX, run_container

REJECT_CONDITION = "amqp:precondition-failed"
REJECT_DESCRIPTION = "rejected by the proton broker: queue r\u00e9serv\u00e9e"  # non-ASCII on purpose
MODIFY_ANNOTATIONS = {symbol("x-opt-reason"): "retry later", symbol("x-opt-attempts"): 3}


@dataclass
class Arrival:
    """A complete message the broker received."""

    address: str | None
    message: Message
    settled: bool  # the sender presettled it (remote settled when it arrived)
    body: Any


@dataclass
class OutcomeSeen:
    """The receiving client's disposition for a message the broker sent."""

    address: str | None
    state: int  # proton.Delivery.ACCEPTED ...
    remote_settled: bool  # False when the receiver is in rcv-settle-mode second
    condition: str | None = None
    description: str | None = None
    failed: bool | None = None
    undeliverable: bool | None = None
    annotations: dict[Any, Any] | None = None


@dataclass
class DrainSeen:
    address: str | None
    sent_before_drain: int  # deliveries sent on the link when the drain was answered
    credit_returned: int


@dataclass
class ConnectionSeen:
    remote_container: str | None
    remote_idle_timeout_s: float
    remote_max_frame_size: int
    user: str | None


class ProtonBroker(MessagingHandler):
    def __init__(
        self,
        *,
        max_frame_size: int | None = None,
        idle_timeout_s: float | None = None,
        sasl_mechanisms: str = "ANONYMOUS",
        credit: int = 100,
        session_capacity: int | None = None,
    ) -> None:
        super().__init__(prefetch=0, auto_accept=False, auto_settle=False)
        self.credit = credit
        self.max_frame_size = max_frame_size
        self.idle_timeout_s = idle_timeout_s
        self.sasl_mechanisms = sasl_mechanisms
        self.session_capacity = session_capacity
        self.port = 0
        self.lock = threading.Condition()
        # Shared with the test thread: read under `lock`.
        self.arrivals: list[Arrival] = []
        self.outcomes: list[OutcomeSeen] = []
        self.drains: list[DrainSeen] = []
        self.credit_returned_by_clients = 0  # our senders answering a drain of theirs
        self.connections_seen: list[ConnectionSeen] = []
        self.transport_errors: list[str] = []
        self.closed_connections = 0
        # Container-thread state.
        self.queues: dict[str, deque[Message]] = {}
        self.senders: dict[str, list[Any]] = {}
        self.sent: dict[Any, int] = {}
        self.connections: list[Any] = []
        self.acceptor: Any = None
        self._dynamic = itertools.count()

    # --- running it ------------------------------------------------------------------------------

    @classmethod
    @contextmanager
    def running(cls, *, timeout_s: float = 60.0, **kwargs: Any) -> Iterator[ProtonBroker]:
        """Listen on an ephemeral 127.0.0.1 port, serve on a thread, stop and join on exit."""
        broker = cls(**kwargs)
        container = Container(broker)
        broker.acceptor = container.listen("127.0.0.1:0")
        broker.port = broker.acceptor._selectable.getsockname()[1]
        stop = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            try:
                run_container(container, timeout_s=timeout_s, stop=stop, on_stop=broker._shutdown)
            except BaseException as exc:  # reported when the test leaves the block
                failure.append(exc)

        thread = threading.Thread(target=serve, name=f"{THREAD_PREFIX}-broker", daemon=True)
        thread.start()
        try:
            yield broker
        finally:
            stop.set()
            thread.join(timeout=5.0)
        assert not thread.is_alive(), "the Proton broker thread did not stop"
        if failure:
            raise failure[0]

    def _shutdown(self) -> None:
        """On the container thread: stop listening, close what is still open."""
        self.acceptor.close()
        for conn in self.connections:
            if conn.state & Endpoint.LOCAL_ACTIVE:
                conn.close()

    def wait_for(self, predicate: Callable[[ProtonBroker], bool], timeout_s: float = 10.0) -> None:
        """Block (another thread) until `predicate(self)` holds under the lock."""
        with self.lock:
            if not self.lock.wait_for(lambda: predicate(self), timeout=timeout_s):
                raise TimeoutError("the Proton broker never reached the expected state")

    def _record(self, update: Callable[[], None]) -> None:
        with self.lock:
            update()
            self.lock.notify_all()

    # --- connections ---------------------------------------------------------------------------

    def on_connection_bound(self, event: Any) -> None:
        transport = event.transport
        if self.max_frame_size is not None:
            transport.max_frame_size = self.max_frame_size
        if self.idle_timeout_s is not None:
            transport.idle_timeout = self.idle_timeout_s
        # Proton's built-in SASL (no Cyrus) offers ANONYMOUS and EXTERNAL only as a server.
        sasl = transport.sasl()
        sasl.allowed_mechs(self.sasl_mechanisms)
        self.connections.append(event.connection)

    def on_connection_opened(self, event: Any) -> None:
        transport = event.transport
        seen = ConnectionSeen(
            remote_container=event.connection.remote_container,
            remote_idle_timeout_s=transport.remote_idle_timeout,
            remote_max_frame_size=transport.remote_max_frame_size,
            user=transport.user,
        )
        self._record(lambda: self.connections_seen.append(seen))

    def on_transport_error(self, event: Any) -> None:
        condition = event.transport.condition
        text = f"{condition.name}: {condition.description}" if condition else "transport error"

        def update() -> None:
            self.transport_errors.append(text)

        self._record(update)

    def on_transport_closed(self, event: Any) -> None:
        def update() -> None:
            self.closed_connections += 1

        self._record(update)
        connection = event.connection
        if connection in self.connections:
            self.connections.remove(connection)
        for links in self.senders.values():
            links[:] = [link for link in links if link.connection != connection]  # wrappers: ==

    def on_connection_error(self, event: Any) -> None:
        pass  # the client closed with an error: nothing to clean up beyond the transport

    def on_session_opening(self, event: Any) -> None:
        # Bytes of incoming message data the session buffers: Proton derives the incoming-window
        # it advertises from it (capacity / max-frame-size frames).
        if self.session_capacity is not None:
            event.session.incoming_capacity = self.session_capacity

    # --- links ---------------------------------------------------------------------------------

    def on_link_opening(self, event: Any) -> None:
        link = event.link
        # Answer with the client's settle modes (the responder's are otherwise Proton's defaults).
        link.snd_settle_mode = link.remote_snd_settle_mode
        link.rcv_settle_mode = link.remote_rcv_settle_mode
        if link.is_sender:
            source = link.remote_source
            address = f"dynamic/{next(self._dynamic)}" if source.dynamic else source.address
            link.source.address = address
            link.source.dynamic = source.dynamic
            link.target.address = link.remote_target.address
            self.senders.setdefault(address, []).append(link)
            self.sent[link] = 0
        else:
            link.target.address = link.remote_target.address
            link.source.address = link.remote_source.address

    def on_link_closing(self, event: Any) -> None:
        self._forget(event.link)

    def on_link_closed(self, event: Any) -> None:
        self._forget(event.link)

    def _forget(self, link: Any) -> None:
        if link.is_sender:
            links = self.senders.get(link.source.address, [])
            if link in links:
                links.remove(link)

    def on_link_opened(self, event: Any) -> None:
        link = event.link
        if link.is_receiver and not (link.target.address or "").startswith("held/"):
            link.flow(self.credit)

    def on_sendable(self, event: Any) -> None:
        self._pump(event.link)

    def on_link_flow(self, event: Any) -> None:
        link = event.link
        if link.is_sender and link.state & Endpoint.LOCAL_ACTIVE:
            self._pump(link)
        elif link.is_receiver:
            returned = link.drained()  # credit the client's sender gave back
            if returned:

                def update() -> None:
                    self.credit_returned_by_clients += returned

                self._record(update)

    def _pump(self, link: Any) -> None:
        address = link.source.address
        queue = self.queues.get(address)
        presettle = bool(address) and address.startswith("presettled/")
        while queue and link.credit > 0:
            delivery = link.send(queue.popleft())
            if presettle:
                delivery.settle()
            self.sent[link] = self.sent.get(link, 0) + 1
        if link.drain_mode and link.credit > 0:
            returned = link.drained()
            drain = DrainSeen(address, self.sent.get(link, 0), returned)
            self._record(lambda: self.drains.append(drain))

    # --- messages in ---------------------------------------------------------------------------

    def on_message(self, event: Any) -> None:
        delivery, message = event.delivery, event.message
        address = event.link.target.address or message.address
        arrival = Arrival(address, message, delivery.settled, message.body)
        self._record(lambda: self.arrivals.append(arrival))
        if address is None:
            address = ""
        link = event.link
        if link.credit < self.credit // 2 and not address.startswith("held/"):
            link.flow(self.credit - link.credit)
        if address == "control":
            self._control(event.connection, message.body)
            self.settle(delivery, Delivery.ACCEPTED)
        elif address.startswith("reject/"):
            delivery.local.condition = Condition(REJECT_CONDITION, REJECT_DESCRIPTION)
            self.settle(delivery, Delivery.REJECTED)
        elif address.startswith("release/"):
            self.settle(delivery, Delivery.RELEASED)
        elif address.startswith("modify/"):
            delivery.local.failed = True
            delivery.local.undeliverable = True
            delivery.local.annotations = MODIFY_ANNOTATIONS
            self.settle(delivery, Delivery.MODIFIED)
        else:
            self.queues.setdefault(address, deque()).append(message)
            if delivery.settled:
                delivery.settle()
            else:
                self.settle(delivery, Delivery.ACCEPTED)
            for link in list(self.senders.get(address, [])):
                self._pump(link)

    def _control(self, connection: Any, command: dict[str, Any]) -> None:
        link = connection.link_head(Endpoint.LOCAL_ACTIVE)
        while link is not None:
            if link.is_receiver and link.target.address == command["grant"]:
                if command.get("drain"):
                    link.drain(command["credit"])
                else:
                    link.flow(command["credit"])
            link = link.next(Endpoint.LOCAL_ACTIVE)

    # --- outcomes of messages out --------------------------------------------------------------

    def on_accepted(self, event: Any) -> None:
        self._outcome(event)

    def on_rejected(self, event: Any) -> None:
        self._outcome(event)

    def on_released(self, event: Any) -> None:  # released and modified both land here
        self._outcome(event)

    def _outcome(self, event: Any) -> None:
        delivery = event.delivery
        remote = delivery.remote
        condition = remote.condition
        seen = OutcomeSeen(
            address=event.link.source.address,
            state=delivery.remote_state,
            remote_settled=delivery.settled,
            condition=condition.name if condition else None,
            description=condition.description if condition else None,
            failed=remote.failed,
            undeliverable=remote.undeliverable,
            annotations=dict(remote.annotations) if remote.annotations else None,
        )
        self._record(lambda: self.outcomes.append(seen))
        # The sender settles once it knows the outcome; with rcv-settle-mode second that is what
        # lets the receiver settle (transport §2.6.12).
        delivery.settle()
