"""CutFrame: the frame a read ended inside, until the reads that complete it (transport §2.3).

Owns: where such a frame's start waits, and completing it. Frames are parsed straight from each
read's immutable bytes (large payloads leave as views of them, connection.py), so only the cut
frame is ever copied: joining it with the whole next read would copy every read a second time,
and make a large frame arriving in small reads cost the square of its size. Its start stays in
the read it came in (`kept`) when that holds no more than a cut frame may anyway (the
max-frame-size; a read is 64 KiB, the default) or than four times the frame's part: one join
then makes the frame. Otherwise, and for a frame larger than the reads, its part is copied into
`pending` as the reads come.
Must not touch: parsing frames (the connection's frame loop, Connection.amqp_frames), reading.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mypy_extensions import i64

from .fastparse import u32

if TYPE_CHECKING:
    from .connection import Connection


class CutFrame:
    __slots__ = ("pending", "kept", "kept_at", "kept_view", "max_frame_size")

    def __init__(self, max_frame_size: int) -> None:
        self.pending = bytearray()  # the frame's bytes so far, copied
        self.kept: bytes | None = None  # or the read it starts in, and where it starts there
        self.kept_at: i64 = 0
        self.kept_view: memoryview | None = None  # the read's view, when its payloads made one
        self.max_frame_size = max_frame_size

    @property
    def waiting(self) -> bool:
        return self.kept is not None or len(self.pending) != 0

    def hold(self, conn: Connection, data: bytes, at: int) -> None:
        """`data` from `at` is the start of a frame the read ended inside."""
        n = len(data)
        tail = n - at  # (8 bytes or more: its frame header is whole, and was judged)
        if tail >= 8 and (n <= self.max_frame_size or tail * 4 >= n):
            self.kept, self.kept_at = data, at
            self.kept_view = conn.view_made(data)
        else:
            self.pending += conn.read_view(data)[at:]

    def clear(self) -> None:
        self.pending.clear()
        self.kept = self.kept_view = None

    def complete(self, conn: Connection, data: bytes) -> int:
        """Complete the frame from the head of `data` and have the connection handle it; return
        where the rest of `data` starts (its length when the frame took it all)."""
        kept = self.kept
        if kept is None:
            return self._complete_pending(conn, data)
        at = self.kept_at
        view = self.kept_view if self.kept_view is not None else memoryview(kept)
        self.kept = self.kept_view = None
        end = u32(kept, at) - (len(kept) - at)  # where it ends in data
        if end > len(data):  # a frame larger than the reads: gathered in `pending`
            self.pending += view[at:]
            return self._complete_pending(conn, data)
        conn.amqp_frames(b"".join((view[at:], conn.read_view(data)[:end])))
        return end

    def _complete_pending(self, conn: Connection, data: bytes) -> int:
        pending = self.pending
        taken = 0
        if len(pending) < 8:  # its header was cut too
            taken = min(8 - len(pending), len(data))
            pending += data[:taken]
            if len(pending) < 8:
                return taken
            # The header is whole now, and judged as any frame's: a bad one fails the
            # connection, an empty frame (a heartbeat) is whole already.
            if conn.amqp_frames(bytes(pending)):
                pending.clear()
                return taken
        end = taken + int.from_bytes(pending[:4], "big") - len(pending)  # where it ends in data
        if end > len(data):
            pending += conn.read_view(data)[taken:]
            return len(data)
        whole = b"".join((pending, conn.read_view(data)[taken:end]))
        pending.clear()
        conn.amqp_frames(whole)
        return end
