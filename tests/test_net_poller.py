"""The poller (router.net.poller): watched sockets read without a trio task step per read, and
trio still served while it waits in its own epoll (deadlines, trio's sockets, threads, signals,
`wait_all_tasks_blocked`, mock clocks); connection drivers over it (reads, the end, a failure
in its own task, backpressure, timers); the server's connections watched while they live."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable

import pytest
import trio
import trio.testing

from router.amqp import events as ev
from router.amqp.connection import Connection, ConnectionConfig
from router.amqp.endpoints import CLOSED
from router.amqp.message import Message
from router.net.client import connect
from router.net.driver import ConnectionDriver
from router.net.now import OffsetClock, run_clock, trio_now
from router.net.poller import Poller
from router.net.server import RouterServer

from .support.router_process import core_ready, router_server

__all__ = ["router_server"]  # the fixture, imported for pytest


class TaskSteps(trio.abc.Instrument):
    """A trio instrument counting task steps: how often trio ran a task."""

    def __init__(self) -> None:
        self.count = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.count += 1


class Reader:
    """A driver stand-in: reads what the poller says is there, noting trio's task steps."""

    def __init__(self, sock: socket.socket, steps: TaskSteps | None = None) -> None:
        self.sock = sock
        self.steps = steps
        self.got: list[bytes] = []
        self.steps_seen: list[int] = []

    def readable(self, now: float) -> None:
        assert abs(now - trio.current_time()) < 1.0  # trio's time (whatever its clock)
        self.got.append(self.sock.recv(1000))
        if self.steps is not None:
            self.steps_seen.append(self.steps.count)


async def _running(nursery: trio.Nursery, busy_poll_s: float = 0.0) -> Poller:
    poller = Poller(busy_poll_s=busy_poll_s)
    nursery.start_soon(poller.run)
    while not poller.running:
        await trio.sleep(0)
    return poller


@contextlib.asynccontextmanager
async def _watched_pair(
    nursery: trio.Nursery, steps: TaskSteps | None = None, busy_poll_s: float = 0.0
) -> AsyncIterator[tuple[Poller, socket.socket, Reader]]:
    """A running poller watching one end of a socket pair: (the poller, the other end, the reader)."""
    a, b = socket.socketpair()
    with a, b:
        b.setblocking(False)
        poller = await _running(nursery, busy_poll_s)
        reader = Reader(b, steps)
        poller.watch(b.fileno(), reader)
        yield poller, a, reader


def _later(delay_s: float, action: Callable[[], object]) -> threading.Thread:
    """`action` from another thread after `delay_s`: nothing of trio's knows it is coming."""

    def run() -> None:
        time.sleep(delay_s)
        action()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


async def _until(predicate: Callable[[], bool]) -> None:
    with trio.fail_after(5):
        while not predicate():
            await trio.sleep(0.01)


async def test_a_watched_socket_is_read_without_a_trio_task_step(nursery: trio.Nursery) -> None:
    steps = TaskSteps()
    trio.lowlevel.add_instrument(steps)
    async with _watched_pair(nursery, steps) as (poller, a, reader):
        writes = [_later(0.05, lambda: a.send(b"one")), _later(0.25, lambda: a.send(b"two"))]
        await trio.sleep(0.5)  # the only other task sleeps: the poller waits on its own
        for thread in writes:
            thread.join()
        trio.lowlevel.remove_instrument(steps)
        assert reader.got == [b"one", b"two"]
        # Between the two reads trio ran no task at all: the poller was woken by the socket
        # itself, not through trio's scheduler.
        assert reader.steps_seen[0] == reader.steps_seen[1]
        fd = reader.sock.fileno()
        poller.unwatch(fd)
        poller.unwatch(fd)  # idempotent
        a.send(b"three")
        await trio.sleep(0.05)
        assert reader.got == [b"one", b"two"] and poller.watched == 0


