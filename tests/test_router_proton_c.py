"""The single router with Proton C's own example programs as its clients (`send`, `receive`,
`send-abort`, built from the Debian examples package), each in its own process, next to
python-qpid-proton clients. One `router run` serves the module."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from proton import Delivery, Message
from proton.handlers import MessagingHandler
from proton.reactor import Container
from proton.utils import BlockingConnection

from .support.interop import run_container, run_in_thread
from .support.proton_c import build_examples
from .support.router_process import RouterProcess, watched

pytestmark = [pytest.mark.interop, pytest.mark.process]

TIMEOUT_S = 10.0
SEQUENCE = re.compile(r'^\{"sequence"=(\d+)\}$')  # how `receive` prints a message body


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_examples(tmp_path_factory.mktemp("proton-c"), ("send", "receive", "send-abort"))


@pytest.fixture(scope="module")
def shared_router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterProcess]:
    with RouterProcess.running(tmp_path_factory.mktemp("router")) as router:
        yield router


@pytest.fixture
def router(shared_router: RouterProcess) -> Iterator[RouterProcess]:
    """The module's router; the test fails if the router logged an error while it ran."""
    yield from watched(shared_router)


async def run(program: Path, router: RouterProcess, address: str, count: int) -> subprocess.CompletedProcess[bytes]:
    """Run one example against the router (killed if it outlives the deadline)."""
    with trio.fail_after(TIMEOUT_S):
        return await trio.run_process(
            [str(program), "127.0.0.1", str(router.ports["amqp"]), address, str(count)],
            capture_stdout=True, capture_stderr=True, check=False,
        )  # fmt: skip


def lines(result: subprocess.CompletedProcess[bytes]) -> list[str]:
    return result.stdout.decode().splitlines()


def sequences(result: subprocess.CompletedProcess[bytes]) -> list[int]:
    return [int(m[1]) for m in map(SEQUENCE.match, lines(result)) if m]


async def run_together(*calls: Any) -> list[subprocess.CompletedProcess[bytes]]:
    """Start every (program, router, address, count) call at once; return their results."""
    results: list[Any] = [None] * len(calls)

    async def one(i: int) -> None:
        results[i] = await run(*calls[i])

    async with trio.open_nursery() as nursery:
        for i in range(len(calls)):
            nursery.start_soon(one, i)
    return results


async def test_c_send_and_receive_through_the_router(router: RouterProcess, examples: dict[str, Path]) -> None:
    # Started together: `send` gets credit once `receive` has attached.
    received, sent = await run_together(
        (examples["receive"], router, "c.orders", 10), (examples["send"], router, "c.orders", 10)
    )
    assert sent.returncode == 0, sent.stderr
    assert received.returncode == 0, received.stderr
    assert lines(sent) == ["10 messages sent and acknowledged"]  # every one accepted
    assert sequences(received) == list(range(1, 11))  # printed, in order
    assert lines(received)[-1] == "10 messages received"


async def test_two_c_senders_to_one_c_receiver(router: RouterProcess, examples: dict[str, Path]) -> None:
    # Both senders get credit once the receiver has attached; it stays until it has all ten.
    received, first, second = await run_together(
        (examples["receive"], router, "c.fan-in", 10),
        (examples["send"], router, "c.fan-in", 5),
        (examples["send"], router, "c.fan-in", 5),
    )
    assert [r.returncode for r in (received, first, second)] == [0, 0, 0], [r.stderr for r in (received, first, second)]
    assert lines(first) == lines(second) == ["5 messages sent and acknowledged"]
    # Each sender numbers its messages 1..5: every one of the ten arrives, once.
    assert sorted(sequences(received)) == sorted([*range(1, 6), *range(1, 6)])
    assert lines(received)[-1] == "10 messages received"


async def test_c_send_abort_reaches_c_receive_as_aborted(router: RouterProcess, examples: dict[str, Path]) -> None:
    async with trio.open_nursery() as nursery:
        results: dict[str, subprocess.CompletedProcess[bytes]] = {}

        async def receive() -> None:
            results["receive"] = await run(examples["receive"], router, "c.aborts", 2)

        nursery.start_soon(receive)
        # Each message is cut off after part of it went out; then two whole ones follow.
        results["abort"] = await run(examples["send-abort"], router, "c.aborts", 2)
        results["send"] = await run(examples["send"], router, "c.aborts", 2)
    for name, result in results.items():
        assert result.returncode == 0, (name, result.stderr)
    assert lines(results["abort"]) == ["2 messages started and aborted"]
    assert lines(results["receive"]) == ["Message aborted", "Message aborted", '{"sequence"=1}', '{"sequence"=2}', "2 messages received"]


async def test_python_producer_to_c_receive(router: RouterProcess, examples: dict[str, Path]) -> None:
    def produce() -> list[Any]:
        conn = BlockingConnection(f"amqp://127.0.0.1:{router.ports['amqp']}", timeout=TIMEOUT_S)
        try:
            sender = conn.create_sender("c.from-python")
            return [sender.send(Message(body={"sequence": i})).remote_state for i in range(3)]
        finally:
            conn.close()

    async with trio.open_nursery() as nursery:
        results: dict[str, Any] = {}

        async def receive() -> None:
            results["receive"] = await run(examples["receive"], router, "c.from-python", 3)

        nursery.start_soon(receive)
        results["states"] = await run_in_thread(produce)
    assert results["states"] == [Delivery.ACCEPTED] * 3
    assert results["receive"].returncode == 0
    assert sequences(results["receive"]) == [0, 1, 2]


class Rejecter(MessagingHandler):
    """A Python consumer that rejects everything, until it has rejected `count`."""

    def __init__(self, url: str, address: str, count: int) -> None:
        super().__init__(auto_accept=False)
        self.url, self.address, self.count = url, address, count
        self.rejected = 0
        self.attached = trio.Event()
        self.token = trio.lowlevel.current_trio_token()

    def on_start(self, event: Any) -> None:
        self.conn = event.container.connect(self.url, reconnect=False)
        event.container.create_receiver(self.conn, self.address)

    def on_link_opened(self, event: Any) -> None:
        trio.from_thread.run_sync(self.attached.set, trio_token=self.token)

    def on_message(self, event: Any) -> None:
        self.reject(event.delivery)
        self.rejected += 1
        if self.rejected == self.count:
            event.connection.close()


async def test_a_python_consumers_reject_reaches_c_send(router: RouterProcess, examples: dict[str, Path]) -> None:
    consumer = Rejecter(f"amqp://127.0.0.1:{router.ports['amqp']}", "c.rejected", 1)

    def consume() -> None:
        run_container(Container(consumer), timeout_s=TIMEOUT_S)
        consumer.conn = None  # dropped on the Container's thread

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_in_thread, consume)
        with trio.fail_after(TIMEOUT_S):
            await consumer.attached.wait()
        sent = await run(examples["send"], router, "c.rejected", 1)
    # `send` expects accepted: it reports the outcome it got instead (37: rejected) and fails.
    assert sent.returncode == 1
    assert f"unexpected delivery state {int(Delivery.REJECTED)}" in sent.stderr.decode()
    assert consumer.rejected == 1
