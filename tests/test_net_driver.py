"""ConnectionDriver backpressure over in-memory streams: paused reading (resumed on request,
timers still served, a silent peer still timed out) and the writer's high-water reports; and
over a socket, the same timers served without reading a paused peer, and the direct read never
touching a descriptor closed under it."""

from __future__ import annotations

import fcntl
import struct
import termios
from collections.abc import Callable

import trio
import trio.testing

from router.amqp import errors as E
from router.amqp import events as ev
from router.amqp.connection import Connection, ConnectionConfig
from router.amqp.endpoints import ACTIVE
from router.net.driver import ConnectionDriver


def _server(idle_timeout_s: float | None = None) -> Connection:
    return Connection(ConnectionConfig(container_id="server", server=True, idle_timeout_s=idle_timeout_s))


def _client(idle_timeout_s: float | None = None) -> Connection:
    return Connection(ConnectionConfig(container_id="client", idle_timeout_s=idle_timeout_s))


class Paused:
    """A pause_reading predicate the test flips."""

    def __init__(self, paused: bool) -> None:
        self.paused = paused
        self.asked = 0

    def __call__(self) -> bool:
        self.asked += 1
        return self.paused


def _opener(engine: Connection, seen: list[ev.Event]) -> Callable[[list[ev.Event]], None]:
    """on_events for a server engine: answer the peer's open, keep every event."""

    def on_events(events: list[ev.Event]) -> None:
        seen.extend(events)
        for event in events:
            if isinstance(event, ev.RemoteOpen):
                engine.open()

    return on_events


async def test_paused_reader_reads_nothing_until_resumed(nursery: trio.Nursery) -> None:
    client_end, server_end = trio.testing.memory_stream_pair()
    server, seen = _server(), list[ev.Event]()
    paused = Paused(True)
    driver = ConnectionDriver(server_end, server, _opener(server, seen), pause_reading=paused)
    nursery.start_soon(driver.run)
    client = _client()
    client.open()
    await client_end.send_all(client.data_to_send())
    await trio.testing.wait_all_tasks_blocked()
    assert driver.reading_paused and seen == []

    driver.resume_reading()  # still paused: it looks again and stays put
    await trio.testing.wait_all_tasks_blocked()
    assert paused.asked == 2 and driver.reading_paused and seen == []

    paused.paused = False
    driver.resume_reading()
    await trio.testing.wait_all_tasks_blocked()
    assert not driver.reading_paused
    assert any(isinstance(event, ev.RemoteOpen) for event in seen)


