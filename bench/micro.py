"""Micro-benchmarks of the engine's hot path, free of sockets and machine noise from the network.

- codec: write and parse a transfer performative (hand-written path vs the general decoder),
  encode/decode/scan a small message;
- engine replay: bytes captured from a real exchange of N 100-byte transfers are fed to a fresh
  receiving engine in 32 KiB reads, as a socket would deliver them (receive side, µs/message);
- engine send: `Link.send_transfer` plus `data_to_send` per message (send side, µs/message).

Run with `make bench` (or `python -m bench micro`). Numbers are reported, never asserted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from router.amqp.connection import Connection, ConnectionConfig
from router.amqp.decode import decode_at
from router.amqp.events import RemoteAttach, RemoteBegin, TransferReceived
from router.amqp.fastparse import parse_transfer
from router.amqp.fastpath import transfer_performative
from router.amqp.message import Message, decode_message, encode_message, scan_sections
from router.amqp.messaging import Properties, Source, Target
from router.amqp.peek import peek

READ_SIZE = 32 * 1024


def _timeit(fn: Callable[[], Any], min_time_s: float = 0.3) -> float:
    """Seconds per call of `fn`, over enough calls to run at least `min_time_s`."""
    calls = 1
    while True:
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        elapsed = time.perf_counter() - started
        if elapsed >= min_time_s:
            return elapsed / calls
        calls *= 2 if elapsed > min_time_s / 10 else 10


def _pair() -> tuple[Connection, Connection]:
    client = Connection(ConnectionConfig(container_id="bench-client"))
    server = Connection(ConnectionConfig(container_id="bench-server", server=True))
    return client, server


def _pump(a: Connection, b: Connection) -> None:
    for _ in range(100):
        ab, ba = a.data_to_send(), b.data_to_send()
        if ab:
            b.receive_data(ab, 0.0)
        if ba:
            a.receive_data(ba, 0.0)
        for conn in (a, b):
            for event in conn.events():
                if isinstance(event, RemoteBegin) and event.session.state.local.name == "UNINIT":
                    event.session.begin()
                elif isinstance(event, RemoteAttach) and event.link.state.local.name == "UNINIT":
                    event.link.attach(source=event.link.remote_source, target=event.link.remote_target)
                    if not event.link.is_sender:
                        event.link.flow(1 << 30)
        if not ab and not ba:
            return


def bench_replay(count: int = 20000) -> dict[str, float]:
    payload = encode_message(Message.value("x" * 60, properties=Properties(to="b")))
    client, server = _pair()
    client.open()
    _pump(client, server)
    server.open()
    _pump(client, server)
    session = client.begin_session()
    _pump(client, server)
    link = session.attach_sender("bench", source=Source(address="a"), target=Target(address="b"))
    _pump(client, server)
    for i in range(count):
        link.send_transfer(i.to_bytes(4, "big"), payload, settled=True)
    stream = client.data_to_send()
    reads = [stream[i : i + READ_SIZE] for i in range(0, len(stream), READ_SIZE)]
    started = time.perf_counter()
    received = 0
    for read in reads:
        server.receive_data(read, 0.0)
        for event in server.events():
            if type(event) is TransferReceived:
                received += 1
    elapsed = time.perf_counter() - started
    assert received == count, (received, count)
    return {"replay_receive_us_per_msg": elapsed / count * 1e6, "replay_msgs_per_s": count / elapsed}


def bench_send(count: int = 20000) -> dict[str, float]:
    payload = encode_message(Message.value("x" * 60, properties=Properties(to="b")))
    client, server = _pair()
    client.open()
    _pump(client, server)
    server.open()
    _pump(client, server)
    session = client.begin_session()
    _pump(client, server)
    link = session.attach_sender("bench", source=Source(address="a"), target=Target(address="b"))
    _pump(client, server)
    tags = [i.to_bytes(4, "big") for i in range(count)]
    started = time.perf_counter()
    send = link.send_transfer
    for i, tag in enumerate(tags):
        send(tag, payload, settled=True)
        if i % 100 == 99:
            client.data_to_send()
    client.data_to_send()
    elapsed = time.perf_counter() - started
    return {"send_us_per_msg": elapsed / count * 1e6}


def bench_codec() -> dict[str, float]:
    message = Message.value("x" * 60, properties=Properties(message_id=7, to="orders", reply_to="r"))
    payload = encode_message(message)
    performative = transfer_performative(3, 12345, b"tag-1", 0, False, False)
    frame = performative + payload
    return {
        "transfer_write_us": _timeit(lambda: transfer_performative(3, 12345, b"tag-1", 0, False, False)) * 1e6,
        "transfer_parse_fast_us": _timeit(lambda: parse_transfer(frame, 3, len(frame))) * 1e6,
        "transfer_parse_general_us": _timeit(lambda: decode_at(frame, 0, len(frame))) * 1e6,
        "message_encode_us": _timeit(lambda: encode_message(message)) * 1e6,
        "message_decode_us": _timeit(lambda: decode_message(payload)) * 1e6,
        "message_scan_us": _timeit(lambda: scan_sections(payload)) * 1e6,
        "message_peek_us": _timeit(lambda: peek(payload)) * 1e6,
    }


def run() -> dict[str, float]:
    results: dict[str, float] = {}
    results.update(bench_codec())
    results.update(bench_replay())
    results.update(bench_send())
    return results
