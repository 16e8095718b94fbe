"""Busy polling (router.busy_poll_us, router.net.poller): the poller keeps looking for a ready
socket before it blocks, never past trio's next deadline; a `router run` configured so serves
python-qpid-proton request/reply round trips and counts its busy polls in the `router` entity
(`router stat`)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

from router.config.models import RouterSection
from router.net.poller import Poller

from .support.interop import run_container
from .support.management import ProcessRouter, cli_json, router_with_http

TIMEOUT_S = 10.0


class Reader:
    """A driver stand-in: reads what the poller says is there."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.got: list[bytes] = []

    def readable(self, now: float) -> None:
        self.got.append(self.sock.recv(1000))


async def _running(nursery: trio.Nursery, busy_poll_s: float) -> Poller:
    poller = Poller(busy_poll_s=busy_poll_s)
    nursery.start_soon(poller.run)
    while not poller.running:
        await trio.sleep(0)
    return poller


def _write_while_busy_polling(poller: Poller, sock: socket.socket, data: bytes) -> threading.Thread:
    """Another thread writes `data` once the poller is in a busy poll (nothing of trio's knows)."""

    def run() -> None:
        while not poller.busy_polling:
            pass  # (the poller spends up to its whole busy poll before it blocks)
        sock.send(data)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


async def test_what_arrives_during_a_busy_poll_is_read_without_blocking(nursery: trio.Nursery) -> None:
    a, b = socket.socketpair()
    with a, b:
        b.setblocking(False)
        poller = await _running(nursery, busy_poll_s=30.0)  # longer than the test: only a read ends it
        reader = Reader(b)
        poller.watch(b.fileno(), reader)
        writer = _write_while_busy_polling(poller, a, b"caught")
        with trio.fail_after(TIMEOUT_S):
            while not reader.got:
                await trio.sleep(0)  # (runnable: the poller only looks while this task runs)
                await trio.to_thread.run_sync(writer.join, 0.01)  # blocks trio: the poller alone
        writer.join()
        assert reader.got == [b"caught"]
        assert poller.busy_caught >= 1 and poller.busy_seconds > 0
        poller.unwatch(b.fileno())


async def test_a_busy_poll_ends_at_trios_next_deadline(nursery: trio.Nursery) -> None:
    """A busy poll longer than the time to trio's next deadline stops there: the sleeper wakes
    on time and the poll counts as one that found nothing."""
    a, b = socket.socketpair()
    with a, b:
        poller = await _running(nursery, busy_poll_s=30.0)
        poller.watch(b.fileno(), Reader(b))
        with trio.fail_after(TIMEOUT_S):
            for _ in range(3):
                start = trio.current_time()
                await trio.sleep(0.05)
                assert trio.current_time() - start < 5  # not the busy poll's 30 s
        assert poller.busy_missed >= 1 and poller.busy_caught == 0
        poller.unwatch(b.fileno())


def test_busy_poll_us_is_off_by_default_and_bounded() -> None:
    assert RouterSection(id="r").busy_poll_us == 0
    with pytest.raises(ValueError, match="busy_poll_us"):
        RouterSection(id="r", busy_poll_us=-1)
    with pytest.raises(ValueError, match="busy_poll_us"):
        RouterSection(id="r", busy_poll_us=10_001)


@pytest.fixture
def busy_router(tmp_path: Path) -> Iterator[ProcessRouter]:
    with router_with_http(tmp_path, "busy", router={"id": "busy", "busy_poll_us": 200}) as router:
        yield router


class RequestReply(MessagingHandler):  # type: ignore[misc]
    """One Proton connection that serves requests on `busy-requests` (replying to their
    reply-to) and sends them one at a time, each after the previous reply: a lone message each."""

    def __init__(self, url: str, rounds: int) -> None:
        super().__init__()
        self.url, self.rounds = url, rounds
        self.replies: list[str] = []
        self.accepted = 0
        self.opened = 0

    def on_start(self, event: Any) -> None:
        conn = event.container.connect(self.url)
        self.requests = event.container.create_receiver(conn, "busy-requests")
        self.reply_link = event.container.create_receiver(conn, "busy-replies")
        self.sender = event.container.create_sender(conn, None)

    def on_link_opened(self, event: Any) -> None:
        self.opened += 1
        if self.opened == 3:
            self._request()

    def _request(self) -> None:
        body = f"request {len(self.replies)}"
        self.sender.send(Message(address="busy-requests", reply_to="busy-replies", body=body))

    def on_message(self, event: Any) -> None:
        if event.receiver == self.requests:
            self.sender.send(Message(address=event.message.reply_to, body=f"reply to {event.message.body}"))
            return
        self.replies.append(event.message.body)
        if len(self.replies) < self.rounds:
            self._request()

    def on_accepted(self, event: Any) -> None:
        self.accepted += 1
        if self.accepted == 2 * self.rounds:
            event.connection.close()


@pytest.mark.interop
@pytest.mark.process
def test_a_busy_polling_router_serves_proton_request_reply_and_counts_its_polls(busy_router: ProcessRouter) -> None:
    before = cli_json("stat", "general", "--json", "-b", busy_router.bus)
    assert before["busyPollUs"] == 200
    client = RequestReply(f"127.0.0.1:{busy_router.amqp_port}", rounds=20)
    run_container(Container(client), timeout_s=TIMEOUT_S)
    assert client.replies == [f"reply to request {i}" for i in range(20)]
    assert client.accepted == 40  # every request and reply was told accepted
    after = cli_json("stat", "general", "--json", "-b", busy_router.bus)
    polls = after["busyPollCaught"] + after["busyPollMissed"] - before["busyPollCaught"] - before["busyPollMissed"]
    assert polls >= 40  # at least one busy poll before each message's wake-up
    assert after["busyPollMicroseconds"] > before["busyPollMicroseconds"]
