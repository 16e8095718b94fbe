"""A TCP-to-WebSocket bridge for the WebSocket benchmark (`python -m bench.wsbridge WS_PORT`):
prints `bridge PORT`, then carries every TCP connection to PORT over its own WebSocket to the
router's WebSocket listener on WS_PORT (subprotocol amqp; what one TCP read brings goes in one
binary message), so that the Proton C load generator, which speaks TCP only, reaches it. It runs
in its own process: its CPU is not the router's."""

from __future__ import annotations

import sys
from functools import partial

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, BytesMessage, CloseConnection, Ping, Request

READ = 128 * 1024


async def carry(ws_port: int, tcp: trio.SocketStream) -> None:
    upstream = await trio.open_tcp_stream("127.0.0.1", ws_port)
    ws = WSConnection(ConnectionType.CLIENT)
    await upstream.send_all(ws.send(Request(host="127.0.0.1", target="/", subprotocols=["amqp"])))
    accepted = False
    while not accepted:
        data = await upstream.receive_some(READ)
        if not data:
            return
        ws.receive_data(data)
        accepted = any(isinstance(event, AcceptConnection) for event in ws.events())

    async def up() -> None:
        while data := await tcp.receive_some(READ):
            await upstream.send_all(ws.send(BytesMessage(data=data)))

    async def down() -> None:
        while data := await upstream.receive_some(READ):
            ws.receive_data(data)
            out = bytearray()
            for event in ws.events():
                if isinstance(event, BytesMessage):
                    out += event.data
                elif isinstance(event, Ping):
                    await upstream.send_all(ws.send(event.response()))
                elif isinstance(event, CloseConnection):
                    return
            if out:
                await tcp.send_all(bytes(out))

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(down)
            await up()
            nursery.cancel_scope.cancel()
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        await trio.aclose_forcefully(upstream)


async def main(ws_port: int) -> None:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, partial(carry, ws_port), 0, host="127.0.0.1"))
        print(f"bridge {listeners[0].socket.getsockname()[1]}", flush=True)


if __name__ == "__main__":
    trio.run(main, int(sys.argv[1]))
