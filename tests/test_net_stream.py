"""router/net/stream.py alone: the driver's raw reads and writes (a TCP socket's descriptor
directly, other streams through receive_some/send_all). Under TLS: tests/test_tls.py."""

from __future__ import annotations

import trio
import trio.testing

from router.net.stream import Stream, open_stream


def _no_tls_output(data: bytes) -> None:
    raise AssertionError("a plain stream has no TLS output")


async def test_a_socket_is_read_and_written_through_its_descriptor() -> None:
    a, b = trio.socket.socketpair()
    with a, b:
        stream = open_stream(trio.SocketStream(b), 1024, _no_tls_output)
        assert type(stream) is Stream and stream.fd == b.fileno() and not stream.sealing
        assert stream.write_now(b"hello") == b""  # all taken at once
        assert await a.recv(100) == b"hello"
        await a.send(b"x" * 1500)
        assert await stream.receive() == b"x" * 1024  # at most read_size
        assert await stream.receive() == b"x" * 476
        a.close()
        assert await stream.receive() == b""  # the end of the stream


async def test_what_a_full_socket_does_not_take_is_returned() -> None:
    a, b = trio.socket.socketpair()
    with a, b:
        stream = Stream(trio.SocketStream(b), 1024)
        big = bytes(range(256)) * 16384  # 4 MiB: more than the socket buffers take
        rest = stream.write_now(big)
        assert 0 < len(rest) < len(big) and big.endswith(bytes(rest))
        assert isinstance(rest, memoryview)  # a view of what was given: the rest is not copied
        assert stream.write_now(bytes(rest)) == rest  # nothing more fits until the peer reads


async def test_chunks_are_gathered_into_one_write_and_a_rest_is_a_copy() -> None:
    a, b = trio.socket.socketpair()
    with a, b:
        stream = Stream(trio.SocketStream(b), 1024)
        read = bytes(range(256)) * 64
        assert stream.gather_now([b"head", memoryview(read)[10:5000], b"", b"tail"]) == b""
        assert await _drain(a, 4998) == b"head" + read[10:5000] + b"tail"
        big = bytes(range(256)) * 16384  # more than the socket buffers take
        rest = stream.gather_now([b"head", memoryview(big), b"tail"])
        # what waits must not hold on to the read a view came from: joined, a copy
        assert type(rest) is bytes and 0 < len(rest) < len(big) + 8
        assert (b"head" + big + b"tail").endswith(rest)


async def _drain(sock: trio.socket.SocketType, size: int) -> bytes:
    got = bytearray()
    while len(got) < size:
        got += await sock.recv(65536)
    return bytes(got)


async def test_send_all_writes_every_chunk_in_order_as_the_peer_reads() -> None:
    a, b = trio.socket.socketpair()
    with a, b:
        stream = Stream(trio.SocketStream(b), 1024)
        big = bytes(range(256)) * 16384  # more than the socket buffers take: it waits between writes
        # more chunks than one writev may carry (IOV_MAX), some of them views
        chunks: list[bytes | memoryview] = [big, memoryview(b"view of a read")[8:]]
        chunks += [n.to_bytes(3, "big") for n in range(3000)]
        expected = b"".join(chunks)
        got: list[bytes] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: _collect(got, a, len(expected)))
            assert await stream.send_all(chunks)
        assert got == [expected]


async def _collect(got: list[bytes], sock: trio.socket.SocketType, size: int) -> None:
    got.append(await _drain(sock, size))


async def test_send_all_waiting_on_a_full_socket_stops_when_closing_begins() -> None:
    a, b = trio.socket.socketpair()
    with a, b:
        stream = Stream(trio.SocketStream(b), 1024)
        filled = len(bytes(range(256)) * 16384) - len(stream.write_now(bytes(range(256)) * 16384))
        results: list[bool] = []

        async def send() -> None:
            results.append(await stream.send_all([b"more"]))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            await trio.testing.wait_all_tasks_blocked()  # waiting for the socket to take more
            await stream.aclose()
        assert results == [False]
        assert len(await _drain(a, filled)) == filled  # what was written before
        assert await a.recv(100) == b""  # and nothing after: the end of the stream


async def test_after_closing_began_the_descriptor_is_never_touched() -> None:
    a, b = trio.socket.socketpair()
    with a, b:
        stream = Stream(trio.SocketStream(b), 1024)
        got: list[bytes] = []

        async def read() -> None:
            got.append(await stream.receive())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await trio.testing.wait_all_tasks_blocked()  # waiting for the socket to be readable
            stream.fd = -1  # what aclose does first; the number may be another connection's now
            await a.send(b"someone else's bytes")
        assert got == [b""]
        assert await b.recv(100) == b"someone else's bytes"  # left unread
        await stream.aclose()
        assert await a.recv(100) == b""  # closed


async def test_other_streams_go_through_receive_some_and_send_all() -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    stream = open_stream(ours, 4, _no_tls_output)
    assert stream.fd == -1
    assert await stream.send_all([b"abc", memoryview(b"def")])
    assert await theirs.receive_some(100) == b"abcdef"
    await theirs.send_all(b"123456")
    assert await stream.receive() == b"1234"
    await theirs.aclose()
    assert await stream.receive() == b"56"
    assert await stream.receive() == b""
    await stream.aclose()
    assert not await stream.send_all([b"late"])  # closed: False, no exception
