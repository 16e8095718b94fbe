"""The single router, end to end: real `router run` processes on loopback, driven by
python-qpid-proton clients, both its blocking API (BlockingConnection, one thread per
connection) and its reactor API (Container + MessagingHandler, every connection of a scenario on
one Container thread).

One router serves the module (its listeners and address rules cover every scenario that needs no
router-wide setting); limits and shutdown get routers of their own. The sans-IO core tests
(tests/test_core_*.py) pin the same semantics without sockets; here they must hold for
third-party clients over TCP.

Waiting is always on an event (an outcome, an attach, a flow, a round trip on a connection);
every Proton call and every Container run has a deadline.

A "round trip" below: opening a link on a connection and waiting for the router's answer. The
router handles a connection's frames in order and writes its answers in order, so once the
answer is here, the router has processed everything sent before it on that connection, and
everything it wrote to us before answering has been read.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import trio
from proton import Condition, Delivery, Endpoint, Link, Message, Transport, symbol
from proton.handlers import MessagingHandler
from proton.reactor import AtMostOnce, Container, LinkOption
from proton.utils import BlockingConnection, ConnectionClosed, LinkDetached, SyncRequestResponse

from router.amqp import errors as E
from router.amqp.connection import Connection, ConnectionConfig
from router.amqp.events import RemoteClose
from router.amqp.framing import frame
from router.amqp.performatives import Begin

from .support.interop import ContainerTimeout, run_container, run_in_thread
from .support.router_process import RouterProcess, router_env

pytestmark = [pytest.mark.interop, pytest.mark.process]

TIMEOUT_S = 10.0  # every Proton blocking call and every Container run
ROUTER_ID = "test-router"
MiB = 1024 * 1024

CONFIG: dict[str, Any] = {
    "router": {"id": ROUTER_ID},
    "listeners": [
        {"name": "amqp", "port": 0},  # link_capacity 250, max_frame_size 65536 (the defaults)
        {"name": "small", "port": 0, "link_capacity": 10, "max_frame_size": 4096},
        {"name": "tight", "port": 0, "max_sessions_per_connection": 4, "max_links_per_connection": 3},
    ],
    "addresses": [
        {"prefix": "closest", "distribution": "closest"},
        {"prefix": "mc", "distribution": "multicast"},
        {"pattern": "news.*.all", "distribution": "multicast"},
        {"pattern": "wide/#", "distribution": "multicast"},
    ],
}


# --- routers -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared_router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterProcess]:
    with RouterProcess.running(tmp_path_factory.mktemp("router"), CONFIG) as router:
        yield router


def _problems(lines: list[str]) -> list[str]:
    return [line for line in lines if "Traceback" in line or " ERROR " in line or " CRITICAL " in line]


@pytest.fixture
def router(shared_router: RouterProcess) -> Iterator[RouterProcess]:
    """The module's router; the test fails if the router logged an error while it ran."""
    assert shared_router.proc is not None and shared_router.proc.poll() is None, shared_router.output
    before = len(shared_router.stderr)
    yield shared_router
    assert not _problems(shared_router.stderr[before:]), shared_router.output


@pytest.fixture
def own_router(tmp_path: Path) -> Iterator[Callable[[dict[str, Any]], RouterProcess]]:
    """Start routers of the test's own (for router-wide settings); they stop after the test,
    which fails if one of them logged an error."""
    started: list[RouterProcess] = []
    with contextlib.ExitStack() as stack:

        def start(config: dict[str, Any]) -> RouterProcess:
            directory = tmp_path / f"router{len(started)}"
            directory.mkdir()
            process = stack.enter_context(RouterProcess.running(directory, {"router": {"id": ROUTER_ID}, **config}))
            started.append(process)
            return process

        yield start
    for process in started:
        assert not _problems(process.stderr), process.output


def url(router: RouterProcess, listener: str = "amqp") -> str:
    return f"amqp://127.0.0.1:{router.ports[listener]}"


# --- running Proton --------------------------------------------------------------------------------


async def run_clients(handler: MessagingHandler, timeout_s: float = TIMEOUT_S) -> None:
    """Run a Container for `handler` on a thread of its own: the Container is created, run and
    torn down on that thread (Proton objects are thread-affine)."""

    def run() -> None:
        try:
            run_container(Container(handler), timeout_s=timeout_s)
        except ContainerTimeout as exc:  # say where the scenario stood
            state = {k: v for k, v in vars(handler).items() if isinstance(v, (int, str, list, dict, set, Counter))}
            raise ContainerTimeout(f"{exc}; {type(handler).__name__} {_short(state)}") from None
        finally:
            _drop_proton_objects(handler)

    await run_in_thread(run, timeout_s=timeout_s + 3.0)


def _is_proton(value: Any) -> bool:
    return isinstance(value, (Endpoint, Delivery, Transport))


def _drop_proton_objects(handler: MessagingHandler) -> None:
    """Let go of the connections, links and deliveries a handler kept, on the Container's own
    thread: a test reads only plain values afterwards."""
    for name, value in list(vars(handler).items()):
        if _is_proton(value) or (isinstance(value, list) and any(_is_proton(v) for v in value)):
            setattr(handler, name, None)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 2000 else text[:2000] + "..."


async def run_threads(*fns: Callable[[], Any], timeout_s: float = TIMEOUT_S) -> list[Any]:
    """Run blocking functions at the same time, each on its own thread; return their results."""
    results: list[Any] = [None] * len(fns)

    async def one(i: int) -> None:
        results[i] = await run_in_thread(fns[i], timeout_s=timeout_s)

    async with trio.open_nursery() as nursery:
        for i in range(len(fns)):
            nursery.start_soon(one, i)
    return results


def condition(endpoint_or_disposition: Any) -> tuple[str | None, str | None]:
    c = getattr(endpoint_or_disposition, "remote_condition", None) or getattr(
        endpoint_or_disposition, "condition", None
    )
    return (c.name, c.description) if c is not None else (None, None)


class SettleSecond(LinkOption):
    def apply(self, link: Any) -> None:
        link.rcv_settle_mode = Link.RCV_SECOND


