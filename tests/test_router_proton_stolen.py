"""The single router with Proton clients (tests/support/router_proton.py): a link a client
attaches again, by name, on the same session is stolen (transport 2.6.1): the first is detached
with amqp:link:stolen, the second works, and the first goes as any detached link (what it held
gets an outcome, the router's management counts go back)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from proton import Message
from proton.utils import BlockingConnection, LinkDetached

from router.amqp import errors as E

from .support.interop import run_in_thread
from .support.router_process import RouterProcess
from .support.router_proton import (
    A,
    M,
    R,
    RE,
    TIMEOUT_S,
    Clients,
    condition,
    router,
    run_clients,
    shared_router,
    url,
)

pytestmark = [pytest.mark.interop, pytest.mark.process]


# --- the router's management, over AMQP --------------------------------------------------------------


def _query(conn: BlockingConnection, entity_type: str, names: list[str]) -> list[dict[str, Any]]:
    replies = conn.create_receiver(None, dynamic=True)
    requests = conn.create_sender("$management")
    try:
        request = Message(properties={"operation": "QUERY", "entityType": entity_type}, body={"attributeNames": names},
                          reply_to=replies.remote_source.address, id="query")  # fmt: skip
        requests.send(request, timeout=TIMEOUT_S)
        reply = replies.receive(timeout=TIMEOUT_S)
        assert reply.properties["statusCode"] == 200, reply.properties
        return [dict(zip(reply.body["attributeNames"], row)) for row in reply.body["results"]]
    finally:
        requests.close()
        replies.close()


def links_named(router: RouterProcess, names: set[str]) -> Counter[str]:
    """How many links of each of `names` the router has (management's router.link rows)."""
    conn = BlockingConnection(url(router), timeout=TIMEOUT_S)
    try:
        return Counter(row["name"] for row in _query(conn, "router.link", ["name"]) if row["name"] in names)
    finally:
        conn.close()


# --- stealing -----------------------------------------------------------------------------------------


class TwoReceivers(Clients):
    """One connection (one session): a receiver named "dup", once it is attached a second one of
    the same name; then a producer sends one message."""

    expected_errors = True  # the first receiver's amqp:link:stolen

    def __init__(self, router: RouterProcess, address: str) -> None:
        super().__init__(router)
        self.address = address
        self.first: Any = None
        self.second: Any = None
        self.sent = False
        self.got: list[tuple[str, Any]] = []
        self.outcomes: list[int] = []

    def on_start(self, event: Any) -> None:
        self.conn = self.connect(event.container)
        self.first = event.container.create_receiver(self.conn, self.address, name="dup")

    def on_link_opened(self, event: Any) -> None:
        if event.link == self.first and self.second is None:
            self.second = event.container.create_receiver(self.conn, self.address, name="dup")
        elif event.link == self.second:
            event.container.create_sender(self.connect(event.container), self.address, name="producer")

    def on_sendable(self, event: Any) -> None:
        if not self.sent:
            self.sent = True
            event.sender.send(Message(body="to the second"))

    def on_message(self, event: Any) -> None:
        self.got.append(("second" if event.link == self.second else "first", event.message.body))

    def on_accepted(self, event: Any) -> None:
        self.outcomes.append(event.delivery.remote_state)
        self.finish()


async def test_a_second_receiver_of_the_same_name_steals_the_first(router: RouterProcess) -> None:
    clients = TwoReceivers(router, "stolen.receiver")
    await run_clients(clients)
    assert clients.done
    # The first receiver was detached with amqp:link:stolen, and only it; the second works.
    assert [(kind, name) for kind, name, _ in clients.errors] == [("link", E.STOLEN)]
    assert "stolen" in (clients.errors[0][2] or "")
    assert clients.got == [("second", "to the second")] and clients.outcomes == [A]
    assert links_named(router, {"dup", "producer"}) == Counter()  # every one gone with its connection


class StolenWithUnsettled(Clients):
    """A consumer holds the producer's messages unsettled, then attaches its receiver again (same
    name, same session): the first is stolen, what it held gets an outcome at the producer, and
    the second receiver takes the next message. Before the scenario ends, the router's link
    rows are counted: the stolen link is gone."""

    expected_errors = True

    def __init__(self, router: RouterProcess, address: str, n: int) -> None:
        super().__init__(router, auto_accept=False, prefetch=0)
        self.address, self.n = address, n
        self.first: Any = None
        self.second: Any = None
        self.sent = 0
        self.held = 0
        self.outcomes: Counter[str] = Counter()
        self.failed: list[bool] = []
        self.second_got: list[Any] = []
        self.links_after: Counter[str] | None = None

    def on_start(self, event: Any) -> None:
        self.container = event.container
        self.conn = self.connect(event.container)
        self.first = event.container.create_receiver(self.conn, self.address, name="held")
        self.first.flow(self.n)

    def on_link_opened(self, event: Any) -> None:
        if event.link == self.first:
            self.producer = event.container.create_sender(self.connect(event.container), self.address, name="feeder")

    def on_sendable(self, event: Any) -> None:
        while event.sender.credit > 0 and self.sent < self.n:
            event.sender.send(Message(body=self.sent))
            self.sent += 1

    def on_message(self, event: Any) -> None:
        if event.link == self.first:
            self.held += 1  # never settled
            if self.held == self.n:
                self.second = self.container.create_receiver(self.conn, self.address, name="held")
                self.second.flow(1)
        else:
            self.second_got.append(event.message.body)
            self.accept(event.delivery)

    def on_accepted(self, event: Any) -> None:
        state = event.delivery.remote_state
        self.outcomes[{A: "accepted", R: "rejected", RE: "released", M: "modified"}[state]] += 1
        if state == M:
            self.failed.append(event.delivery.remote.failed)
        if sum(self.outcomes.values()) == self.n:  # the stolen link's: the next goes to the second
            event.sender.send(Message(body="after"))
            self.sent += 1
        elif sum(self.outcomes.values()) == self.n + 1:
            self.links_after = links_named(self.router, {"held", "feeder"})
            self.finish()

    on_rejected = on_released = on_accepted


async def test_a_stolen_receiver_holding_unsettled_deliveries_leaves_none_without_an_outcome(
    router: RouterProcess,
) -> None:
    n = 5
    clients = StolenWithUnsettled(router, "stolen.unsettled", n)
    await run_clients(clients)
    assert clients.done
    assert [(kind, name) for kind, name, _ in clients.errors] == [("link", E.STOLEN)]
    # sent to the stolen link, never settled: modified (delivery-failed), as when a consumer detaches
    assert clients.outcomes == Counter(modified=n, accepted=1) and all(clients.failed)
    assert clients.second_got == ["after"]
    # The router's link rows while the scenario still runs: the second receiver and the producer.
    assert clients.links_after == Counter(held=1, feeder=1)
    assert links_named(router, {"held", "feeder"}) == Counter()


class StolenSender(Clients):
    """A producer whose messages a consumer holds unsettled attaches its sender again (same
    name, same session): the first is stolen, the second sends on; the consumer then accepts
    everything."""

    expected_errors = True

    def __init__(self, router: RouterProcess, address: str, n: int) -> None:
        super().__init__(router, auto_accept=False)
        self.address, self.n = address, n
        self.first: Any = None
        self.second: Any = None
        self.sent: dict[str, int] = {"first": 0, "second": 0}
        self.received: list[Any] = []
        self.accepted: list[str] = []
        self.links_after: Counter[str] | None = None

    def on_start(self, event: Any) -> None:
        self.container = event.container
        self.consumer = event.container.create_receiver(self.connect(event.container), self.address, name="sink")
        self.conn = self.connect(event.container)

    def on_link_opened(self, event: Any) -> None:
        if event.link == self.consumer:
            self.first = self.container.create_sender(self.conn, self.address, name="source")

    def on_sendable(self, event: Any) -> None:
        which = "first" if event.sender == self.first else "second"
        while event.sender.credit > 0 and self.sent[which] < self.n:
            event.sender.send(Message(body=f"{which} {self.sent[which]}"))
            self.sent[which] += 1

    def on_message(self, event: Any) -> None:
        self.received.append(event.message.body)
        if len(self.received) == self.n and self.second is None:  # the first's, all held unsettled
            self.second = self.container.create_sender(self.conn, self.address, name="source")
        elif len(self.received) == 2 * self.n:
            self.links_after = links_named(self.router, {"sink", "source"})
            self.finish()
        if len(self.received) > self.n:
            self.accept(event.delivery)

    def on_accepted(self, event: Any) -> None:
        self.accepted.append("first" if event.link == self.first else "second")


async def test_a_stolen_sender_with_unsettled_deliveries_leaks_nothing(router: RouterProcess) -> None:
    n = 5
    clients = StolenSender(router, "stolen.sender", n)
    await run_clients(clients)
    assert clients.done
    assert [(kind, name) for kind, name, _ in clients.errors] == [("link", E.STOLEN)]
    # The first sender's messages were delivered (the consumer holds them); its link is gone,
    # so their outcomes have no way back to it. The second's are accepted.
    assert sorted(clients.received) == sorted([f"first {i}" for i in range(n)] + [f"second {i}" for i in range(n)])
    assert "first" not in clients.accepted
    assert clients.links_after == Counter(sink=1, source=1)
    assert links_named(router, {"sink", "source"}) == Counter()


async def test_a_blocking_connection_that_reuses_a_receiver_name_is_told_at_once(router: RouterProcess) -> None:
    # Before, the router ended the session (not-allowed) and the second create_receiver waited
    # for its attach until its time-out. Now the first receiver's detach (stolen) comes with the
    # second's attach; Proton's blocking API raises LinkDetached for it, and the session goes on.
    def run() -> tuple[bool, tuple[str | None, str | None], Any]:
        conn = BlockingConnection(url(router), timeout=TIMEOUT_S)
        try:
            first = conn.create_receiver("stolen.blocking", name="again")
            try:
                conn.create_receiver("stolen.blocking", name="again")
                raise AssertionError("the first receiver was not detached")
            except LinkDetached as exc:
                which, stolen = exc.link == first.link, condition(exc.link)
            after = conn.create_receiver("stolen.blocking.after", name="after")  # (raises if refused)
            return which, stolen, after.link.remote_source.address
        finally:
            conn.close()

    first, stolen, address = await run_in_thread(run, timeout_s=TIMEOUT_S + 5)
    assert first and stolen[0] == E.STOLEN and address == "stolen.blocking.after"
