"""router.net.management_client against whole routers on memory streams (virtual time): many
requests at once on one ManagementSession each get their own reply, replies nobody waits for are
dropped (and settled), and a dropped connection fails every waiting request at once.

Time-outs are short and checked in virtual time: a request that waited for its time-out instead
of its reply shows as elapsed time, and fails the test, in a fraction of a real second."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from router.amqp.message import Message
from router.amqp.messaging import Accepted, Properties
from router.config.models import Listener, RouterConfig, RouterSection
from router.net.client import Client, ConnectionClosed, Receiver, Sender, connect
from router.net.management_client import ManagementSession, NoReply, management_session
from router.testing.memrouter import MemNetwork, MemRouter

TIMEOUT_S = 5.0  # each request's time-out (virtual seconds)
MANY = 20


async def solo(mem_network: MemNetwork) -> MemRouter:
    return await mem_network.start(RouterConfig(router=RouterSection(id="solo"), listeners=(Listener(port=0),)))


@asynccontextmanager
async def echo_service(client: Client, address: str) -> AsyncIterator[tuple[Receiver, Sender]]:
    """A receiver of the requests sent to `address` (a stand-in management node that answers
    when and how the test says) and an anonymous sender for its replies."""
    receiver = await client.open_receiver(address, credit=2 * MANY)
    sender = await client.open_sender(None)
    yield receiver, sender


def reply_to(request: Message, body: Any, *, correlation_id: Any = None) -> Message:
    props = request.properties
    assert props is not None and props.reply_to
    return Message.value(
        body,
        properties=Properties(to=props.reply_to, correlation_id=props.message_id if correlation_id is None else correlation_id),
        application_properties={"statusCode": 200, "statusDescription": "OK"},
    )


async def take(receiver: Receiver, n: int) -> list[Message]:
    requests = []
    for _ in range(n):
        delivery = await receiver.receive()
        receiver.accept(delivery)
        requests.append(delivery.message)
    return requests


async def test_many_requests_at_once_each_get_their_own_reply_from_the_router(
    autojump_clock: trio.testing.MockClock, mem_network: MemNetwork
) -> None:
    router = await solo(mem_network)
    async with router.connect() as client, management_session(client, timeout_s=TIMEOUT_S) as mgmt:
        created: dict[int, Any] = {}
        read: dict[int, Any] = {}

        async def create(i: int) -> None:
            created[i] = await mgmt.create("address", {"prefix": f"p{i}", "distribution": "closest"}, name=f"rule-{i}")

        async def read_back(i: int) -> None:
            read[i] = await mgmt.read("address", name=f"rule-{i}")

        started = trio.current_time()
        async with trio.open_nursery() as nursery:
            for i in range(MANY):
                nursery.start_soon(create, i)
        async with trio.open_nursery() as nursery:
            for i in range(MANY):
                nursery.start_soon(read_back, i)
        elapsed = trio.current_time() - started
        assert mgmt.pending == 0
    assert elapsed < TIMEOUT_S / 2, f"took {elapsed:g} s: some request waited for its time-out"
    assert {i: (c["name"], c["prefix"]) for i, c in created.items()} == {i: (f"rule-{i}", f"p{i}") for i in range(MANY)}
    assert {i: (r["name"], r["prefix"]) for i, r in read.items()} == {i: (f"rule-{i}", f"p{i}") for i in range(MANY)}
    assert {rule["name"] for rule in router.agent.entities("address")} >= {f"rule-{i}" for i in range(MANY)}


async def test_replies_in_any_order_reach_their_requests_and_strays_are_dropped(
    autojump_clock: trio.testing.MockClock, mem_network: MemNetwork
) -> None:
    router = await solo(mem_network)
    async with router.connect() as service_conn, echo_service(service_conn, "svc") as (requests, replies), \
            router.connect() as client, management_session(client, timeout_s=TIMEOUT_S) as mgmt:  # fmt: skip
        got: dict[int, Any] = {}

        async def ask(i: int) -> None:
            got[i] = await mgmt.call("ECHO", address="svc", body={"n": i})

        started = trio.current_time()
        async with trio.open_nursery() as nursery:
            for i in range(MANY):
                nursery.start_soon(ask, i)
            asked = await take(requests, MANY)
            # Strays first: a correlation-id of nobody's, one of another type, none at all.
            to = reply_to(asked[0], "stray").properties.to  # type: ignore[union-attr]
            strays = [reply_to(asked[0], "stray", correlation_id="not-ours"), reply_to(asked[0], "stray", correlation_id=7),
                      Message.value("stray", properties=Properties(to=to), application_properties={"statusCode": 200})]  # fmt: skip
            outcomes = [await replies.send(stray) for stray in strays]
            for request in reversed(asked):  # the last asked is answered first
                await replies.send(reply_to(request, request.body_value))
        elapsed = trio.current_time() - started
        assert got == {i: {"n": i} for i in range(MANY)}
        assert elapsed < TIMEOUT_S / 2
        assert all(isinstance(outcome, Accepted) for outcome in outcomes)  # settled, not left hanging
        assert mgmt.pending == 0

        # A reply after its request timed out finds nobody: dropped (and settled); the session
        # goes on answering.
        with pytest.raises(NoReply):
            await mgmt.call("ECHO", address="svc", body="late")
        assert mgmt.pending == 0
        (late,) = await take(requests, 1)
        assert isinstance(await replies.send(reply_to(late, "too late")), Accepted)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask, 99)
            (again,) = await take(requests, 1)
            await replies.send(reply_to(again, "in time"))
        assert got[99] == "in time" and mgmt.pending == 0


async def test_a_dropped_connection_fails_every_waiting_request_at_once(
    autojump_clock: trio.testing.MockClock, mem_network: MemNetwork
) -> None:
    router = await solo(mem_network)
    stream = await router.open_stream()
    failures: list[BaseException] = []
    async with router.connect() as service_conn, echo_service(service_conn, "svc") as (requests, _replies), \
            connect("127.0.0.1", router.port(), stream=stream) as client, \
            management_session(client, timeout_s=60) as mgmt:  # fmt: skip

        async def ask(i: int) -> None:
            try:
                await mgmt.call("ECHO", address="svc", body=i)
            except Exception as exc:
                failures.append(exc)

        async with trio.open_nursery() as nursery:
            for i in range(MANY):
                nursery.start_soon(ask, i)
            await take(requests, MANY)  # all accepted by the service, none answered
            await trio.testing.wait_all_tasks_blocked()  # the outcomes are back: all wait for replies
            assert mgmt.pending == MANY
            dropped = trio.current_time()
            stream.receive_stream.put_eof()  # type: ignore[attr-defined]  # the router's end went away
        elapsed = trio.current_time() - dropped
        assert mgmt.pending == 0
        with pytest.raises(ConnectionClosed):  # and so do requests made after it
            await mgmt.call("ECHO", address="svc")
    assert elapsed < 1, f"the requests failed {elapsed:g} s after the connection dropped"
    assert len(failures) == MANY
    assert all(isinstance(exc, ConnectionClosed) for exc in failures), failures


async def test_a_session_needs_its_reader(autojump_clock: trio.testing.MockClock, mem_network: MemNetwork) -> None:
    """Built by hand, without management_session(), nothing would read the replies: refused
    at once rather than left to time out."""
    router = await solo(mem_network)
    async with router.connect() as client:
        receiver = await client.open_receiver(None, dynamic=True)
        sender = await client.open_sender(None)
        assert receiver.address is not None
        mgmt = ManagementSession(sender, receiver, receiver.address, TIMEOUT_S)
        with pytest.raises(RuntimeError, match="management_session"):
            await mgmt.query("router")
