"""Busy polling (router.busy_poll_us): off by default and bounded; a `router run` configured
with it serves python-qpid-proton request/reply round trips and counts its busy polls in the
`router` entity (`router stat`). The poller's side (a write caught while it polls, trio's
deadlines kept) is in tests/test_net_poller.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

from router.config.models import RouterSection
from router.net.busypoll import advice, cpu_quota

from .support.interop import run_container
from .support.management import ProcessRouter, cli_json, router_with_http

TIMEOUT_S = 10.0


def test_busy_poll_us_is_off_by_default_and_bounded() -> None:
    assert RouterSection(id="r").busy_poll_us == 0
    with pytest.raises(ValueError, match="busy_poll_us"):
        RouterSection(id="r", busy_poll_us=-1)
    with pytest.raises(ValueError, match="busy_poll_us"):
        RouterSection(id="r", busy_poll_us=10_001)


def test_a_cpu_quota_is_read_from_cgroup_v2_or_v1(tmp_path: Path) -> None:
    assert cpu_quota(tmp_path) is None  # neither: no quota known
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cpu_quota(tmp_path) is None
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("150000\n")
    assert cpu_quota(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")  # v2 decides when it is there
    assert cpu_quota(tmp_path) is None
    (tmp_path / "cpu.max").write_text("50000 100000\n")
    assert cpu_quota(tmp_path) == 0.5


def test_busy_polling_under_a_quota_below_a_cpu_or_on_a_one_cpu_host_is_advised_against() -> None:
    assert advice(0, 0.5, 1) == []  # off: nothing to say
    assert advice(50, None, 2) == []
    assert advice(50, 1.0, 8) == []  # a whole CPU: one polling thread is never throttled
    (quota,) = advice(50, 0.5, 4)
    assert "CPU quota of 0.5 CPUs" in quota and "busy_poll_us to 0" in quota
    (one_cpu,) = advice(50, None, 1)
    assert "one CPU" in one_cpu
    assert len(advice(50, 0.25, 1)) == 2


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
    assert "busy polling: 200 us" in busy_router.process.output  # said at start