class Clients(MessagingHandler):
    """Base for the Container scenarios. `connect()` remembers every connection; `finish()`
    closes them all (the Container then ends). An error the router reports is recorded and ends
    the scenario unless the test expects it (`expected_errors`)."""

    expected_errors = False

    def __init__(self, router: RouterProcess, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.router = router
        self.connections: list[Any] = []
        self.errors: list[tuple[str, str | None, str | None]] = []
        self.done = False

    def connect(self, container: Any, listener: str = "amqp", **kwargs: Any) -> Any:
        conn = container.connect(url(self.router, listener), reconnect=False, **kwargs)
        self.connections.append(conn)
        return conn

    def finish(self) -> None:
        self.done = True
        for conn in self.connections:
            if not conn.state & Endpoint.LOCAL_CLOSED:
                conn.close()

    def probe(self, container: Any, conn: Any, name: str) -> Any:
        """Start a round trip on `conn` (see the module docstring): on_link_opened follows."""
        return container.create_receiver(conn, f"probe.{name}.{id(self)}.{time.monotonic_ns()}", name=name)

    def _error(self, kind: str, what: Any) -> None:
        self.errors.append((kind, *condition(what)))
        if not self.expected_errors:
            self.finish()

    def on_link_error(self, event: Any) -> None:
        self._error("link", event.link)

    def on_session_error(self, event: Any) -> None:
        self._error("session", event.session)

    def on_connection_error(self, event: Any) -> None:
        self._error("connection", event.connection)

    def on_transport_error(self, event: Any) -> None:
        self._error("transport", event.transport)

    def check(self) -> None:
        assert self.done, "the scenario did not finish"
        assert not self.errors, self.errors


def trace_frames(transport: Any, into: list[str]) -> None:
    """Record every AMQP frame `transport` reads or writes ("<- @transfer..." / "-> @flow...")."""
    transport.trace(Transport.TRACE_FRM)
    transport.tracer = lambda _transport, line: into.append(line)


def performatives(frames: list[str], direction: str) -> Counter[str]:
    """How many frames of each performative went `direction` ("<-" in, "->" out)."""
    counts: Counter[str] = Counter()
    for line in frames:
        _, sep, rest = line.partition(f"{direction} @")
        if sep:
            counts[rest.split("(", 1)[0]] += 1
    return counts


# --- addresses ---------------------------------------------------------------------------------------


async def test_blocking_producer_and_consumer_meet_on_a_mobile_address(router: RouterProcess) -> None:
    address, n = "blocking.orders", 20

    def consume() -> list[Any]:
        conn = BlockingConnection(url(router), timeout=TIMEOUT_S)
        try:
            receiver = conn.create_receiver(address, credit=n)
            got = []
            for _ in range(n):
                msg = receiver.receive(timeout=TIMEOUT_S)
                got.append((msg.body, msg.id, msg.subject, msg.properties))
                receiver.accept()
            return got
        finally:
            conn.close()

    def produce() -> list[Any]:
        # The sender may attach first: its sends wait for the credit that comes with the consumer.
        conn = BlockingConnection(url(router), timeout=TIMEOUT_S)
        try:
            sender = conn.create_sender(address)
            states = []
            for i in range(n):
                delivery = sender.send(Message(body={"n": i, "text": "h\u00e9llo"}, id=i, subject="order", properties={"seq": i}))
                states.append((delivery.remote_state, delivery.settled))
            return states
        finally:
            conn.close()

    got, states = await run_threads(consume, produce)
    assert states == [(Delivery.ACCEPTED, True)] * n
    assert got == [({"n": i, "text": "h\u00e9llo"}, i, "order", {"seq": i}) for i in range(n)]


class LocalForms(Clients):
    """Consumers on `_local/svc` and on the mobile `svc`; producers to `_topo/0/<us>/svc`,
    `_local/svc` and `svc`; and a consumer for another router's `_topo` address."""

    expected_errors = True
    TARGETS = (f"_topo/0/{ROUTER_ID}/svc", "_local/svc", "svc")

    def __init__(self, router: RouterProcess) -> None:
        super().__init__(router)
        self.received: dict[str, list[Any]] = {"local": [], "mobile": []}
        self.accepted = 0
        self.attached = 0
        self.sent: set[str] = set()
        self.refused: tuple[str | None, str | None] | None = None

    def on_start(self, event: Any) -> None:
        container = event.container
        self.consumer = self.connect(container)
        container.create_receiver(self.consumer, "_local/svc", name="local")
        container.create_receiver(self.consumer, "svc", name="mobile")
        container.create_receiver(self.consumer, "_topo/0/elsewhere/svc", name="elsewhere")

    def on_link_opened(self, event: Any) -> None:
        if event.link.name in ("local", "mobile"):
            self.attached += 1
            if self.attached == 2:
                producer = self.connect(event.container)
                for target in self.TARGETS:
                    event.container.create_sender(producer, target, name=target)

    def on_link_error(self, event: Any) -> None:
        if event.link.name == "elsewhere":
            self.refused = condition(event.link)
            self._maybe_done()
        else:
            super().on_link_error(event)
            self.finish()

    def on_sendable(self, event: Any) -> None:
        name = event.sender.name
        if name not in self.sent:
            self.sent.add(name)
            event.sender.send(Message(body=name))

    def on_message(self, event: Any) -> None:
        self.received[event.receiver.name].append(event.message.body)

    def on_accepted(self, event: Any) -> None:
        self.accepted += 1
        self._maybe_done()

    def _maybe_done(self) -> None:
        if self.accepted == len(self.TARGETS) and self.refused is not None:
            self.finish()


async def test_local_and_topological_forms_reach_the_local_address(router: RouterProcess) -> None:
    clients = LocalForms(router)
    await run_clients(clients)
    assert clients.done
    assert sorted(clients.received["local"]) == sorted([f"_topo/0/{ROUTER_ID}/svc", "_local/svc"])
    assert clients.received["mobile"] == ["svc"]  # the mobile address is another address
    # Another router's address has no route from a standalone router.
    assert clients.refused is not None and clients.refused[0] == E.NOT_FOUND
    assert clients.errors == []


class TwoConsumers(Clients):
    """Two consumers (each on its own connection) on `address`; once both are attached, a
    producer sends `n` messages and waits for every outcome."""

    def __init__(self, router: RouterProcess, address: str, n: int) -> None:
        super().__init__(router)
        self.address, self.n = address, n
        self.received: dict[str, list[Any]] = {"c0": [], "c1": []}
        self.attached = self.sent = self.accepted = 0
        self.other_outcomes: list[int] = []

    def on_start(self, event: Any) -> None:
        for name in self.received:
            event.container.create_receiver(self.connect(event.container), self.address, name=name)

    def on_link_opened(self, event: Any) -> None:
        if event.link.is_receiver:
            self.attached += 1
            if self.attached == 2:
                event.container.create_sender(self.connect(event.container), self.address)

    def on_sendable(self, event: Any) -> None:
        while event.sender.credit > 0 and self.sent < self.n:
            event.sender.send(Message(body=self.sent))
            self.sent += 1

    def on_message(self, event: Any) -> None:
        self.received[event.receiver.name].append(event.message.body)

    def on_accepted(self, event: Any) -> None:
        self.accepted += 1
        if self.accepted + len(self.other_outcomes) == self.n:
            self.finish()

    def on_rejected(self, event: Any) -> None:
        self.other_outcomes.append(event.delivery.remote_state)
        self.on_accepted(event)
        self.accepted -= 1

    on_released = on_rejected


@pytest.mark.parametrize(
    ("address", "multicast"),
    [
        ("plain.q", False),  # no rule matches: the default, balanced
        ("mc", True),  # prefix mc: the address itself,
        ("mc.eu", True),  # a word below it after '.',
        ("mc/eu/x", True),  # or after '/'
        ("mcx", False),  # but not a longer word
        ("news.eu.all", True),  # pattern news.*.all: * is one word
        ("news/eu/all", True),  # words split on '/' too
        ("news.eu.x.all", False),  # * is exactly one word
        ("news.all", False),
        ("wide", True),  # pattern wide/#: # is zero words,
        ("wide.a.b.c", True),  # or more
    ],
)
async def test_address_configuration_by_prefix_and_pattern(router: RouterProcess, address: str, multicast: bool) -> None:
    n = 6
    clients = TwoConsumers(router, address, n)
    await run_clients(clients)
    clients.check()
    assert clients.accepted == n and clients.other_outcomes == []
    c0, c1 = clients.received["c0"], clients.received["c1"]
    if multicast:  # a copy per consumer
        assert c0 == list(range(n)) and c1 == list(range(n))
    else:  # anycast: each message to exactly one consumer
        assert sorted(c0 + c1) == list(range(n))


class BusyAndIdle(Clients):
    """Two consumers on `address`: "busy" holds every delivery unsettled, "idle" accepts at once.
    The producer sends the next message only when the previous one has been accepted (idle) or
    has arrived at busy, so at each routing decision busy has all its deliveries outstanding
    and idle none."""

    def __init__(self, router: RouterProcess, address: str, n: int) -> None:
        super().__init__(router, prefetch=2 * n, auto_accept=False)
        self.address, self.n = address, n
        self.busy = self.idle = self.sent = self.attached = 0
        self.sender: Any = None

    def on_start(self, event: Any) -> None:
        for name in ("busy", "idle"):
            event.container.create_receiver(self.connect(event.container), self.address, name=name)

    def on_link_opened(self, event: Any) -> None:
        if event.link.is_receiver:
            self.attached += 1
            if self.attached == 2:
                self.sender = event.container.create_sender(self.connect(event.container), self.address)

    def on_sendable(self, event: Any) -> None:
        if self.sent == 0:
            self._next()

    def _next(self) -> None:
        if self.sent < self.n:
            self.sender.send(Message(body=self.sent))
            self.sent += 1
        elif self.busy + self.idle == self.n:
            self.finish()

    def on_message(self, event: Any) -> None:
        if event.receiver.name == "busy":
            self.busy += 1
            self._next()
        else:
            self.accept(event.delivery)

    def on_accepted(self, event: Any) -> None:
        self.idle += 1
        self._next()


@pytest.mark.parametrize("distribution", ["closest", "balanced"])
async def test_closest_round_robins_and_balanced_avoids_the_busy_consumer(router: RouterProcess, distribution: str) -> None:
    n = 20
    address = "closest.work" if distribution == "closest" else "balanced.work"
    clients = BusyAndIdle(router, address, n)
    await run_clients(clients)
    clients.check()
    assert clients.busy + clients.idle == n
    if distribution == "closest":
        assert (clients.busy, clients.idle) == (n // 2, n // 2)  # round robin, whatever the load
    else:
        assert clients.busy <= 1  # least outstanding work: busy never wins again after one


# --- credit ------------------------------------------------------------------------------------------


class CreditWindow(Clients):
    """A producer attaches to an address without consumers (round trip: no credit), a consumer
    with no credit of its own attaches (credit: exactly the window), the producer fills the
    window (round trip: no more credit while all of it waits), the consumer takes everything
    (round trip: the window is open again), the consumer detaches (credit drained to 0)."""

    def __init__(self, router: RouterProcess, listener: str, address: str) -> None:
        super().__init__(router, prefetch=0)
        self.listener, self.address = listener, address
        self.phase = "attach"
        self.credit: dict[str, int] = {}
        self.sent = self.accepted = self.received = 0
        self.sender: Any = None
        self.receiver: Any = None

    def on_start(self, event: Any) -> None:
        self.producer = self.connect(event.container, self.listener)
        self.sender = event.container.create_sender(self.producer, self.address)

    def on_link_opened(self, event: Any) -> None:
        container = event.container
        if event.link == self.sender:
            self.probe(container, self.producer, "no-consumer")
        elif event.link.name == "no-consumer":
            self.credit["no consumer"] = self.sender.credit
            self.phase = "consumer"
            self.receiver = container.create_receiver(self.connect(container, self.listener), self.address)
        elif event.link.name == "window-full":
            self.credit["window full"] = self.sender.credit
            self.receiver.flow(10_000)
        elif event.link.name == "all-settled":
            self.credit["all settled"] = self.sender.credit
            self.phase = "gone"
            self.receiver.close()

    def on_link_flow(self, event: Any) -> None:
        if event.link != self.sender:
            return
        credit = self.sender.credit
        if self.phase == "consumer" and credit > 0:
            self.credit["consumer"] = credit
            while self.sender.credit > 0:
                self.sender.send(Message(body=self.sent))
                self.sent += 1
            self.phase = "full"
            self.probe(event.container, self.producer, "window-full")
        elif self.phase == "gone" and credit == 0:
            self.credit["consumer gone"] = credit
            self.finish()

    def on_message(self, event: Any) -> None:
        self.received += 1
        self.accept(event.delivery)

    def on_accepted(self, event: Any) -> None:
        self.accepted += 1
        if self.accepted == self.sent:
            self.probe(event.container, self.producer, "all-settled")


@pytest.mark.parametrize(("listener", "capacity"), [("small", 10), ("amqp", 250)])
async def test_credit_only_while_a_consumer_exists_in_a_window_of_link_capacity(
    router: RouterProcess, listener: str, capacity: int
) -> None:
    clients = CreditWindow(router, listener, f"credit.{listener}")
    await run_clients(clients)
    clients.check()
    credit = clients.credit
    assert credit["no consumer"] == 0
    assert credit["consumer"] == capacity  # the link_capacity of the producer's listener
    assert credit["window full"] == 0  # every credit is used by a delivery still in flight
    # Nothing in flight: the window is open again (the router tops up in batches, once at
    # least half of it is used, so between half and all of it).
    assert capacity // 2 < credit["all settled"] <= capacity
    assert credit["consumer gone"] == 0  # the last consumer went: drained
    assert clients.sent == clients.received == clients.accepted == capacity


class Drain(Clients):
    """A consumer without credit; three messages wait for it in the router (round trip on the
    producer's connection); the consumer drains with credit 10: three arrive and 7 credits come
    back. Then flow(5) and drain(0) with nothing waiting: all 5 come back."""

    def __init__(self, router: RouterProcess, address: str) -> None:
        super().__init__(router, prefetch=0)
        self.address = address
        self.received: list[Any] = []
        self.drained: list[tuple[int, int, int]] = []  # (messages so far, credits returned, credit after)
        self.accepted = 0
        self.sent = False

    def on_start(self, event: Any) -> None:
        self.consumer = self.connect(event.container)
        self.receiver = event.container.create_receiver(self.consumer, self.address)

    def on_link_opened(self, event: Any) -> None:
        if event.link == self.receiver:
            self.producer = self.connect(event.container)
            event.container.create_sender(self.producer, self.address)
        elif event.link.name == "queued":
            self.receiver.drain(10)  # credit 10, drain=true

    def on_sendable(self, event: Any) -> None:
        if not self.sent:
            self.sent = True
            for i in range(3):
                event.sender.send(Message(body=i))
            self.probe(event.container, self.producer, "queued")

    def on_message(self, event: Any) -> None:
        self.received.append(event.message.body)
        self.accept(event.delivery)

    def on_accepted(self, event: Any) -> None:
        self.accepted += 1

    def on_link_flow(self, event: Any) -> None:
        link = event.link
        if link != self.receiver or not link.drain_mode:
            return
        returned = link.drained()
        if returned or (link.credit == 0 and not link.draining()):
            self.drained.append((len(self.received), returned, link.credit))
            if len(self.drained) == 1:
                link.drain_mode = False
                link.flow(5)
                link.drain(0)  # drain what we have
            else:
                self.finish()


async def test_drain_requests_from_a_container_receiver_are_honoured(router: RouterProcess) -> None:
    clients = Drain(router, "drain.q")
    await run_clients(clients)
    clients.check()
    assert clients.received == [0, 1, 2]
    # The waiting messages went out, then the rest of the credit came back; the second drain
    # found nothing waiting and returned all of it.
    assert clients.drained == [(3, 7, 0), (3, 5, 0)]


# --- anonymous relay -----------------------------------------------------------------------------------


class AnonymousRelay(Clients):
    """A consumer on relay.q; a sender with a null target sends one message to relay.q, one to
    an address without consumers and one with no `to`."""

    MESSAGES = {"routed": "relay.q", "nowhere": "relay.nowhere", "no address": None}

    def __init__(self, router: RouterProcess) -> None:
        super().__init__(router)
        self.outcomes: dict[str, tuple[int, str | None, str | None]] = {}
        self.received: list[Any] = []
        self.offered: Any = None
        self.tags: dict[bytes, str] = {}
        self.sent = False
        self.initial_credit = -1

    def on_start(self, event: Any) -> None:
        event.container.create_receiver(self.connect(event.container), "relay.q", name="consumer")

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "consumer":
            self.producer = self.connect(event.container)
            event.container.create_sender(self.producer, None, name="anonymous")

    def on_connection_opened(self, event: Any) -> None:
        self.offered = event.connection.remote_offered_capabilities

    def on_sendable(self, event: Any) -> None:
        if self.sent:
            return
        self.sent = True
        self.initial_credit = event.sender.credit
        for label, to in self.MESSAGES.items():
            delivery = event.sender.send(Message(address=to, body=label))
            self.tags[delivery.tag] = label

    def on_message(self, event: Any) -> None:
        self.received.append(event.message.body)

    def on_accepted(self, event: Any) -> None:
        delivery = event.delivery
        self.outcomes[self.tags[delivery.tag]] = (delivery.remote_state, *condition(delivery.remote))
        if len(self.outcomes) == len(self.MESSAGES):
            self.finish()

    on_rejected = on_released = on_accepted


async def test_anonymous_relay_routes_each_message_by_its_to(router: RouterProcess) -> None:
    clients = AnonymousRelay(router)
    await run_clients(clients)
    clients.check()
    assert symbol("ANONYMOUS-RELAY") in clients.offered
    assert clients.initial_credit == 250  # anonymous senders get their window at once
    assert clients.received == ["routed"]
    assert clients.outcomes["routed"] == (Delivery.ACCEPTED, None, None)
    assert clients.outcomes["nowhere"] == (Delivery.RELEASED, None, None)
    state, name, _ = clients.outcomes["no address"]
    assert (state, name) == (Delivery.REJECTED, E.PRECONDITION_FAILED)


# --- dynamic reply-to ----------------------------------------------------------------------------------


async def test_blocking_request_response_through_a_dynamic_reply_address(router: RouterProcess) -> None:
    service, n = "rpc.blocking", 3

    def serve() -> None:
        conn = BlockingConnection(url(router), timeout=TIMEOUT_S)
        try:
            requests = conn.create_receiver(service, credit=n)
            replies = conn.create_sender(None)  # answers go through the anonymous relay
            for _ in range(n):
                request = requests.receive(timeout=TIMEOUT_S)
                requests.accept()
                replies.send(Message(address=request.reply_to, correlation_id=request.correlation_id, body=str(request.body).upper()))
        finally:
            conn.close()

    def call() -> tuple[str, str, list[Any]]:
        conn = BlockingConnection(url(router), timeout=TIMEOUT_S)
        try:
            client = SyncRequestResponse(conn, service)  # a dynamic receiver for the replies
            answers = [client.call(Message(body=f"hello {i}")).body for i in range(n)]
        finally:
            conn.close()
        # Another client (own connection: Proton names links after their address) gets
        # another address.
        conn = BlockingConnection(url(router), timeout=TIMEOUT_S)
        try:
            other = conn.create_receiver(None, dynamic=True).remote_source.address
        finally:
            conn.close()
        return client.reply_to, other, answers

    _, (reply_to, other, answers) = await run_threads(serve, call)
    assert answers == [f"HELLO {i}" for i in range(n)]
    prefix = f"_topo/0/{ROUTER_ID}/temp."
    assert reply_to.startswith(prefix) and other.startswith(prefix)
    assert len(reply_to) > len(prefix) and other != reply_to  # unique per dynamic source


class RequestResponse(Clients):
    """Proton's request/response pattern on one Container: the client's dynamic receiver gets a
    reply address; requests carry it as reply_to; the service answers through the anonymous
    relay."""

    def __init__(self, router: RouterProcess, service: str, n: int) -> None:
        super().__init__(router)
        self.service, self.n = service, n
        self.reply_to: str | None = None
        self.responses: list[tuple[Any, Any]] = []
        self.sent = False

    def on_start(self, event: Any) -> None:
        container = event.container
        server = self.connect(container)
        self.requests = container.create_receiver(server, self.service)
        self.answers = container.create_sender(server, None)
        client = self.connect(container)
        self.replies = container.create_receiver(client, None, dynamic=True)
        self.asker = container.create_sender(client, self.service)

    def on_link_opened(self, event: Any) -> None:
        if event.link == self.replies:
            self.reply_to = self.replies.remote_source.address
            self._ask()

    def on_sendable(self, event: Any) -> None:
        if event.sender == self.asker:
            self._ask()

    def _ask(self) -> None:
        if self.sent or self.reply_to is None or self.asker.credit == 0:
            return
        self.sent = True
        for i in range(self.n):
            self.asker.send(Message(body=f"request {i}", reply_to=self.reply_to, correlation_id=i))

    def on_message(self, event: Any) -> None:
        msg = event.message
        if event.receiver == self.requests:
            self.answers.send(Message(address=msg.reply_to, correlation_id=msg.correlation_id, body=msg.body.upper()))
        else:
            self.responses.append((msg.correlation_id, msg.body))
            if len(self.responses) == self.n:
                self.finish()


async def test_container_request_response_through_a_dynamic_reply_address(router: RouterProcess) -> None:
    clients = RequestResponse(router, "rpc.reactor", 5)
    await run_clients(clients)
    clients.check()
    assert clients.reply_to is not None and clients.reply_to.startswith(f"_topo/0/{ROUTER_ID}/temp.")
    assert sorted(clients.responses) == [(i, f"REQUEST {i}") for i in range(5)]


# --- settlement ----------------------------------------------------------------------------------------


class OneOutcome(Clients):
    """The consumer answers one message with `state` (and disposition fields); the producer
    records what reached it."""

    def __init__(self, router: RouterProcess, address: str, state: int, fields: dict[str, Any]) -> None:
        super().__init__(router, auto_accept=False)
        self.address, self.state, self.fields = address, state, fields
        self.outcome: dict[str, Any] | None = None
        self.sent = False

    def on_start(self, event: Any) -> None:
        event.container.create_receiver(self.connect(event.container), self.address, name="consumer")

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "consumer":
            event.container.create_sender(self.connect(event.container), self.address)

    def on_sendable(self, event: Any) -> None:
        if not self.sent:
            self.sent = True
            event.sender.send(Message(body="judge me"))

    def on_message(self, event: Any) -> None:
        delivery = event.delivery
        for name, value in self.fields.items():
            setattr(delivery.local, name, value)
        delivery.update(self.state)
        delivery.settle()

    def on_accepted(self, event: Any) -> None:
        delivery = event.delivery
        remote = delivery.remote
        c = remote.condition
        self.outcome = {
            "state": delivery.remote_state,
            "settled": delivery.settled,
            "condition": (c.name, c.description, dict(c.info or {})) if c is not None else None,
            "failed": remote.failed,
            "undeliverable": remote.undeliverable,
            "annotations": dict(remote.annotations or {}),
        }
        self.finish()

    on_rejected = on_released = on_accepted


OUTCOMES: dict[str, tuple[int, dict[str, Any], dict[str, Any]]] = {
    # name: (state, disposition fields the consumer sets, what the producer must see)
    "accepted": (Delivery.ACCEPTED, {}, {"condition": None}),
    "rejected": (
        Delivery.REJECTED,
        {"condition": Condition("app:bad-order", "no such product", {symbol("sku"): "x1"})},
        {"condition": ("app:bad-order", "no such product", {"sku": "x1"})},
    ),
    "released": (Delivery.RELEASED, {}, {"failed": False, "undeliverable": False}),
    "modified": (
        Delivery.MODIFIED,
        {"failed": True, "undeliverable": True, "annotations": {symbol("x-retry"): 3}},
        {"failed": True, "undeliverable": True, "annotations": {"x-retry": 3}},
    ),
}


@pytest.mark.parametrize("outcome", list(OUTCOMES))
async def test_the_consumers_outcome_reaches_the_producer_and_settles_it(router: RouterProcess, outcome: str) -> None:
    state, fields, expected = OUTCOMES[outcome]
    clients = OneOutcome(router, f"outcome.{outcome}", state, fields)
    await run_clients(clients)
    clients.check()
    assert clients.outcome is not None
    assert clients.outcome["state"] == state
    assert clients.outcome["settled"] is True  # settlement follows the consumer's (end to end)
    for key, value in expected.items():
        assert clients.outcome[key] == value, key


class ProducerSettleMode(Clients):
    """A producer in rcv-settle-mode first or second sends two messages to an accepting consumer
    and records, for each outcome, whether the router had settled already."""

    def __init__(self, router: RouterProcess, address: str, second: bool) -> None:
        super().__init__(router, auto_settle=False)
        self.address, self.second = address, second
        self.seen: list[tuple[int, bool]] = []
        self.mode: int | None = None
        self.sent = 0

    def on_start(self, event: Any) -> None:
        event.container.create_receiver(self.connect(event.container), self.address, name="consumer")

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "consumer":
            options = SettleSecond() if self.second else None
            event.container.create_sender(self.connect(event.container), self.address, options=options)
        elif event.link.is_sender:
            self.mode = event.link.remote_rcv_settle_mode

    def on_sendable(self, event: Any) -> None:
        while self.sent < 2 and event.sender.credit > 0:
            event.sender.send(Message(body=self.sent))
            self.sent += 1

    def on_accepted(self, event: Any) -> None:
        self.seen.append((event.delivery.remote_state, event.delivery.settled))
        event.delivery.settle()  # second: the router settles only after this (transport §2.8.3)
        if len(self.seen) == 2:
            self.finish()


@pytest.mark.parametrize("mode", ["first", "second"])
async def test_producer_receiver_settle_modes(router: RouterProcess, mode: str) -> None:
    second = mode == "second"
    clients = ProducerSettleMode(router, f"settle.producer.{mode}", second)
    await run_clients(clients)
    clients.check()
    assert clients.mode == (Link.RCV_SECOND if second else Link.RCV_FIRST)
    # first: the outcome comes settled; second: the router waits for the producer to settle
    assert clients.seen == [(Delivery.ACCEPTED, not second)] * 2


class ConsumerSettleSecond(Clients):
    """A consumer in rcv-settle-mode second sends its outcome unsettled; the router relays it to
    the producer unsettled (settlement travels end to end, as with the anchors); the producer
    settles once it has seen it; only then does the router settle towards the consumer, which
    settles last (transport §2.6.12: the three acknowledgements)."""

    def __init__(self, router: RouterProcess, address: str) -> None:
        super().__init__(router, auto_accept=False)
        self.address = address
        self.mode: int | None = None
        self.router_settled_with: int | None = None
        self.producer_saw: tuple[int, bool] | None = None
        self.sent = False

    def on_start(self, event: Any) -> None:
        conn = self.connect(event.container)
        event.container.create_receiver(conn, self.address, name="consumer", options=SettleSecond())

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "consumer":
            self.mode = event.link.remote_rcv_settle_mode
            event.container.create_sender(self.connect(event.container), self.address)

    def on_sendable(self, event: Any) -> None:
        if not self.sent:
            self.sent = True
            event.sender.send(Message(body="twice"))

    def on_message(self, event: Any) -> None:
        event.delivery.update(Delivery.ACCEPTED)  # the outcome, not settled

    def on_settled(self, event: Any) -> None:
        if event.link.is_receiver:
            self.router_settled_with = event.delivery.remote_state
            event.delivery.settle()
            self._maybe_done()

    def on_accepted(self, event: Any) -> None:
        if self.producer_saw is None:
            self.producer_saw = (event.delivery.remote_state, event.delivery.settled)
            event.delivery.settle()  # the producer is done: the router may settle the consumer's
        self._maybe_done()

    def _maybe_done(self) -> None:
        if self.router_settled_with is not None and self.producer_saw is not None:
            self.finish()


async def test_consumer_in_receiver_settle_mode_second(router: RouterProcess) -> None:
    clients = ConsumerSettleSecond(router, "settle.consumer.second")
    await run_clients(clients)
    clients.check()
    assert clients.mode == Link.RCV_SECOND
    assert clients.router_settled_with == Delivery.ACCEPTED
    assert clients.producer_saw == (Delivery.ACCEPTED, False)  # the outcome, not settled


class Presettled(Clients):
    """Traffic between a producer and a consumer with every frame on both connections traced."""

    def __init__(self, router: RouterProcess, address: str, n: int, *, producer: Any = None, consumer: Any = None) -> None:
        super().__init__(router)
        self.address, self.n = address, n
        self.producer_options, self.consumer_options = producer, consumer
        self.frames: dict[str, list[str]] = {"producer": [], "consumer": []}
        self.received: list[tuple[Any, bool]] = []
        self.outcomes: list[int] = []
        self.sent = 0

    def on_start(self, event: Any) -> None:
        self.consumer = self.connect(event.container)
        event.container.create_receiver(self.consumer, self.address, name="consumer", options=self.consumer_options)

    def on_connection_bound(self, event: Any) -> None:
        which = "consumer" if event.connection == self.consumer else "producer"
        trace_frames(event.transport, self.frames[which])

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "consumer":
            self.producer = self.connect(event.container)
            event.container.create_sender(self.producer, self.address, options=self.producer_options)

    def on_sendable(self, event: Any) -> None:
        while self.sent < self.n and event.sender.credit > 0:
            event.sender.send(Message(body=self.sent))
            self.sent += 1

    def on_message(self, event: Any) -> None:
        self.received.append((event.message.body, event.delivery.settled))
        self._maybe_done()

    def on_accepted(self, event: Any) -> None:
        self.outcomes.append(event.delivery.remote_state)
        self._maybe_done()

    on_rejected = on_released = on_accepted

    def _maybe_done(self) -> None:
        unsettled = self.producer_options is None
        if len(self.received) == self.n and (not unsettled or len(self.outcomes) == self.n):
            self.finish()


async def test_presettled_traffic_flows_without_dispositions(router: RouterProcess) -> None:
    n = 10
    clients = Presettled(router, "presettled.q", n, producer=AtMostOnce())
    await run_clients(clients)
    clients.check()
    assert clients.received == [(i, True) for i in range(n)]  # arrived settled
    producer_in = performatives(clients.frames["producer"], "<-")
    consumer_out = performatives(clients.frames["consumer"], "->")
    assert performatives(clients.frames["producer"], "->")["transfer"] == n
    assert performatives(clients.frames["consumer"], "<-")["transfer"] == n
    assert producer_in["disposition"] == 0 and consumer_out["disposition"] == 0


async def test_an_at_most_once_consumer_gets_settled_deliveries_and_the_producer_accepted(router: RouterProcess) -> None:
    n = 5
    clients = Presettled(router, "presettled.consumer", n, consumer=AtMostOnce())
    await run_clients(clients)
    clients.check()
    assert clients.received == [(i, True) for i in range(n)]
    assert performatives(clients.frames["consumer"], "->")["disposition"] == 0
    # The consumer will never answer: the router counts a delivery it sent settled as accepted.
    assert clients.outcomes == [Delivery.ACCEPTED] * n


class MulticastOutcomes(Clients):
    """Three consumers on a multicast address answer one unsettled message with the given
    states. Consumers 0 and 1 answer at once; a round trip on each of their connections and
    then one on the producer's shows the producer has been told nothing yet; then consumer 2
    answers."""

    def __init__(self, router: RouterProcess, address: str, states: list[int]) -> None:
        super().__init__(router, auto_accept=False)
        self.address, self.states = address, states
        self.consumers: list[Any] = []
        self.attached = 0
        self.confirmed: set[str] = set()
        self.held: Any = None
        self.producer_probed = False
        self.outcome_before_last: Any = "unset"
        self.outcome: tuple[int, bool] | None = None
        self.sent = False

    def on_start(self, event: Any) -> None:
        for i in range(len(self.states)):
            conn = self.connect(event.container)
            self.consumers.append(conn)
            event.container.create_receiver(conn, self.address, name=f"rx{i}")

    def on_link_opened(self, event: Any) -> None:
        name = event.link.name
        if name.startswith("rx"):
            self.attached += 1
            if self.attached == len(self.states):
                self.producer = self.connect(event.container)
                event.container.create_sender(self.producer, self.address, name="producer")
        elif name.startswith("confirm"):
            self.confirmed.add(name)
            if len(self.confirmed) == len(self.states) - 1:
                self.probe(event.container, self.producer, "producer-probe")
        elif name == "producer-probe":
            self.outcome_before_last = self.outcome
            self.producer_probed = True
            self._last()

    def on_sendable(self, event: Any) -> None:
        if not self.sent:
            self.sent = True
            event.sender.send(Message(body="to all"))

    def on_message(self, event: Any) -> None:
        i = int(event.receiver.name[2:])
        if i < len(self.states) - 1:
            _answer(event.delivery, self.states[i])
            self.probe(event.container, self.consumers[i], f"confirm{i}")
        else:
            self.held = event.delivery
            self._last()

    def _last(self) -> None:
        if self.held is not None and self.producer_probed:
            _answer(self.held, self.states[-1])

    def on_accepted(self, event: Any) -> None:
        self.outcome = (event.delivery.remote_state, event.delivery.settled)
        self.finish()

    on_rejected = on_released = on_accepted


def _answer(delivery: Any, state: int) -> None:
    if state == Delivery.REJECTED:
        delivery.local.condition = Condition("app:no", "not for me")
    if state == Delivery.MODIFIED:
        delivery.local.failed = True
    delivery.update(state)
    delivery.settle()


A, R, RE, M = Delivery.ACCEPTED, Delivery.REJECTED, Delivery.RELEASED, Delivery.MODIFIED


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ([RE, A, M], A),
        ([A, R, M], R),
        ([RE, M, RE], M),
        ([RE, RE, RE], RE),
        ([A, RE, R], R),  # the last answer is the strongest
        ([M, RE, A], A),
    ],
    ids=["released-accepted-modified", "accepted-rejected-modified", "released-modified-released",
         "all-released", "last-rejected", "last-accepted"],
)  # fmt: skip
async def test_unsettled_multicast_settles_when_every_copy_is_terminal(router: RouterProcess, states: list[int], expected: int) -> None:
    clients = MulticastOutcomes(router, f"mc.outcomes.{'-'.join(map(str, states))}", states)
    await run_clients(clients)
    clients.check()
    assert clients.outcome_before_last is None  # two of three answers: nothing told yet
    assert clients.outcome == (expected, True)  # rejected > accepted > modified > released