async def test_trio_is_served_while_the_poller_waits(nursery: trio.Nursery) -> None:
    """Deadlines, trio's own sockets, threads and signals all get through while the poller
    waits in its own epoll with nothing else to run."""
    async with _watched_pair(nursery):
        with trio.fail_after(5):
            start = trio.current_time()
            await trio.sleep(0.05)  # a deadline
            assert trio.current_time() - start < 2

            plain_c, d = socket.socketpair()
            with trio.socket.from_stdlib_socket(plain_c) as c, d:  # a socket trio waits for
                _later(0.05, lambda: d.send(b"to trio"))
                assert await c.recv(100) == b"to trio"

            await trio.to_thread.run_sync(time.sleep, 0.05)  # a thread's result

            with trio.open_signal_receiver(signal.SIGUSR1) as signals:
                _later(0.05, lambda: os.kill(os.getpid(), signal.SIGUSR1))
                async for signum in signals:
                    assert signum == signal.SIGUSR1
                    break


async def test_wait_all_tasks_blocked_sees_the_poller_blocked(nursery: trio.Nursery) -> None:
    async with _watched_pair(nursery) as (_poller, a, reader):
        with trio.fail_after(5):
            await trio.testing.wait_all_tasks_blocked()
            a.send(b"while waited for the ordinary way")
            await _until(lambda: bool(reader.got))
        assert reader.got == [b"while waited for the ordinary way"]


