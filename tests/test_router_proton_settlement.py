"""The single router with Proton clients (tests/support/router_proton.py): settlement (a
consumer's outcome reaches the producer, settle modes, presettled and at-most-once traffic,
multicast outcomes)."""

from __future__ import annotations

from typing import Any

import pytest
from proton import Condition, Delivery, Link, Message, symbol
from proton.reactor import AtMostOnce

from .support.router_process import RouterProcess
from .support.router_proton import (
    A,
    Clients,
    M,
    R,
    RE,
    SettleSecond,
    performatives,
    router,
    run_clients,
    shared_router,
    trace_frames,
)

pytestmark = [pytest.mark.interop, pytest.mark.process]


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
    """A consumer in rcv-settle-mode second sends its outcome unsettled and waits for the router
    to settle. A producer in rcv-settle-mode second (`producer_second`) is told the outcome
    unsettled (settlement travels end to end, as with the anchors); it settles once it has seen
    it; only then does the router settle towards the consumer, which settles last (transport
    §2.6.12: the three acknowledgements). A producer in mode first (the default) is told the
    outcome settled, the router being a first-mode receiver (transport §2.7.5), and the router
    settles towards the consumer at once, the producer doing nothing (auto_settle off)."""

    def __init__(self, router: RouterProcess, address: str, producer_second: bool) -> None:
        super().__init__(router, auto_accept=False, auto_settle=False)
        self.address, self.producer_second = address, producer_second
        self.mode: int | None = None
        self.producer_mode: int | None = None
        self.router_settled_with: int | None = None
        self.producer_saw: tuple[int, bool] | None = None
        self.sent = False

    def on_start(self, event: Any) -> None:
        conn = self.connect(event.container)
        event.container.create_receiver(conn, self.address, name="consumer", options=SettleSecond())

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "consumer":
            self.mode = event.link.remote_rcv_settle_mode
            options = SettleSecond() if self.producer_second else None
            event.container.create_sender(self.connect(event.container), self.address, options=options)
        elif event.link.is_sender:
            self.producer_mode = event.link.remote_rcv_settle_mode

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
            if self.producer_second:
                event.delivery.settle()  # the producer is done: the router may settle the consumer's
        self._maybe_done()

    def _maybe_done(self) -> None:
        if self.router_settled_with is not None and self.producer_saw is not None:
            self.finish()


@pytest.mark.parametrize("producer", ["first", "second"])
async def test_consumer_in_receiver_settle_mode_second(router: RouterProcess, producer: str) -> None:
    second = producer == "second"
    clients = ConsumerSettleSecond(router, f"settle.consumer.second.{producer}", second)
    await run_clients(clients)
    clients.check()
    assert clients.mode == Link.RCV_SECOND
    assert clients.producer_mode == (Link.RCV_SECOND if second else Link.RCV_FIRST)
    assert clients.router_settled_with == Delivery.ACCEPTED
    # second: the outcome, not settled (the producer settles first); first: settled
    assert clients.producer_saw == (Delivery.ACCEPTED, not second)


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
