"""Raw AMQP bytes for hostile-peer tests: frames built by hand (a wrong field type cannot be
produced by a well-behaved encoder), and a socket helper that reads until the router hangs up.

    await sock.send_all(HEADER + frame(OPEN) + frame(close_with(BOOLEAN_TRUE)))
    data = await read_until_closed(sock)
"""

from __future__ import annotations

import struct

import trio

HEADER = b"AMQP\x00\x01\x00\x00"  # transport §2.2, protocol id 0 (no SASL)
OPEN = b"\x00\x53\x10\xc0\x04\x01\xa1\x01c"  # open(container-id "c") (transport §2.7.1)
CLOSE_CODE = b"\x00\x53\x18"  # the descriptor of close (transport §2.7.9)
BOOLEAN_TRUE = b"\x41"
STRING_X = b"\xa1\x01x"
SMALLINT_5 = b"\x54\x05"
UNKNOWN_PERFORMATIVE = b"\x00\x53\x99\x45"  # descriptor 0x99: no such performative; an empty list


def frame(body: bytes, channel: int = 0) -> bytes:
    """An AMQP frame (transport §2.3.1): size, data offset 2, type 0, channel, body."""
    return struct.pack(">IBBH", 8 + len(body), 2, 0, channel) + body


def close_with(error_field: bytes) -> bytes:
    """A close whose one field, `error`, is `error_field` (already encoded)."""
    return CLOSE_CODE + b"\xc0" + bytes([1 + len(error_field), 1]) + error_field


async def read_until_closed(stream: trio.abc.Stream, timeout_s: float = 5.0) -> bytes:
    """Everything the router sends until it closes the socket (fails after `timeout_s`)."""
    received = bytearray()
    with trio.fail_after(timeout_s):
        while True:
            try:
                data = await stream.receive_some(65536)
            except trio.BrokenResourceError:  # reset by the router
                return bytes(received)
            if not data:
                return bytes(received)
            received += data


async def read_until(stream: trio.abc.Stream, marker: bytes, timeout_s: float = 5.0) -> bytes:
    """What the router sends until `marker` has been seen (fails after `timeout_s`)."""
    received = bytearray()
    with trio.fail_after(timeout_s):
        while marker not in received:
            data = await stream.receive_some(65536)
            assert data, f"the router closed before sending {marker!r}"
            received += data
    return bytes(received)