async def test_on_a_mock_clock_the_poller_waits_the_ordinary_way(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    async with _watched_pair(nursery) as (_poller, a, reader):
        await trio.sleep(1000)  # jumps: the poller does not keep the clock from jumping
        a.send(b"after the jump")
        await trio.testing.wait_all_tasks_blocked()
        assert reader.got == [b"after the jump"]


def _server_engine(idle_timeout_s: float | None = None) -> Connection:
    return Connection(ConnectionConfig(container_id="server", server=True, idle_timeout_s=idle_timeout_s))


def _header_and_open() -> bytes:
    client = Connection(ConnectionConfig(container_id="client"))
    client.open()
    return client.data_to_send()


async def test_a_driver_over_the_poller_reads_dispatches_and_ends(nursery: trio.Nursery) -> None:
    a, b = trio.socket.socketpair()
    poller = await _running(nursery)
    engine, seen = _server_engine(), list[ev.Event]()
    driver = ConnectionDriver(trio.SocketStream(b), engine, seen.extend, poller=poller)
    done = trio.Event()

    async def run() -> None:
        await driver.run()
        done.set()

    nursery.start_soon(run)
    await _until(lambda: poller.watched == 1)  # parked: the poller reads for it
    await a.send(_header_and_open())
    await _until(lambda: any(isinstance(event, ev.RemoteOpen) for event in seen))
    assert poller.watched == 1
    a.close()  # the end of the stream
    with trio.fail_after(5):
        await done.wait()
    assert any(isinstance(event, ev.TransportClosed) for event in seen)
    assert poller.watched == 0 and driver.closed


async def test_a_failure_while_the_poller_reads_is_the_connections_own(nursery: trio.Nursery) -> None:
    a, b = trio.socket.socketpair()
    with a:
        poller = await _running(nursery)

        def fails(events: list[ev.Event]) -> None:
            raise RuntimeError("the core failed on this connection's events")

        driver = ConnectionDriver(trio.SocketStream(b), _server_engine(), fails, poller=poller)
        await a.send(_header_and_open())
        with trio.fail_after(5), pytest.raises(ExceptionGroup) as raised:
            await driver.run()  # raised in the connection's task, not the poller's
        assert raised.group_contains(RuntimeError, match="this connection's events")
        assert poller.running and poller.watched == 0


async def test_a_driver_over_the_poller_pauses_and_resumes(nursery: trio.Nursery) -> None:
    a, b = trio.socket.socketpair()
    with a:
        poller = await _running(nursery)
        engine, seen = _server_engine(), list[ev.Event]()
        paused = [False]
        driver = ConnectionDriver(trio.SocketStream(b), engine, seen.extend, pause_reading=lambda: paused[0],
                                  poller=poller)  # fmt: skip
        nursery.start_soon(driver.run)
        await _until(lambda: poller.watched == 1)
        paused[0] = True  # the next read's events make the core want a pause
        await a.send(_header_and_open())
        await _until(lambda: driver.reading_paused)
        assert poller.watched == 0  # a paused reader's socket is not read
        count = len(seen)
        await a.send(b"\x00\x00\x00\x08\x02\x00\x00\x00")  # an empty frame (a heartbeat)
        await trio.sleep(0.05)
        assert len(seen) == count
        paused[0] = False
        driver.resume_reading()
        await _until(lambda: poller.watched == 1 and not driver.reading_paused)


async def test_a_peer_silent_past_the_idle_time_out_is_closed_over_the_poller(nursery: trio.Nursery) -> None:
    """The engine's timer is the parked reader's deadline: it still falls due."""
    a, b = trio.socket.socketpair()
    with a:
        poller = await _running(nursery)
        engine = _server_engine(idle_timeout_s=0.2)

        def opener(events: list[ev.Event]) -> None:
            if any(isinstance(event, ev.RemoteOpen) for event in events):
                engine.open()

        driver = ConnectionDriver(trio.SocketStream(b), engine, opener, poller=poller)
        await a.send(_header_and_open())  # then nothing: no heartbeats
        with trio.fail_after(10):
            await driver.run()
        assert engine.state.local is CLOSED and engine.failed


needs_core = pytest.mark.skipif(not core_ready(), reason="the routing core cannot route yet")


@needs_core
async def test_the_servers_plain_tcp_connections_are_read_by_its_poller(
    router_server: tuple[RouterServer, int],
) -> None:
    server, port = router_server
    async with connect("127.0.0.1", port) as one, connect("127.0.0.1", port) as two:
        receiver = await one.open_receiver("polled", credit=1)
        sender = await two.open_sender("polled")
        await _until(lambda: server.poller.watched == 2)
        with trio.fail_after(5):
            tracker = await sender.start_send(Message.value("through the poller"))
            delivery = await receiver.receive()
            receiver.accept(delivery)
            await tracker.wait()
        assert delivery.message.body_value == "through the poller"
    await _until(lambda: server.poller.watched == 0)


async def test_trio_now_is_trios_clock_read_directly() -> None:
    before = trio.current_time()
    now = trio_now()
    assert before <= now <= trio.current_time()


async def test_trio_now_asks_a_mock_clock(autojump_clock: trio.testing.MockClock) -> None:
    await trio.sleep(1000)
    assert trio_now() == trio.current_time() == autojump_clock.current_time()


def test_trio_now_outside_trio_fails_as_trio_does() -> None:
    with pytest.raises(RuntimeError):
        trio.current_time()
    with pytest.raises(RuntimeError):
        trio_now()
    with pytest.raises(RuntimeError):
        run_clock()


async def test_a_runs_clock_is_trios_clock_read_directly() -> None:
    clock = run_clock()
    assert type(clock) is OffsetClock  # (on trio's own clock)
    before = trio.current_time()
    now = clock()
    assert before <= now <= trio.current_time()


async def test_a_runs_clock_on_a_mock_clock_asks_it(autojump_clock: trio.testing.MockClock) -> None:
    clock = run_clock()
    await trio.sleep(1000)
    assert clock() == trio.current_time() == autojump_clock.current_time()


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
    # A busy poll longer than the test: only a read ends it.
    async with _watched_pair(nursery, busy_poll_s=30.0) as (poller, a, reader):
        writer = _write_while_busy_polling(poller, a, b"caught")
        with trio.fail_after(5):
            while not reader.got:
                await trio.sleep(0)  # (runnable: the poller only looks while this task runs)
                await trio.to_thread.run_sync(writer.join, 0.01)  # trio waits: the poller is alone
        writer.join()
        assert reader.got == [b"caught"]
        assert poller.busy_caught >= 1 and poller.busy_seconds > 0


async def test_a_busy_poll_ends_at_trios_next_deadline(nursery: trio.Nursery) -> None:
    """A busy poll longer than the time to trio's next deadline stops there: the sleeper wakes
    on time and the poll counts as one that found nothing."""
    async with _watched_pair(nursery, busy_poll_s=30.0) as (poller, _a, _reader):
        with trio.fail_after(5):
            for _ in range(3):
                start = trio.current_time()
                await trio.sleep(0.05)
                assert trio.current_time() - start < 5  # not the busy poll's 30 s
        assert poller.busy_missed >= 1 and poller.busy_caught == 0
