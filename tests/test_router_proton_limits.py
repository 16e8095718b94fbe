"""The single router with Proton clients (tests/support/router_proton.py): limits (connections,
message size, a consumer's max-message-size, sessions per connection, links per connection)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import trio
from proton import Endpoint, Message
from proton.reactor import LinkOption
from proton.utils import BlockingConnection, ConnectionClosed, LinkDetached

from router.amqp import errors as E
from router.amqp.connection import Connection, ConnectionConfig
from router.amqp.events import RemoteClose
from router.amqp.framing import frame
from router.amqp.performatives import Begin

from .support.interop import run_in_thread
from .support.router_process import RouterProcess
from .support.router_proton import (
    A,
    Clients,
    R,
    TIMEOUT_S,
    condition,
    own_router,
    router,
    run_clients,
    shared_router,
    url,
)

pytestmark = [pytest.mark.interop, pytest.mark.process]


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
            self.all_told()

    on_rejected = on_released = on_accepted

    def all_told(self) -> None:
        """Every message has its outcome."""
        self.finish()


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


class MaxMessageSize(LinkOption):
    def __init__(self, size: int) -> None:
        self.size = size

    def apply(self, link: Any) -> None:
        link.max_message_size = self.size


class LimitedConsumer(OversizeMessages):
    """A consumer attached with max-message-size `limit` (with `free`, a second one without a
    limit), then a producer on `listener` sending a small, a big and another small message.
    Records the outcomes (with conditions), the body sizes each consumer got, the aborted
    deliveries, and whether the limited consumer's link is still open once every outcome is in."""

    def __init__(self, router: RouterProcess, address: str, listener: str, limit: int, big: int, free: bool) -> None:
        super().__init__(router, address, listener, big)
        self.limit, self.free = limit, free
        self.received_by: dict[str, list[int]] = {"limited": [], "free": []}
        self.consumers_waited = 2 if free else 1
        self.limited: Any = None
        self.limited_open: bool | None = None

    def on_start(self, event: Any) -> None:
        conn = self.connect(event.container)
        self.limited = event.container.create_receiver(conn, self.address, name="limited",
                                                       options=MaxMessageSize(self.limit))  # fmt: skip
        if self.free:
            event.container.create_receiver(conn, self.address, name="free")

    def on_link_opened(self, event: Any) -> None:
        if event.link.name in ("limited", "free"):
            self.consumers_waited -= 1
            if self.consumers_waited == 0:
                event.container.create_sender(self.connect(event.container, self.listener), self.address, name="producer")

    def on_message(self, event: Any) -> None:
        self.received_by[event.link.name].append(len(event.message.body))

    def all_told(self) -> None:
        state = self.limited.state
        self.limited_open = bool(state & Endpoint.LOCAL_ACTIVE and state & Endpoint.REMOTE_ACTIVE)
        self.finish()


@pytest.mark.parametrize(
    ("listener", "free", "aborted"),
    [
        ("amqp", False, 0),  # complete in its first frame (64 KiB frames): refused at once
        ("small", False, 1),  # 4 KiB frames: cut through, then aborted as it passes the limit
        ("amqp", True, 0),  # the consumer without a limit takes it
    ],
)
async def test_a_consumers_max_message_size(router: RouterProcess, listener: str, free: bool, aborted: int) -> None:
    """Transport §2.7.3: the router never sends a consumer a message larger than the
    max-message-size of its attach, and the consumer's link is never detached for one. Alone,
    it makes the message rejected with amqp:link:message-size-exceeded (promptly: not parked);
    beside a consumer without a limit, the message goes there."""
    clients = LimitedConsumer(router, f"consumer-size.{listener}.{free}", listener, 20_000, 50_000, free)
    await run_clients(clients)
    clients.check()
    big = (A, None) if free else (R, E.MESSAGE_SIZE_EXCEEDED)
    assert clients.outcomes == {"small": (A, None), "big": big, "small again": (A, None)}
    assert clients.limited_open is True
    if free:  # (the small ones to either)
        assert all(size <= 200 for size in clients.received_by["limited"])
        assert sorted(clients.received_by["limited"] + clients.received_by["free"]) == [100, 200, 50_000]
    else:
        assert clients.received_by["limited"] == [100, 200]
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
