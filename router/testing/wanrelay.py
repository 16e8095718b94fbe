"""A WAN between sites for tests and benchmarks: a TCP relay that delays every byte and can cut.

    python -m router.testing.wanrelay --delay-ms 10 --route 10.1.2.1:55671=10.1.1.2:55671 ...

Each `--route LISTEN=TARGET` accepts on LISTEN and relays every connection to TARGET, holding
each chunk for `--delay-ms` in each direction (so a round trip costs twice that), in order. The
kernel of the machines this runs on has no netem, so the delay line is in user space; it keeps
at most `--window-bytes` in flight per direction (the bandwidth-delay product of a real link:
past it, reading pauses and TCP's own flow control pushes back on the sender).

Commands on standard input, one per line, each answered by one JSON line on standard output:
- `cut`: the link goes dark. Bytes already in flight and all bytes that arrive are dropped
  without a word (no FIN, no RST: a cable cut or a black-holed route, which the routers must
  detect by their own liveness checks); new connections are accepted and black-holed too.
- `heal`: new connections are relayed again. Connections that lived through the cut stay dark:
  their peers have lost bytes on them and must give them up, as after a real outage.
- `delay MS`: the one-way delay from now on.
- `stats`: the bytes relayed in each direction and the connections relayed and black-holed.
A line `relaying LISTEN -> TARGET` per route on standard output says it is ready (with the port
bound, when LISTEN asked for port 0). It exits when standard input closes.

Owns: the relay. Must not touch: the router (this is the network between routers).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field

import trio


@dataclass
class Link:
    delay_s: float
    window_bytes: int
    cut: bool = False
    generation: int = 0  # bumped at every cut: connections of an older generation stay dark
    stats: dict[str, int] = field(
        default_factory=lambda: {"bytes_forward": 0, "bytes_back": 0, "relayed": 0, "blackholed": 0}
    )


async def _drain(stream: trio.SocketStream) -> None:
    """Read and drop everything (a black hole) until the peer gives up."""
    try:
        while await stream.receive_some(65536):
            pass
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


async def _pipe(source: trio.SocketStream, sink: trio.SocketStream, link: Link, generation: int, counter: str) -> None:
    """Copy `source` to `sink`, each chunk `link.delay_s` late, dropping all once the link is cut."""
    send, receive = trio.open_memory_channel[tuple[float, bytes]](math.inf)
    in_flight = 0
    window_open = trio.Event()
    window_open.set()

    async def deliver() -> None:
        nonlocal in_flight
        async for due, chunk in receive:
            await trio.sleep_until(due)
            in_flight -= len(chunk)
            if in_flight <= link.window_bytes:
                window_open.set()
            if link.generation != generation:
                continue  # cut: dropped on the wire
            link.stats[counter] += len(chunk)
            try:
                await sink.send_all(chunk)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return  # the far side is gone; the reader ends when this side closes too

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(deliver)
            while True:
                await window_open.wait()
                try:
                    chunk = await source.receive_some(65536)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    chunk = b""  # reset by the peer: as good as closed
                if not chunk:
                    break
                if link.generation != generation:
                    continue  # cut: the source still sends, nothing arrives
                in_flight += len(chunk)
                if in_flight > link.window_bytes:
                    window_open = trio.Event()
                send.send_nowait((trio.current_time() + link.delay_s, chunk))
            send.close()  # the FIN follows the last byte, as late
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
    finally:
        if link.generation == generation:  # a cut link never tells the other side
            with trio.CancelScope(shield=True):
                try:
                    await sink.send_eof()
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    pass
        else:
            await _drain(source)


async def _relay(client: trio.SocketStream, target: tuple[str, int], link: Link) -> None:
    generation = link.generation
    async with client:
        if link.cut:
            link.stats["blackholed"] += 1
            await _drain(client)
            return
        try:
            server = await trio.open_tcp_stream(*target)
        except OSError:
            return  # the client sees the connection close, as if refused
        link.stats["relayed"] += 1
        async with server, trio.open_nursery() as nursery:
            nursery.start_soon(_pipe, client, server, link, generation, "bytes_forward")
            nursery.start_soon(_pipe, server, client, link, generation, "bytes_back")


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


async def _commands(link: Link, done: trio.CancelScope) -> None:
    stdin = trio.lowlevel.FdStream(sys.stdin.fileno())
    buffer = b""
    while True:
        data = await stdin.receive_some(4096)
        if not data:
            done.cancel()
            return
        buffer += data
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            words = line.decode().split()
            if words == ["cut"]:
                link.cut = True
                link.generation += 1
            elif words == ["heal"]:
                link.cut = False
            elif len(words) == 2 and words[0] == "delay":
                link.delay_s = float(words[1]) / 1000
            reply = {"cut": link.cut, "delay_ms": link.delay_s * 1000, **link.stats}
            print(json.dumps(reply), flush=True)


async def main(routes: list[tuple[tuple[str, int], tuple[str, int]]], link: Link) -> None:
    async with trio.open_nursery() as nursery:
        for listen, target in routes:
            listeners = await trio.open_tcp_listeners(listen[1], host=listen[0])

            async def handler(stream: trio.SocketStream, target: tuple[str, int] = target) -> None:
                await _relay(stream, target, link)

            nursery.start_soon(trio.serve_listeners, handler, listeners)
            port = listeners[0].socket.getsockname()[1]  # the bound one: LISTEN may name port 0
            print(f"relaying {listen[0]}:{port} -> {target[0]}:{target[1]}", flush=True)
        await _commands(link, nursery.cancel_scope)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--route", action="append", required=True, help="LISTEN_HOST:PORT=TARGET_HOST:PORT")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="one-way delay")
    parser.add_argument("--window-bytes", type=int, default=4 << 20, help="bytes in flight per direction")
    args = parser.parse_args()
    routes = []
    for text in args.route:
        listen, _, target = text.partition("=")
        routes.append((_address(listen), _address(target)))
    trio.run(main, routes, Link(args.delay_ms / 1000, args.window_bytes))


if __name__ == "__main__":
    cli()
