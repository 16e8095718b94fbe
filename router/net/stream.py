"""Bytes to and from one connection's peer, for its ConnectionDriver: the raw reads and writes.

    stream = open_stream(trio_stream, read_size, on_tls_output)   # a Stream, or a SealedStream under TLS
    data = await stream.receive()          # the peer's next bytes (decrypted); b"" at the end or on an error
    data = stream.read_now()               # the same without waiting (the poller's; None: nothing yet)
    wire = stream.seal(data) if stream.sealing else data   # the engine's bytes as they go on the wire
    rest = stream.write_now(wire)          # a TCP socket takes what it can at once; the rest is returned
    ok = await stream.send_all([rest, more])   # in order, waiting as long as it takes; False: the stream broke
    await stream.aclose(goodbye=True)      # closed; under TLS a close_notify first when `goodbye`

Owns: reading and writing a TCP socket's descriptor directly (`fd`; -1 for other streams, which
go through their receive_some/send_all, and once closing began), never touching a descriptor
after closing began (its number may belong to another connection by then), the read size and
the checkpoint after a full read, and under TLS (a tlssession.TlsStream) the session's
encryption and decryption around the same direct I/O, and the TLS layer's own output
(`on_tls_output`: a key update's answer, which the driver queues like any other bytes).
Must not touch: when to read or write, queues, backpressure, the engine (the driver's).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Final, cast

import trio

from .tlssession import TlsSession, TlsStream

# Bound once: compiled, a module attribute (trio.lowlevel.wait_readable, os.read) is looked up
# by name on every use, and these are used on every read and write.
_wait_readable: Final = trio.lowlevel.wait_readable
_wait_writable: Final = trio.lowlevel.wait_writable
_read: Final = os.read
_write: Final = os.write
_writev: Final = os.writev
# Chunks per writev: the kernel refuses more than IOV_MAX (1024 on Linux) in one call.
_IOV_MAX: Final = min(os.sysconf("SC_IOV_MAX"), 1024) if hasattr(os, "sysconf") else 16
Chunk = bytes | memoryview

_STREAM_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


def _drop_written(chunks: list[Chunk], first: int, written: int) -> int:
    """The index of the first chunk not wholly written once `written` more bytes went out from
    chunks[first:]; a chunk written in part becomes a view of its rest (empty ones are passed)."""
    while first < len(chunks):
        size = len(chunks[first])
        if written < size:
            if written:
                chunks[first] = memoryview(chunks[first])[written:]
            break
        written -= size
        first += 1
    return first


class Stream:
    """Plain bytes over `stream` (a trio stream)."""

    # No instance dict: every connection has one (bench/idlemem.py).
    __slots__ = ("stream", "io", "fd", "read_size", "sealing", "_last_read_full")

    def __init__(self, stream: trio.abc.Stream, read_size: int, io: trio.abc.Stream | None = None) -> None:
        """`io`: what bytes are read from and written to, when not `stream` itself (the TCP
        stream under TLS); `stream` is what is closed at the end."""
        self.stream = stream
        self.io = io = stream if io is None else io
        # A TCP stream's socket, read and written directly: trio's receive_some tries the read
        # first and, the socket being empty after the previous read most of the time, pays a
        # failed system call and its own bookkeeping per read; a direct write saves the driver
        # a task switch per forwarding hop.
        self.fd = io.socket.fileno() if isinstance(io, trio.SocketStream) else -1
        self.read_size = read_size
        # Whether the engine's bytes go through seal() (TLS). An attribute, not a class
        # constant: compiled, a class constant read from an instance is a lookup by name.
        self.sealing = False
        self._last_read_full = False

    def seal(self, data: bytes) -> bytes:
        """The engine's bytes as they go on the wire (the same, unless under TLS)."""
        return data

    def write_now(self, wire: Chunk) -> Chunk:
        """Write what the socket takes at once (a direct socket only: `fd` >= 0); return the
        rest (empty when all was taken; a view of `wire`, not a copy). An error writes nothing:
        the next send_all meets it."""
        try:
            written = _write(self.fd, wire)
        except OSError:  # BlockingIOError among them
            return wire
        return b"" if written == len(wire) else memoryview(wire)[written:]

    def gather_now(self, chunks: list[Chunk]) -> Chunk:
        """write_now for several chunks, written from where they are (writev); the rest is
        returned (empty when all was taken), joined when there are several chunks: a copy, so
        that what waits in a queue never holds on to the reads those may be views of."""
        if len(chunks) == 1:
            return self.write_now(chunks[0])
        try:
            written = _writev(self.fd, chunks[:_IOV_MAX])
        except OSError:  # BlockingIOError among them
            written = 0
        first = _drop_written(chunks, 0, written)
        return b"" if first == len(chunks) else b"".join(chunks[first:])

    async def send_all(self, chunks: list[Chunk]) -> bool:
        """Write every chunk, in order, waiting as long as it takes (the list is used up); False
        if the stream broke (or was closed).

        A TCP socket is written directly, straight from the chunks (writev: no join, no copy),
        waiting for it to take more between writes; other streams get them joined, through
        their send_all. Not shielded: a peer that stops reading must not hang a shutdown, and
        a write is only ever cancelled when the connection is being torn down."""
        try:
            if self.fd < 0:
                await self.io.send_all(chunks[0] if len(chunks) == 1 else b"".join(chunks))
                return True
            sock = cast(trio.SocketStream, self.io).socket
            first = 0
            while first < len(chunks):
                # Asked of the socket before every write, not remembered: once it is closed
                # (by whoever, while this waited) its number may be another file's.
                fd = sock.fileno()
                if fd < 0 or fd != self.fd:
                    return False
                try:
                    written = _writev(fd, chunks[first : first + _IOV_MAX])
                except BlockingIOError:
                    await _wait_writable(fd)
                    continue
                first = _drop_written(chunks, first, written)
            return True
        except _STREAM_ERRORS:
            return False

    async def receive(self) -> bytes:
        """The next bytes from the peer; b"" at the end of the stream or on an error.

        A TCP socket is read directly, after waiting until it is readable. After a read that
        filled the buffer more is likely waiting: a plain checkpoint then lets the other
        connections run first. Either way the wait comes before the read, so a cancellation
        never loses bytes."""
        fd = self.fd
        if fd < 0:  # not a TCP socket (or closing: receive_some then says so)
            try:
                return bytes(await self.io.receive_some(self.read_size))
            except _STREAM_ERRORS:
                return b""
        try:
            if self._last_read_full:
                await trio.lowlevel.checkpoint()
            else:
                await _wait_readable(fd)
            while True:
                # Closed while we waited, the descriptor's number may already belong to another
                # connection: never read it then.
                if self.fd != fd:
                    return b""
                data = Stream.read_now(self)  # (the raw read: under TLS too)
                if data is None:
                    await _wait_readable(fd)
                    continue
                self._last_read_full = len(data) == self.read_size
                return data
        except _STREAM_ERRORS:
            return b""

    async def peer_waiting(self, timeout_s: float) -> bool | None:
        """Whether the peer's bytes wait unread (the socket is readable within `timeout_s`),
        without reading them; None when this stream cannot tell (not a TCP socket)."""
        fd = self.fd
        if fd < 0:
            return None
        with trio.move_on_after(timeout_s):
            try:
                await _wait_readable(fd)
            except _STREAM_ERRORS:
                return None
            return True
        return False

    def read_now(self) -> bytes | None:
        """The poller's read (a TCP socket only, once it said readable): the peer's next bytes;
        None when there is nothing yet, b"" at the end of the stream or on an error."""
        try:
            return _read(self.fd, self.read_size)
        except BlockingIOError:
            return None
        except OSError:  # (reset by the peer: the end, as receive() says it)
            return b""

    def ended(self) -> bool:
        """The stream ended with the bytes read_now just returned (a TLS close_notify): the
        next read would be b""."""
        return False

    async def aclose(self, goodbye: bool = False) -> None:
        """Close the stream; no direct read or write from now on. `goodbye`: nothing is left
        unwritten, a TLS close_notify may go first."""
        self.fd = -1
        await trio.aclose_forcefully(self.stream)


