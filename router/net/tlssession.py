"""One connection's TLS session, encrypting and decrypting in memory (ssl.SSLObject on memory
BIOs), and TlsStream, the trio stream that carries it over a TCP socket.

    session = TlsSession(context, server_side=True)
    await session.handshake(tcp)                 # TlsRefused with the reason if it fails
    stream = TlsStream(tcp, session)             # a trio stream: receive_some/send_all are TLS
    ciphertext = session.encrypt(plaintext)      # what the driver writes to the socket itself
    plaintext, ended = session.decrypt(raw)      # what it reads from the socket itself

Why not trio.SSLStream: the driver reads and writes a TCP socket's descriptor directly (a task
switch and trio's bookkeeping less per forwarding hop, see driver.py and stream.py). trio.SSLStream can only be
used through its own receive_some/send_all, which put that cost back and a retry loop of its own
on top: scenario 1 over it cost 5.2 µs of router CPU per message against 1.35 in plain TCP
(bench/README.md, "TLS"). Here the driver keeps its direct socket I/O and every byte still goes
through OpenSSL: the driver writes nothing to the socket but what `encrypt` returned, and gives
the engine nothing but what `decrypt` returned (tests/test_tls.py watches the wire for plaintext).

Owns: the handshake over a trio TCP stream (within the caller's time-out), encryption, decryption,
what the TLS layer itself must send (alerts, post-handshake messages, close_notify).
Must not touch: which certificates (tls.py), AMQP.
"""

from __future__ import annotations

import ssl
from typing import Any

import trio

HANDSHAKE_READ = 16 * 1024 + 512  # one TLS record and its header


class TlsRefused(Exception):
    """A peer that did not get as far as a TLS session (wrong first bytes, a failed handshake)."""


def reason_of(exc: BaseException) -> str:
    """An SSL error in words: the certificate check's message, else OpenSSL's reason."""
    return str(getattr(exc, "verify_message", None) or getattr(exc, "reason", None) or exc or type(exc).__name__)


class TlsSession:
    """The TLS state of one connection; bytes in and out of it are the socket's."""

    __slots__ = ("_incoming", "_outgoing", "_object")

    def __init__(self, context: ssl.SSLContext, *, server_side: bool, server_hostname: str | None = None,
                 received: bytes = b"") -> None:  # fmt: skip
        """`received`: bytes of the peer's already read from the socket (its ClientHello's first)."""
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        if received:
            self._incoming.write(received)
        self._object = context.wrap_bio(self._incoming, self._outgoing, server_side=server_side,
                                        server_hostname=server_hostname)  # fmt: skip

    async def handshake(self, tcp: trio.abc.Stream) -> None:
        """Run the handshake over `tcp`; TlsRefused if it fails (the peer gets our alert first)."""
        obj, incoming = self._object, self._incoming
        while True:
            try:
                obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._send_pending(tcp)
                data = await tcp.receive_some(HANDSHAKE_READ)
                if not data:
                    raise TlsRefused("the peer closed the connection during the TLS handshake") from None
                incoming.write(data)
            except ssl.SSLError as exc:
                try:
                    with trio.move_on_after(1.0):  # the alert tells the peer why; never wait long for it
                        await self._send_pending(tcp)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    pass
                raise TlsRefused(f"TLS handshake failed: {reason_of(exc)}") from None
        await self._send_pending(tcp)  # our Finished (and a server's tickets)

    async def _send_pending(self, tcp: trio.abc.Stream) -> None:
        pending = self._outgoing.read()
        if pending:
            await tcp.send_all(pending)

    def encrypt(self, plaintext: bytes) -> bytes:
        """The records carrying `plaintext` (in order after every earlier call's); b"" once the
        TLS session has ended (the peer's close_notify or a fatal alert): nothing more can reach
        the peer then, as on a closed socket, and the reader sees the end of the stream."""
        try:
            self._object.write(plaintext)
        except ssl.SSLError:  # SSLZeroReturnError and kin: ended under a writer with output queued
            return b""
        return self._outgoing.read()

    def decrypt(self, received: bytes) -> tuple[bytes, bool]:
        """(the plaintext `received` completes, whether the TLS session ended: close_notify or an
        error such as a TLS 1.3 server's refusal of our certificate, which comes after the
        handshake). A partial record gives b"" until the rest arrives."""
        if received:
            self._incoming.write(received)
        chunks: list[bytes] = []
        obj = self._object
        while True:
            try:
                chunk = obj.read(HANDSHAKE_READ)
            except ssl.SSLWantReadError:
                break
            except (ssl.SSLZeroReturnError, ssl.SSLError):
                return b"".join(chunks), True
            if not chunk:
                return b"".join(chunks), True
            chunks.append(chunk)
        return (chunks[0] if len(chunks) == 1 else b"".join(chunks)), False

    def take_pending(self) -> bytes:
        """What the TLS layer itself has to send now (an answer to a key update, say)."""
        return self._outgoing.read() if self._outgoing.pending else b""

    def close_notify(self) -> bytes:
        """The close_notify alert, to write before the socket closes (best effort)."""
        try:
            self._object.unwrap()
        except ssl.SSLError:
            pass
        return self._outgoing.read()

    def version(self) -> str:
        return self._object.version() or ""

    def cipher(self) -> str:
        cipher = self._object.cipher()
        return cipher[0] if cipher else ""

    def peer_certificate(self) -> tuple[dict[str, Any] | None, bytes | None]:
        """(the verified peer certificate's fields, or None/empty; its DER bytes)."""
        return self._object.getpeercert(), self._object.getpeercert(binary_form=True)


class TlsStream(trio.abc.Stream):
    """A TCP stream with a TLS session on it. The router's driver reads and writes
    `transport_stream` itself through `session`; receive_some/send_all serve everyone else."""

    def __init__(self, transport_stream: trio.abc.Stream, session: TlsSession) -> None:
        self.transport_stream = transport_stream
        self.session = session
        self._ended = False

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        while not self._ended:
            raw = bytes(await self.transport_stream.receive_some(max_bytes))
            plaintext, self._ended = self.session.decrypt(raw)
            self._ended = self._ended or not raw
            pending = self.session.take_pending()
            if pending:
                await self.transport_stream.send_all(pending)
            if plaintext:
                return plaintext
        return b""

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.transport_stream.send_all(self.session.encrypt(bytes(data)))

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.transport_stream.aclose()