# --- failures ------------------------------------------------------------------------------------------

CONSUMER_SCRIPT = """
import sys
from proton.handlers import MessagingHandler
from proton.reactor import Container

class Consumer(MessagingHandler):
    def __init__(self):
        super().__init__(prefetch=20, auto_accept=False)
        self.seen = 0

    def on_start(self, event):
        self.conn = event.container.connect(sys.argv[1], reconnect=False)
        event.container.create_receiver(self.conn, sys.argv[2], name="consumer")

    def on_message(self, event):
        self.seen += 1
        if self.seen <= 5:
            self.accept(event.delivery)
        if self.seen == 10:  # a round trip: the router has our accepts when the answer comes
            event.container.create_receiver(self.conn, "probe.holding", name="probe")

    def on_link_opened(self, event):
        if event.link.name == "probe":
            print("holding", flush=True)

Container(Consumer()).run()
"""


class Outcomes(Clients):
    """Counts what a producer learns about each of its `n` messages."""

    def __init__(self, router: RouterProcess, address: str, n: int, **kwargs: Any) -> None:
        super().__init__(router, **kwargs)
        self.address, self.n = address, n
        self.sent = 0
        self.counts: Counter[str] = Counter()
        self.failed_flags: list[bool] = []

    def start_producer(self, container: Any, listener: str = "amqp") -> None:
        self.producer = self.connect(container, listener)
        container.create_sender(self.producer, self.address, name="producer")

    def on_sendable(self, event: Any) -> None:
        while event.sender.credit > 0 and self.sent < self.n:
            event.sender.send(Message(body=self.sent))
            self.sent += 1

    def on_accepted(self, event: Any) -> None:
        if event.link.name != "producer":
            return
        state = event.delivery.remote_state
        self.counts[{A: "accepted", R: "rejected", RE: "released", M: "modified"}[state]] += 1
        if state == M:
            self.failed_flags.append(event.delivery.remote.failed)
        if sum(self.counts.values()) == self.n:
            self.finish()

    on_rejected = on_released = on_accepted