class SealedStream(Stream):
    """TLS (a tlssession.TlsStream): every byte taken from the engine is encrypted by the session
    before it goes anywhere, and the engine gets only what the session decrypted; the direct
    reads and writes carry ciphertext only."""

    __slots__ = ("session", "on_tls_output", "_ended")

    def __init__(self, stream: TlsStream, read_size: int, on_tls_output: Callable[[bytes], None]) -> None:
        super().__init__(stream, read_size, stream.transport_stream)
        self.sealing = True
        self.session: TlsSession = stream.session
        self.on_tls_output = on_tls_output
        self._ended = False

    def seal(self, data: bytes) -> bytes:
        return self.session.encrypt(data)

    async def receive(self) -> bytes:
        """The next bytes from the peer, decrypted; b"" at the end of the stream, of the TLS
        session, or on an error."""
        while not self._ended:
            raw = await Stream.receive(self)
            if not raw:
                return b""
            plaintext = self._decrypt(raw)
            if plaintext:
                return plaintext
        return b""

    def read_now(self) -> bytes | None:
        """The poller's read, decrypted: None until a whole record's plaintext is there."""
        if self._ended:
            return b""
        raw = Stream.read_now(self)
        if not raw:
            return raw
        plaintext = self._decrypt(raw)
        if plaintext:
            return plaintext
        return b"" if self._ended else None

    def _decrypt(self, raw: bytes) -> bytes:
        """The plaintext `raw` completes (b"" until a whole record is there); notes whether the
        session ended, and sends the TLS layer's own answer (a key update) on its way."""
        session = self.session
        plaintext, self._ended = session.decrypt(raw)
        pending = session.take_pending()
        if pending:
            self.on_tls_output(pending)
        return plaintext

    def ended(self) -> bool:
        return self._ended

    async def aclose(self, goodbye: bool = False) -> None:
        fd, self.fd = self.fd, -1
        if goodbye and fd >= 0:
            try:  # close_notify, best effort: AMQP's own close has said goodbye already
                os.write(fd, self.session.close_notify())
            except OSError:
                pass
        await trio.aclose_forcefully(self.stream)


def open_stream(stream: trio.abc.Stream, read_size: int, on_tls_output: Callable[[bytes], None]) -> Stream:
    """The Stream for `stream`: sealed under TLS (`on_tls_output` then gets what the TLS layer
    itself must send, to be written after what is queued)."""
    if isinstance(stream, TlsStream):
        return SealedStream(stream, read_size, on_tls_output)
    return Stream(stream, read_size)