async def test_paused_reader_still_serves_timers_for_a_live_peer(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """The server closes peers silent for 1 s; the client heartbeats. Paused for 10 s, the
    server must not take the unread heartbeats for silence."""
    client_end, server_end = trio.testing.memory_stream_pair()
    server, seen = _server(idle_timeout_s=1.0), list[ev.Event]()
    paused = Paused(False)
    nursery.start_soon(ConnectionDriver(server_end, server, _opener(server, seen), pause_reading=paused).run)
    client = _client()
    client_seen: list[ev.Event] = []
    opened = trio.Event()

    def on_client_events(events: list[ev.Event]) -> None:
        client_seen.extend(events)
        if any(isinstance(event, ev.RemoteOpen) for event in events):
            opened.set()

    client_driver = ConnectionDriver(client_end, client, on_client_events)
    nursery.start_soon(client_driver.run)
    client.open()
    client_driver.wake()
    await opened.wait()
    paused.paused = True
    await trio.sleep(10)
    assert server.state.local is ACTIVE and not server.failed
    assert not any(isinstance(event, ev.RemoteClose) for event in client_seen)


async def test_paused_reader_still_times_out_a_silent_peer(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    client_end, server_end = trio.testing.memory_stream_pair()
    server, seen = _server(idle_timeout_s=1.0), list[ev.Event]()
    paused = Paused(False)
    nursery.start_soon(ConnectionDriver(server_end, server, _opener(server, seen), pause_reading=paused).run)
    client = _client()  # driven by hand: after the open it says nothing
    client.open()
    await client_end.send_all(client.data_to_send())
    while client.remote_open is None:  # a memory stream gives bytearray, the engine takes bytes
        client.receive_data(bytes(await client_end.receive_some()), trio.current_time())
    paused.paused = True
    received = b""
    with trio.fail_after(3):
        while data := await client_end.receive_some():
            received += data
    client.receive_data(bytes(received), trio.current_time())
    closes = [event for event in client.events() if isinstance(event, ev.RemoteClose)]
    assert closes and closes[0].error is not None
    assert closes[0].error.condition == E.RESOURCE_LIMIT_EXCEEDED


async def test_a_paused_reader_on_a_socket_keeps_a_live_peer_without_reading_it(nursery: trio.Nursery) -> None:
    """Over a socket the paused reader looks whether the peer's bytes wait, without reading
    them: a read at every timer would take in a read's worth of what the pause holds back each
    time (a producer's frames, held for as long as a consumer stalls). The server closes peers
    silent for 1 s; the client heartbeats (every 0.5 s); paused for three idle time-outs, the
    server reads nothing and keeps the connection; resumed, it reads what waited."""
    a, b = trio.socket.socketpair()
    server, seen = _server(idle_timeout_s=1.0), list[ev.Event]()
    paused = Paused(False)
    driver = ConnectionDriver(trio.SocketStream(b), server, _opener(server, seen), pause_reading=paused)
    nursery.start_soon(driver.run)
    client = _client()
    client_driver = ConnectionDriver(trio.SocketStream(a), client, lambda _events: None)
    nursery.start_soon(client_driver.run)
    client.open()
    client_driver.wake()
    with trio.fail_after(5):
        while client.remote_open is None:
            await trio.sleep(0.01)
    paused.paused = True
    driver.resume_reading()  # (it looks at the predicate again)
    received = server.last_received
    await trio.sleep(3.0)  # three idle time-outs, about six heartbeats waiting unread
    assert server.state.local is ACTIVE and not server.failed
    assert not any(isinstance(event, ev.RemoteClose) for event in seen)
    assert server.last_received > received  # not idle: its bytes wait ...
    assert _unread(b) >= 8 * 4  # ... unread (an empty frame is 8 bytes)
    paused.paused = False
    driver.resume_reading()
    with trio.fail_after(5):
        while _unread(b):
            await trio.sleep(0.01)


async def test_a_paused_reader_on_a_socket_still_times_out_a_silent_peer(nursery: trio.Nursery) -> None:
    a, b = trio.socket.socketpair()
    server, seen = _server(idle_timeout_s=0.4), list[ev.Event]()
    paused = Paused(False)
    nursery.start_soon(ConnectionDriver(trio.SocketStream(b), server, _opener(server, seen), pause_reading=paused).run)
    client = _client()  # driven by hand: after the open it says nothing
    client.open()
    await a.send(client.data_to_send())
    while client.remote_open is None:
        client.receive_data(await a.recv(65536), trio.current_time())
    paused.paused = True
    received = b""
    with trio.fail_after(3):
        while data := await a.recv(65536):
            received += data
    client.receive_data(bytes(received), trio.current_time())
    closes = [event for event in client.events() if isinstance(event, ev.RemoteClose)]
    assert closes and closes[0].error is not None
    assert closes[0].error.condition == E.RESOURCE_LIMIT_EXCEEDED


def _unread(sock: trio.socket.SocketType) -> int:
    """Bytes the kernel holds for `sock` that nobody has read."""
    return int(struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0])


async def test_writer_reports_high_water_and_drain(nursery: trio.Nursery) -> None:
    ours, theirs = trio.testing.lockstep_stream_pair()  # a write completes only as it is read
    engine = _client()  # its protocol header (8 bytes) is queued from the start
    changes: list[bool] = []
    driver = ConnectionDriver(ours, engine, lambda _events: None, write_high_water=1000, on_output_blocked=changes.append)
    nursery.start_soon(driver.run)
    engine.write_bytes(b"x" * 592)
    driver.wake()
    await trio.testing.wait_all_tasks_blocked()
    assert driver.unsent_bytes == 600 and changes == []  # one write in progress, under the mark

    engine.write_bytes(b"y" * 600)
    driver.wake()  # taken at once while a write is in progress: 1200 bytes unsent
    assert driver.unsent_bytes == 1200 and changes == [True] and driver.output_blocked

    first = await theirs.receive_some(600)
    await trio.testing.wait_all_tasks_blocked()
    assert driver.unsent_bytes == 600 and changes == [True]  # not below half the mark yet

    second = await theirs.receive_some(600)
    await trio.testing.wait_all_tasks_blocked()
    assert driver.unsent_bytes == 0 and changes == [True, False] and not driver.output_blocked
    assert first[8:] + second == b"x" * 592 + b"y" * 600  # in order, after the header


async def test_expect_drain_blocks_until_what_is_on_its_way_drains(nursery: trio.Nursery) -> None:
    """The core holds frames until the output drains (router.core.holding): with bytes on their
    way the driver counts as blocked and calls back once they drain; with nothing on its way it
    says so, and the caller writes more at once."""
    ours, theirs = trio.testing.lockstep_stream_pair()
    engine = _client()
    changes: list[bool] = []
    driver = ConnectionDriver(ours, engine, lambda _events: None, write_high_water=1000, on_output_blocked=changes.append)
    nursery.start_soon(driver.run)
    await trio.testing.wait_all_tasks_blocked()
    engine.write_bytes(b"x" * 292)
    assert driver.expect_drain() and changes == [True]  # 300 bytes on their way, under the mark
    assert await theirs.receive_some(300) == b"AMQP\x00\x01\x00\x00" + b"x" * 292
    await trio.testing.wait_all_tasks_blocked()
    assert changes == [True, False] and not driver.output_blocked and driver.unsent_bytes == 0
    assert not driver.expect_drain() and changes == [True, False]  # everything written already


async def test_a_socket_closed_while_the_reader_waits_is_never_read_again() -> None:
    # The writer closes the stream when a write fails; the descriptor's number may belong to a
    # new connection by the time the reader runs again, so the reader must not read it then.
    a, b = trio.socket.socketpair()
    with a, b:
        driver = ConnectionDriver(trio.SocketStream(b), _server(), lambda events: None)
        got: list[bytes] = []

        async def read() -> None:
            got.append(await driver._receive())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await trio.testing.wait_all_tasks_blocked()  # it waits for the socket to be readable
            driver._fd = -1  # what _close_stream does first
            await a.send(b"someone else's bytes")
        assert got == [b""]
        assert await b.recv(100) == b"someone else's bytes"  # left unread


async def test_a_socket_has_a_writer_task_only_while_a_write_waits(nursery: trio.Nursery) -> None:
    """On a TCP socket flush() writes directly; the writer task is started when the socket
    cannot take everything and ends once all is written (an idle connection holds none)."""
    a, b = trio.socket.socketpair()
    engine = _client()  # its protocol header (8 bytes) is queued from the start
    driver = ConnectionDriver(trio.SocketStream(b), engine, lambda _events: None)
    driver.wake()  # before run(): run() starts the writer for it
    nursery.start_soon(driver.run)
    with trio.fail_after(5):
        assert await a.recv(100) == b"AMQP\x00\x01\x00\x00"
    await trio.testing.wait_all_tasks_blocked()
    assert not driver._writer_running

    big = bytes(range(256)) * 16384  # 4 MiB: more than the socket buffers take at once
    engine.write_bytes(big)
    driver.flush()
    assert driver._writer_running and driver.unsent_bytes > 0
    received = bytearray()
    with trio.fail_after(10):
        while len(received) < len(big):
            received += await a.recv(65536)
    await trio.testing.wait_all_tasks_blocked()
    assert bytes(received) == big and driver.unsent_bytes == 0
    assert not driver._writer_running

    engine.write_bytes(b"small")
    driver.flush()  # the socket takes it at once: no writer
    assert not driver._writer_running
    with trio.fail_after(5):
        assert await a.recv(100) == b"small"
    driver.abort()
    a.close()


async def test_expect_drain_reports_the_drain_when_flush_wrote_what_the_writer_was_woken_for(
    nursery: trio.Nursery,
) -> None:
    """expect_drain() with frames queued in the engine wakes the writer; a flush() before the
    writer runs writes them directly (the socket takes them): the writer then finds nothing to
    write and must still report the drain, or the output stays blocked for good."""
    a, b = trio.socket.socketpair()
    engine = _client()
    changes: list[bool] = []
    driver = ConnectionDriver(trio.SocketStream(b), engine, lambda _events: None, write_high_water=65536,
                              on_output_blocked=changes.append)  # fmt: skip
    driver.wake()  # (the protocol header)
    nursery.start_soon(driver.run)
    with trio.fail_after(5):
        assert await a.recv(100) == b"AMQP\x00\x01\x00\x00"
    engine.write_bytes(b"small")
    assert driver.expect_drain() and changes == [True]  # the writer is woken for it
    driver.flush()  # ... but the bytes go out now, before it runs
    with trio.fail_after(5):
        assert await a.recv(100) == b"small"
        await trio.testing.wait_all_tasks_blocked()
    assert changes == [True, False] and not driver.output_blocked and driver.unsent_bytes == 0