class VanishingConsumer(Outcomes):
    """The consumer accepts 5 messages, holds the next 5 unsettled, then detaches its link or
    closes its connection while the producer's 100 are in flight."""

    def __init__(self, router: RouterProcess, address: str, how: str) -> None:
        super().__init__(router, address, 100, prefetch=20, auto_accept=False)
        self.how = how
        self.consumed = 0

    def on_start(self, event: Any) -> None:
        event.container.create_receiver(self.connect(event.container), self.address, name="consumer")
        self.start_producer(event.container)

    def on_message(self, event: Any) -> None:
        self.consumed += 1
        if self.consumed <= 5:
            self.accept(event.delivery)
        elif self.consumed == 10:
            if self.how == "detach":
                event.receiver.close()
            else:
                event.connection.close()


@pytest.mark.parametrize("how", ["detach", "close", "kill"])
async def test_a_vanishing_consumer_leaves_no_delivery_without_an_outcome(router: RouterProcess, how: str) -> None:
    address = f"vanish.{how}"
    if how == "kill":  # a consumer process dies (SIGKILL) holding unsettled deliveries
        clients = Outcomes(router, address, 100)
        clients.on_start = lambda event: clients.start_producer(event.container)  # type: ignore[method-assign]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_clients, clients)
            consumer = await trio.lowlevel.open_process(
                [sys.executable, "-c", CONSUMER_SCRIPT, url(router), address], stdout=subprocess.PIPE, env=router_env()
            )
            try:
                assert await _read_until(consumer.stdout, b"holding\n")
            finally:
                consumer.kill()
                await consumer.wait()
                assert consumer.stdout is not None
                await consumer.stdout.aclose()
    else:
        clients = VanishingConsumer(router, address, how)
        await run_clients(clients)
    clients.check()
    counts = clients.counts
    assert sum(counts.values()) == clients.sent == 100  # every delivery has an outcome
    assert counts["accepted"] == 5
    assert counts["modified"] >= 5 and all(clients.failed_flags)  # sent, unsettled: in doubt
    assert counts["released"] > 0  # never sent: released
    assert counts["rejected"] == 0


