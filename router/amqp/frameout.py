"""A connection engine's output: the bytes queued for the peer, in order, and taking them.

Owns: the queue (`pieces`: encoded frames, protocol headers, and payloads appended as they are,
views of reads included), the frames that must wait until our protocol header and open are out
(transport §2.4.1: nothing may precede the open; `release` lets them go first), and taking
what is queued: joined into one bytes object, or in chunks for a gathered write (writev) that
leaves the large payload views uncopied; and the count of bytes our sessions hold back for the
peer's window (`held_bytes`, kept by sessionheld.py), which the driver adds to what is queued.
Must not touch: encoding frames, frame sizes, when anything is written (connection.py).
"""

from __future__ import annotations

Piece = bytes | memoryview


class FrameOutput:
    __slots__ = ("pieces", "ready", "_deferred", "held_bytes")

    def __init__(self) -> None:
        self.pieces: list[Piece] = []  # what goes to the peer next, in order
        self.ready = False  # header and open are out: frames go straight to `pieces`
        # Frames waiting for the header and our open: the engine may have to write a session's
        # frames (ending it on a session error) before the application opened.
        self._deferred: list[Piece] = []
        # Bytes of frames our sessions hold until the peer opens its incoming window
        # (sessionheld.py): not queued here yet, but waiting for the peer all the same.
        self.held_bytes = 0

    def buffer(self) -> list[Piece]:
        """Where frames go now: the output, or the deferred list until `release`. (The hot path
        appends to it without a call per piece.)"""
        return self.pieces if self.ready else self._deferred

    def defer_first(self, piece: Piece) -> None:
        """`piece` goes before every deferred frame (our open, written after frames that had
        to wait for it)."""
        self._deferred.insert(0, piece)

    def release(self) -> None:
        """Header and open are out: the deferred frames follow them, and frames go straight on."""
        self.ready = True
        self.pieces.extend(self._deferred)
        self._deferred = []

    def take(self) -> bytes:
        """Everything queued, joined; b"" when nothing is."""
        if not self.pieces:
            return b""
        data = b"".join(self.pieces)
        self.pieces = []
        return data

    def take_chunks(self) -> list[Piece]:
        """What take() would return, in pieces for a gathered write: the payloads handed on as
        views of the reads they arrived in (the large ones, sessionin.ZERO_COPY_MIN) kept apart,
        so that they are never copied, the rest joined; empty when nothing is queued."""
        out = self.pieces
        if not out:
            return out  # (empty: the caller only looks at its length)
        self.pieces = []
        chunks: list[Piece] | None = None
        start = 0
        for index in range(len(out)):
            if type(out[index]) is not bytes:  # a view (`memoryview` would be a lookup by name)
                if chunks is None:
                    chunks = []
                if index == start + 1:  # (the usual: one frame header before a large payload)
                    chunks.append(out[start])
                elif index > start:
                    chunks.append(b"".join(out[start:index]))
                chunks.append(out[index])
                start = index + 1
        if chunks is None:  # the usual: no views, one chunk
            if len(out) == 1:
                return out  # (one frame, most often of a lone message: no join, no new list)
            return [b"".join(out)]
        if start < len(out):
            chunks.append(b"".join(out[start:]))
        return chunks
