"""A WebSocket client for the tests, on wsproto (the other side of router/net/websocket.py):
a raw client for hostile peers, and a bridge that lets our TCP AMQP client reach a WebSocket
listener (a local TCP port whose bytes travel in binary messages cut as the test chooses).

    ws = await WsClient.open(port)                     # the upgrade done (subprotocol amqp)
    await ws.send_binary(b"AMQP...")                   # one message; or ws.send_raw(bytes)
    data = await ws.receive_binary(8)                  # AMQP bytes; ws.close_code once closed
    async with ws_bridge(port, cut=...) as local_port: # connect("127.0.0.1", local_port)
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, BytesMessage, CloseConnection, Ping, Pong, RejectConnection, RejectData, Request

TIMEOUT_S = 10.0
Cut = Callable[[bytes], list[bytes]]  # AMQP bytes -> the payloads of the WebSocket messages carrying them


class WsRejected(Exception):
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"{status}: {body!r}")
        self.status, self.body = status, body


class WsClient:
    def __init__(self, stream: trio.abc.Stream, ws: WSConnection) -> None:
        self.stream, self.ws = stream, ws
        self.received = bytearray()  # AMQP bytes not yet taken
        self.close_code: int | None = None
        self.close_reason = ""
        self.pongs: list[bytes] = []
        self.eof = False

    @classmethod
    async def open(cls, port: int, *, path: str = "/", subprotocols: tuple[str, ...] = ("amqp",),
                   ssl_context: ssl.SSLContext | None = None, headers: tuple[tuple[bytes, bytes], ...] = ()) -> WsClient:  # fmt: skip
        stream: trio.abc.Stream = await trio.open_tcp_stream("127.0.0.1", port)
        if ssl_context is not None:
            stream = trio.SSLStream(stream, ssl_context, server_hostname="127.0.0.1")
        ws = WSConnection(ConnectionType.CLIENT)
        await stream.send_all(ws.send(Request(host="127.0.0.1", target=path, subprotocols=list(subprotocols),
                                               extra_headers=list(headers))))
        try:
            return await cls._upgrade(stream, ws)
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise

    @classmethod
    async def _upgrade(cls, stream: trio.abc.Stream, ws: WSConnection) -> WsClient:
        status, body = 0, b""
        with trio.fail_after(TIMEOUT_S):
            while True:
                data = await stream.receive_some(65536)
                ws.receive_data(data or None)
                for event in ws.events():
                    if isinstance(event, AcceptConnection):
                        assert event.subprotocol == "amqp"
                        return cls(stream, ws)
                    if isinstance(event, RejectConnection):
                        status = event.status_code
                        if not event.has_body:
                            raise WsRejected(status, b"")
                    elif isinstance(event, RejectData):
                        body += event.data
                        if event.body_finished:
                            raise WsRejected(status, body)
                if not data:
                    raise WsRejected(status, body)

    async def send_binary(self, data: bytes, *, fragments: int = 1) -> None:
        """One binary message carrying `data`, in `fragments` frames."""
        step = max(1, -(-len(data) // fragments))
        pieces = [data[i : i + step] for i in range(0, len(data), step)] or [b""]
        wire = b"".join(self.ws.send(BytesMessage(data=p, message_finished=i == len(pieces) - 1)) for i, p in enumerate(pieces))
        await self.stream.send_all(wire)

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def pump(self) -> bool:
        """Read once; False at the end of the stream."""
        try:
            data = await self.stream.receive_some(65536)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            data = b""
        if not data:
            self.eof = True
            return False
        self.ws.receive_data(data)
        for event in self.ws.events():
            if isinstance(event, BytesMessage):
                self.received += event.data
            elif isinstance(event, Pong):
                self.pongs.append(bytes(event.payload))
            elif isinstance(event, Ping):
                await self.stream.send_all(self.ws.send(event.response()))
            elif isinstance(event, CloseConnection):
                self.close_code, self.close_reason = event.code, event.reason or ""
                try:
                    await self.stream.send_all(self.ws.send(event.response()))
                except Exception:  # the server may be gone already
                    pass
        return True

    async def receive_binary(self, count: int) -> bytes:
        with trio.fail_after(TIMEOUT_S):
            while len(self.received) < count:
                if not await self.pump():
                    break
        data, self.received = bytes(self.received[:count]), self.received[count:]
        return data

    async def until_closed(self) -> None:
        """Read until the server closes the socket."""
        with trio.fail_after(TIMEOUT_S):
            while await self.pump():
                pass

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)


@asynccontextmanager
async def ws_bridge(port: int, *, cut: Cut | None = None, path: str = "/",
                    ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[int]:  # fmt: skip
    """A local TCP port: each connection to it is carried to the router's WebSocket listener
    `port`, our AMQP bytes cut into messages by `cut` (one message per read by default)."""

    async def carry(tcp: trio.SocketStream) -> None:
        ws = await WsClient.open(port, path=path, ssl_context=ssl_context)

        async def up() -> None:
            while True:
                try:
                    data = await tcp.receive_some(65536)
                except trio.BrokenResourceError:
                    data = b""
                if not data:
                    return
                for piece in cut(data) if cut is not None else [data]:
                    await ws.send_binary(piece)

        async def down() -> None:
            while await ws.pump():
                if ws.received:
                    data, ws.received = bytes(ws.received), bytearray()
                    await tcp.send_all(data)
            await tcp.aclose()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(down)
            await up()
            await trio.aclose_forcefully(ws.stream)
            nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, carry, 0, host="127.0.0.1"))
        yield listeners[0].socket.getsockname()[1]
        nursery.cancel_scope.cancel()
