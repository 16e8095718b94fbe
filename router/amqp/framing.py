"""Protocol headers (transport §2.2, security §5.1-§5.3) and frame layout (transport §2.3).

Owns: header constants and classification, the 8-byte frame header, and writing whole frames
from a performative plus an optional payload.
Must not touch: connection state, the meaning of performatives.
"""

from __future__ import annotations

import struct
from typing import Any, Final

from .encode import encode_value

AMQP_HEADER: Final = b"AMQP\x00\x01\x00\x00"
TLS_HEADER: Final = b"AMQP\x02\x01\x00\x00"
SASL_HEADER: Final = b"AMQP\x03\x01\x00\x00"
HEADER_SIZE: Final = 8

FRAME_AMQP: Final = 0x00  # transport §2.3.2
FRAME_SASL: Final = 0x01  # security §5.3.1
MIN_MAX_FRAME_SIZE: Final = 512  # transport §2.7.1 (MIN-MAX-FRAME-SIZE)

FRAME_HEADER: Final = struct.Struct(">IBBH")  # size, doff, type, channel
_pack_header = FRAME_HEADER.pack
EMPTY_FRAME: Final = _pack_header(8, 2, FRAME_AMQP, 0)  # a heartbeat, transport §2.4.5


def classify_header(header: bytes) -> str:
    """'amqp', 'sasl', 'tls', or 'unknown' (wrong protocol id/version, or not AMQP at all)."""
    if header == AMQP_HEADER:
        return "amqp"
    if header == SASL_HEADER:
        return "sasl"
    if header == TLS_HEADER:
        return "tls"
    return "unknown"


def frame(channel: int, body: Any, payload: bytes = b"", frame_type: int = FRAME_AMQP) -> bytes:
    """One complete frame: header, encoded performative `body`, then `payload` bytes."""
    out = bytearray(8)
    encode_value(out, body)
    out += payload
    out[0:8] = _pack_header(len(out), 2, frame_type, channel)
    return bytes(out)
