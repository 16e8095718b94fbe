"""The single router with Proton clients (tests/support/router_proton.py): addresses (mobile,
local and topological forms, distribution by prefix and pattern, closest and balanced), the
anonymous relay, and request-response through dynamic reply addresses."""

from __future__ import annotations

from typing import Any

import pytest
from proton import Delivery, Message, symbol
from proton.utils import BlockingConnection, SyncRequestResponse

from router.amqp import errors as E

from .support.router_process import RouterProcess
from .support.router_proton import (
    Clients,
    ROUTER_ID,
    RequestResponse,
    TIMEOUT_S,
    condition,
    router,
    run_clients,
    run_threads,
    shared_router,
    url,
)

pytestmark = [pytest.mark.interop, pytest.mark.process]


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
    assert clients.initial_credit == 256  # anonymous senders get their (first) window at once
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


async def test_container_request_response_through_a_dynamic_reply_address(router: RouterProcess) -> None:
    clients = RequestResponse(router, "rpc.reactor", 5)
    await run_clients(clients)
    clients.check()
    assert clients.reply_to is not None and clients.reply_to.startswith(f"_topo/0/{ROUTER_ID}/temp.")
    assert sorted(clients.responses) == [(i, f"REQUEST {i}") for i in range(5)]
