"""Raw AMQP bytes for tests and benchmarks that build or take apart what goes on the wire by hand
(the fuzzers: tests/support/fuzzing.py, bench/fuzz.py).

Owns: a frame around already-encoded bytes (`raw_frame`, which may be wrong on purpose: the
engine's `framing.frame` encodes a performative and is always right) and splitting a byte
stream into protocol headers and frames (`split_stream`).
Must not touch: decoding what the frames carry.
"""

from __future__ import annotations

import struct


def raw_frame(channel: int, body: bytes, frame_type: int = 0) -> bytes:
    """A frame header (data offset 2) in front of `body` as given."""
    return struct.pack(">IBBH", 8 + len(body), 2, frame_type, channel) + body


def split_stream(data: bytes) -> list[bytes]:
    """Protocol headers and whole frames, in order; a cut-off tail is kept as one last piece."""
    pieces: list[bytes] = []
    pos = 0
    while pos < len(data):
        if data[pos : pos + 4] == b"AMQP":
            pieces.append(data[pos : pos + 8])
            pos += 8
            continue
        if len(data) - pos < 8:
            break
        size = struct.unpack_from(">I", data, pos)[0]
        if size < 8 or pos + size > len(data):
            break
        pieces.append(data[pos : pos + size])
        pos += size
    if pos < len(data):
        pieces.append(data[pos:])
    return pieces