async def _read_until(stream: Any, marker: bytes, timeout_s: float = TIMEOUT_S) -> bool:
    seen = b""
    with trio.fail_after(timeout_s):
        while marker not in seen:
            chunk = await stream.receive_some(4096)
            if not chunk:
                return False
            seen += chunk
    return True


# --- large messages ------------------------------------------------------------------------------------


class LargeMessage(Clients):
    """Stream the first half of a large message, wait until the consumer holds part of it (the
    router forwards before the message is complete), then the rest; every frame the consumer
    reads is traced."""

    def __init__(self, router: RouterProcess, address: str, payload: bytes, listener: str, consumer_frame: int) -> None:
        super().__init__(router, prefetch=1, auto_accept=True)
        self.address, self.payload = address, payload
        self.listener, self.consumer_frame = listener, consumer_frame
        self.partial_before_rest = 0
        self.rest_sent = False
        self.body: Any = None
        self.outcome: int | None = None
        self.consumer_frames: list[str] = []
        self.producer_remote_max_frame = 0

    def on_start(self, event: Any) -> None:
        self.consumer = self.connect(event.container, self.listener, max_frame_size=self.consumer_frame)
        event.container.create_receiver(self.consumer, self.address, name="consumer")

    def on_connection_bound(self, event: Any) -> None:
        if event.connection == self.consumer:
            trace_frames(event.transport, self.consumer_frames)

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "consumer":
            self.producer = self.connect(event.container, self.listener)
            self.sender = event.container.create_sender(self.producer, self.address)
            self.started = False

    def on_sendable(self, event: Any) -> None:
        if not self.started:
            self.started = True
            self.producer_remote_max_frame = event.transport.remote_max_frame_size
            event.sender.delivery(b"big")
            event.sender.stream(self.payload[: len(self.payload) // 2])

    def on_delivery(self, event: Any) -> None:
        delivery = event.delivery
        if delivery.link.is_receiver and delivery.partial and not self.rest_sent:
            self.rest_sent = True
            self.partial_before_rest = delivery.pending
            self.sender.stream(self.payload[len(self.payload) // 2 :])
            self.sender.advance()

    def on_message(self, event: Any) -> None:
        self.body = bytes(event.message.body)  # a view of Proton's buffer: copy it

    def on_accepted(self, event: Any) -> None:
        self.outcome = event.delivery.remote_state
        self.finish()


async def test_ten_megabytes_cut_through_in_small_frames_arrive_intact(router: RouterProcess) -> None:
    body = os.urandom(10 * MiB)
    payload = Message(body=body, inferred=True).encode()  # one data section
    clients = LargeMessage(router, "big.q", payload, "small", consumer_frame=4096)
    await run_clients(clients, timeout_s=30)
    clients.check()
    assert clients.producer_remote_max_frame == 4096  # the listener's max_frame_size
    assert clients.partial_before_rest > 0  # forwarded while the producer still held half of it
    assert clients.outcome == Delivery.ACCEPTED
    assert clients.body == body
    transfers = performatives(clients.consumer_frames, "<-")["transfer"]
    assert transfers >= len(payload) // 4096  # the consumer got it in frames of at most 4 KiB


async def test_blocking_ten_megabytes_reframed_for_a_small_frame_consumer(router: RouterProcess) -> None:
    body = os.urandom(10 * MiB)

    def consume() -> bytes:
        conn = BlockingConnection(url(router), timeout=TIMEOUT_S, max_frame_size=4096)
        try:
            receiver = conn.create_receiver("big.blocking", credit=1)
            msg = receiver.receive(timeout=TIMEOUT_S)
            receiver.accept()
            return bytes(cast(bytes, msg.body))  # a data section (a view of Proton's buffer)
        finally:
            conn.close()

    def produce() -> int:
        conn = BlockingConnection(url(router), timeout=TIMEOUT_S)  # 64 KiB frames in
        try:
            return conn.create_sender("big.blocking").send(Message(body=body, inferred=True)).remote_state
        finally:
            conn.close()

    received, state = await run_threads(consume, produce, timeout_s=30)
    assert state == Delivery.ACCEPTED
    assert received == body


class ProducerAborts(Clients):
    """The producer streams part of a message, aborts it once the consumer has some of it, then
    sends an ordinary message on the same link."""

    def __init__(self, router: RouterProcess, address: str) -> None:
        super().__init__(router)
        self.address = address
        self.aborted = 0
        self.bodies: list[Any] = []
        self.partial_seen = False
        self.outcome: int | None = None

    def on_start(self, event: Any) -> None:
        event.container.create_receiver(self.connect(event.container), self.address, name="consumer")

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "consumer":
            self.sender = event.container.create_sender(self.connect(event.container), self.address)
            self.started = False

    def on_sendable(self, event: Any) -> None:
        if not self.started:
            self.started = True
            self.streaming = event.sender.delivery(b"doomed")
            event.sender.stream(Message(body=b"x" * 300_000, inferred=True).encode()[:150_000])

    def on_delivery(self, event: Any) -> None:
        delivery = event.delivery
        if delivery.link.is_receiver and delivery.partial and not delivery.aborted and not self.partial_seen:
            self.partial_seen = True
            self.streaming.abort()
            self.sender.send(Message(body="after"))

    def on_aborted(self, event: Any) -> None:
        self.aborted += 1

    def on_message(self, event: Any) -> None:
        self.bodies.append(event.message.body)

    def on_accepted(self, event: Any) -> None:
        self.outcome = event.delivery.remote_state
        self.finish()


async def test_a_producer_abort_reaches_the_consumer(router: RouterProcess) -> None:
    clients = ProducerAborts(router, "abort.q")
    await run_clients(clients)
    clients.check()
    assert clients.partial_seen
    assert clients.aborted == 1
    assert clients.bodies == ["after"]  # the aborted message never arrived as a message
    assert clients.outcome == Delivery.ACCEPTED


PRODUCER_SCRIPT = """
import sys
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

class HalfSender(MessagingHandler):
    def __init__(self):
        super().__init__()
        self.started = False

    def on_start(self, event):
        conn = event.container.connect(sys.argv[1], reconnect=False)
        event.container.create_sender(conn, sys.argv[2])

    def on_sendable(self, event):
        if not self.started:
            self.started = True
            event.sender.delivery(b"half")
            event.sender.stream(Message(body=b"y" * 1000000, inferred=True).encode()[:200000])

Container(HalfSender()).run()
"""


class WaitForAbort(Clients):
    """A consumer that reports (to another thread) when part of a delivery has arrived, and ends
    when the delivery is aborted."""

    def __init__(self, router: RouterProcess, address: str) -> None:
        super().__init__(router)
        self.address = address
        self.attached = threading.Event()
        self.partial = threading.Event()
        self.aborted = 0
        self.bodies: list[Any] = []

    def on_start(self, event: Any) -> None:
        event.container.create_receiver(self.connect(event.container), self.address)

    def on_link_opened(self, event: Any) -> None:
        self.attached.set()

    def on_delivery(self, event: Any) -> None:
        if event.delivery.partial and not event.delivery.aborted:
            self.partial.set()

    def on_aborted(self, event: Any) -> None:
        self.aborted += 1
        self.finish()

    def on_message(self, event: Any) -> None:
        self.bodies.append(event.message.body)
        self.finish()


async def test_a_producer_dying_mid_message_aborts_it_downstream(router: RouterProcess) -> None:
    address = "dying.q"
    clients = WaitForAbort(router, address)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_clients, clients)
        producer = await trio.lowlevel.open_process(
            [sys.executable, "-c", PRODUCER_SCRIPT, url(router), address], env=router_env()
        )
        try:
            assert await trio.to_thread.run_sync(clients.partial.wait, TIMEOUT_S)
        finally:
            producer.kill()  # mid-message
            await producer.wait()
    clients.check()
    assert clients.aborted == 1
    assert clients.bodies == []


# --- expiry --------------------------------------------------------------------------------------------


class Expiry(Clients):
    """One consumer; an unsettled producer sends an expired (absolute expiry), an expired (ttl
    from creation time) and a fresh message; a presettled producer sends an expired and then a
    fresh message."""

    def __init__(self, router: RouterProcess, address: str) -> None:
        super().__init__(router)
        self.address = address
        self.received: list[Any] = []
        self.outcomes: dict[str, int] = {}
        self.tags: dict[bytes, str] = {}
        self.sent: set[str] = set()

    def on_start(self, event: Any) -> None:
        event.container.create_receiver(self.connect(event.container), self.address, name="consumer")

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "consumer":
            conn = self.connect(event.container)
            event.container.create_sender(conn, self.address, name="unsettled")
            event.container.create_sender(conn, self.address, name="presettled", options=AtMostOnce())

    def on_sendable(self, event: Any) -> None:
        name = event.sender.name
        if name in self.sent:
            return
        self.sent.add(name)
        now = time.time()
        if name == "unsettled":
            for body, msg in [
                ("absolute", Message(body="absolute", expiry_time=now - 1)),
                ("ttl", Message(body="ttl", ttl=0.5, creation_time=now - 2)),
                ("fresh", Message(body="fresh", ttl=60)),
            ]:
                self.tags[event.sender.send(msg).tag] = body
        else:
            event.sender.send(Message(body="presettled expired", expiry_time=now - 1))
            event.sender.send(Message(body="presettled fresh", ttl=60))

    def on_message(self, event: Any) -> None:
        self.received.append(event.message.body)
        self._maybe_done()

    def on_accepted(self, event: Any) -> None:
        self.outcomes[self.tags[event.delivery.tag]] = event.delivery.remote_state
        self._maybe_done()

    on_rejected = on_released = on_accepted

    def _maybe_done(self) -> None:
        if len(self.outcomes) == 3 and "presettled fresh" in self.received:
            self.finish()


async def test_expired_messages_are_not_forwarded(router: RouterProcess) -> None:
    clients = Expiry(router, "expiry.q")
    await run_clients(clients)
    clients.check()
    assert clients.outcomes == {"absolute": RE, "ttl": RE, "fresh": A}
    # The presettled expired message went before the fresh one on the same link: it was dropped.
    assert sorted(clients.received) == ["fresh", "presettled fresh"]


class ExpiresWhileWaiting(Clients):
    """A consumer without credit; a message with a short ttl waits in the router and expires
    there (released to the producer, by the router's timer); then the consumer grants credit
    and a second message is the first it gets."""

    def __init__(self, router: RouterProcess, address: str) -> None:
        super().__init__(router, prefetch=0)
        self.address = address
        self.outcomes: list[tuple[Any, int]] = []
        self.received: list[Any] = []
        self.sent = False

    def on_start(self, event: Any) -> None:
        self.receiver = event.container.create_receiver(self.connect(event.container), self.address)

    def on_link_opened(self, event: Any) -> None:
        if event.link == self.receiver:
            self.sender = event.container.create_sender(self.connect(event.container), self.address)

    def on_sendable(self, event: Any) -> None:
        if not self.sent:
            self.sent = True
            self.first = event.sender.send(Message(body="stale soon", ttl=0.3)).tag

    def on_released(self, event: Any) -> None:
        self.outcomes.append((event.delivery.tag, event.delivery.remote_state))
        self.receiver.flow(10)
        self.sender.send(Message(body="after"))

    def on_message(self, event: Any) -> None:
        self.received.append(event.message.body)
        self.finish()


async def test_a_message_expiring_while_waiting_for_credit_is_released(router: RouterProcess) -> None:
    clients = ExpiresWhileWaiting(router, "expiry.waiting")
    await run_clients(clients)
    clients.check()
    assert clients.outcomes == [(clients.first, Delivery.RELEASED)]
    assert clients.received == ["after"]


# --- router annotations --------------------------------------------------------------------------------


async def test_router_annotations_from_clients_are_stripped(router: RouterProcess) -> None:
    address = "annotations.q"
    forged = {
        symbol("x-opt-qd.trace"): ["0/evil"],
        symbol("x-opt-qd.to"): "elsewhere",  # must not redirect the message either
        symbol("x-opt-qd.ingress"): "0/fake",
    }

    def consume() -> list[Any]:
        conn = BlockingConnection(url(router), timeout=TIMEOUT_S)
        try:
            receiver = conn.create_receiver(address, credit=2)
            got = []
            for _ in range(2):
                msg = receiver.receive(timeout=TIMEOUT_S)
                got.append((msg.body, msg.annotations))
                receiver.accept()
            return got
        finally:
            conn.close()

    def produce() -> None:
        conn = BlockingConnection(url(router), timeout=TIMEOUT_S)
        try:
            sender = conn.create_sender(address)
            sender.send(Message(body="mixed", annotations={**forged, symbol("x-opt-app"): 7}))
            sender.send(Message(body="only router keys", annotations=forged))
        finally:
            conn.close()

    got, _ = await run_threads(consume, produce)
    assert got[0] == ("mixed", {"x-opt-app": 7})
    assert got[1][0] == "only router keys" and not got[1][1]


# --- limits --------------------------------------------------------------------------------------------


async def test_max_connections(own_router: Callable[[dict[str, Any]], RouterProcess]) -> None:
    limited = own_router({"listeners": [{"name": "amqp", "port": 0}], "limits": {"max_connections": 2}})

    def run() -> tuple[Any, Any]:
        first = BlockingConnection(url(limited), timeout=TIMEOUT_S)
        second = BlockingConnection(url(limited), timeout=TIMEOUT_S)
        refused: Any = None
        try:
            try:
                BlockingConnection(url(limited), timeout=TIMEOUT_S).close()
            except ConnectionClosed as exc:  # the refused connection is gone: its text has the condition
                refused = str(exc)
            first.close()  # a place is free again
            again = BlockingConnection(url(limited), timeout=TIMEOUT_S)
            try:
                state = again.create_sender(None).link.remote_snd_settle_mode  # usable: attach answered
            finally:
                again.close()
            return refused, state
        finally:
            second.close()
            first.close()

    refused, state = await run_in_thread(run)
    assert refused is not None and E.RESOURCE_LIMIT_EXCEEDED in refused
    assert state is not None


class OversizeMessages(Clients):
    """Send a small, a large and another small message to a consumer through a router with
    limits.max_message_size; record outcomes (with conditions) and what the consumer saw."""

    expected_errors = False

    def __init__(self, router: RouterProcess, address: str, listener: str, big: int) -> None:
        super().__init__(router)
        self.address, self.listener, self.big = address, listener, big
        self.outcomes: dict[str, tuple[int, str | None]] = {}
        self.tags: dict[bytes, str] = {}
        self.received: list[Any] = []
        self.aborted = 0
        self.remote_max: Any = None
        self.sent = False

    def on_start(self, event: Any) -> None:
        event.container.create_receiver(self.connect(event.container, self.listener), self.address, name="consumer")

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "consumer":
            event.container.create_sender(self.connect(event.container, self.listener), self.address, name="producer")
        elif event.link.name == "producer":
            self.remote_max = event.link.remote_max_message_size

    def on_sendable(self, event: Any) -> None:
        if self.sent:
            return
        self.sent = True
        for label, size in [("small", 100), ("big", self.big), ("small again", 200)]:
            self.tags[event.sender.send(Message(body=b"z" * size, inferred=True)).tag] = label

    def on_aborted(self, event: Any) -> None:
        self.aborted += 1

    def on_message(self, event: Any) -> None:
        self.received.append(len(event.message.body))

    def on_accepted(self, event: Any) -> None:
        self.outcomes[self.tags[event.delivery.tag]] = (event.delivery.remote_state, condition(event.delivery.remote)[0])
        if len(self.outcomes) == 3:
            self.finish()

    on_rejected = on_released = on_accepted


@pytest.mark.parametrize(
    ("listener", "big", "aborted"),
    [
        ("amqp", 200_000, 0),  # its first frame (64 KiB) is already too big: refused at once
        ("small", 50_000, 1),  # 4 KiB frames: it grows past the limit while cut through
    ],
)
async def test_max_message_size(own_router: Callable[[dict[str, Any]], RouterProcess], listener: str, big: int, aborted: int) -> None:
    limited = own_router({
        "listeners": [{"name": "amqp", "port": 0}, {"name": "small", "port": 0, "max_frame_size": 4096}],
        "limits": {"max_message_size": 30_000},
    })  # fmt: skip
    clients = OversizeMessages(limited, "size.q", listener, big)
    await run_clients(clients)
    clients.check()
    assert clients.remote_max == 30_000  # advertised on the producer's attach
    assert clients.outcomes == {
        "small": (A, None),
        "big": (R, E.MESSAGE_SIZE_EXCEEDED),
        "small again": (A, None),  # the link is still usable
    }
    assert clients.received == [100, 200]
    assert clients.aborted == aborted


class Sessions(Clients):
    """Open as many sessions as the router's channel-max allows."""

    def __init__(self, router: RouterProcess) -> None:
        super().__init__(router)
        self.channel_max = -1
        self.opened = 0

    def on_start(self, event: Any) -> None:
        self.conn = self.connect(event.container, "tight")

    def on_connection_opened(self, event: Any) -> None:
        self.channel_max = event.transport.remote_channel_max
        for _ in range(self.channel_max + 1):  # channels 0 .. channel-max
            self.conn.session().open()

    def on_session_opened(self, event: Any) -> None:
        self.opened += 1
        if self.opened == self.channel_max + 1:
            self.finish()


async def test_max_sessions_per_connection_is_advertised_as_channel_max_and_enforced(router: RouterProcess) -> None:
    clients = Sessions(router)
    await run_clients(clients)
    clients.check()
    assert clients.channel_max == 3  # max_sessions_per_connection 4: channels 0..3
    assert clients.opened == 4
    # Proton never goes past channel-max itself; a raw client that does is refused.
    assert await _begin_on_channel(router.ports["tight"], 4) == E.FRAMING_ERROR


async def _begin_on_channel(port: int, channel: int) -> str | None:
    """Open a connection with our engine, then send a begin on `channel` by hand; return the
    condition of the router's close."""
    engine = Connection(ConnectionConfig(container_id="raw"))
    engine.open()
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(engine.data_to_send())
        await stream.send_all(frame(channel, Begin(next_outgoing_id=0, incoming_window=100, outgoing_window=100)))
        with trio.fail_after(TIMEOUT_S):
            while True:
                data = await stream.receive_some(65536)
                engine.receive_data(data, time.monotonic())
                for event in engine.events():
                    if isinstance(event, RemoteClose):
                        return event.error.condition if event.error is not None else None
                if not data:
                    return None


async def test_max_links_per_connection(router: RouterProcess) -> None:
    def run() -> tuple[str | None, str | None]:
        conn = BlockingConnection(url(router, "tight"), timeout=TIMEOUT_S)
        try:
            links = [conn.create_receiver(f"links.{i}") for i in range(3)]  # the limit
            refused: tuple[str | None, str | None] = (None, None)
            try:
                conn.create_receiver("links.one-too-many")
            except LinkDetached as exc:
                refused = condition(exc.link)
            links.pop().close()  # type: ignore[no-untyped-call]  # below the limit again:
            conn.create_sender("links.again")  # a new link is allowed (raises if refused)
            return refused
        finally:
            conn.close()

    refused = await run_in_thread(run)
    assert refused[0] == E.RESOURCE_LIMIT_EXCEEDED
    assert refused[1] is not None and "link limit (3)" in refused[1]


# --- graceful shutdown ---------------------------------------------------------------------------------


class ForcedClose(Clients):
    """A consumer and a producer (its message waiting for credit in the router) on a Container;
    records the condition of the router's close on each connection."""

    expected_errors = True

    def __init__(self, router: RouterProcess) -> None:
        super().__init__(router, prefetch=0)
        self.ready = threading.Event()
        self.closed_with: list[str | None] = []
        self.sent = False

    def on_start(self, event: Any) -> None:
        self.receiver = event.container.create_receiver(self.connect(event.container), "shutdown.q")

    def on_link_opened(self, event: Any) -> None:
        if event.link == self.receiver:
            self.producer = self.connect(event.container)
            event.container.create_sender(self.producer, "shutdown.q")
        elif event.link.name == "ready":
            self.ready.set()

    def on_sendable(self, event: Any) -> None:
        if not self.sent:
            self.sent = True
            event.sender.send(Message(body="in flight"))
            self.probe(event.container, self.producer, "ready")

    def on_connection_remote_close(self, event: Any) -> None:
        self.closed_with.append(condition(event.connection)[0])
        event.connection.close()  # Proton leaves a connection closed with "forced" open
        if len(self.closed_with) == len(self.connections):
            self.done = True


async def test_sigterm_closes_proton_clients_with_connection_forced_and_exits_0(
    own_router: Callable[[dict[str, Any]], RouterProcess],
) -> None:
    router = own_router({"listeners": [{"name": "amqp", "port": 0}]})
    blocking_ready = threading.Event()

    def blocking() -> str | None:
        conn = BlockingConnection(url(router), timeout=TIMEOUT_S)
        try:
            receiver = conn.create_receiver("shutdown.blocking", credit=1)
            blocking_ready.set()
            try:
                receiver.receive(timeout=TIMEOUT_S)
            except ConnectionClosed as exc:
                return condition(exc.connection)[0]
            return "not closed"
        finally:
            conn.close()

    clients = ForcedClose(router)
    results: dict[str, Any] = {}

    async def run_blocking() -> None:
        results["blocking"] = await run_in_thread(blocking)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_blocking)
        nursery.start_soon(run_clients, clients)
        for ready in (blocking_ready, clients.ready):
            assert await trio.to_thread.run_sync(ready.wait, TIMEOUT_S)
        router.send_signal(signal.SIGTERM)
    code = await trio.to_thread.run_sync(router.wait, TIMEOUT_S)
    assert code == 0, router.output
    assert not _problems(router.stderr), router.output
    assert results["blocking"] == E.CONNECTION_FORCED
    clients.check()
    assert clients.closed_with == [E.CONNECTION_FORCED, E.CONNECTION_FORCED]
