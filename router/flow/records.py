"""Flow records as the router emits them: numbering, the bounded buffer, and batches.

Owns: `Emitter` (gives every record its `router`, `boot`, strictly increasing `seq` and `ts`,
and holds them in a bounded buffer until they are taken in batches; a batch taken to be held
(in flight, waiting for a collector's outcome) still counts against the bound until it is
confirmed, refused or released back to the front of the buffer), the order in which a full
buffer drops records (hop and interval records first, snapshots last; every drop counted), and
the encoding of a batch (JSON lines, UTF-8). The record fields are fixed by docs/flow-records.md.
Must not touch: the routing core (router.flow.recorder reads it), I/O (router.net.flowtask).
"""

from __future__ import annotations

import json
import uuid
from collections import deque
from typing import Any, Final

SNAPSHOTS: Final = frozenset(("router", "link"))  # kept longest when the buffer is full
TYPES: Final = frozenset(("router", "link", "link_interval", "address_interval", "hop"))

Record = dict[str, Any]


class Emitter:
    """Numbers records and holds them, bounded by `capacity`, until `take` hands them on."""

    def __init__(self, router_id: str, capacity: int, boot: str | None = None) -> None:
        self.router_id = router_id
        self.boot = boot if boot is not None else uuid.uuid4().hex
        self.capacity = capacity
        self.seq = 0
        # Two queues, each in seq order: what is dropped first, and snapshots.
        self.optional: deque[Record] = deque()
        self.snapshots: deque[Record] = deque()
        self.emitted = 0  # records handed on (sent or written; held ones once confirmed)
        self.dropped = 0  # records dropped because the buffer was full (or a collector refused them)
        self.held = 0  # records taken with hold=True, in flight: they still count against the bound

    def __len__(self) -> int:
        """Records waiting in the buffer (the held ones aside)."""
        return len(self.optional) + len(self.snapshots)

    def emit(self, kind: str, ts: float, fields: dict[str, Any]) -> Record | None:
        """Make a record of type `kind` at wall time `ts`; None when it was dropped at once (the
        buffer is full of records at least as important, or of records in flight)."""
        snapshot = kind in SNAPSHOTS
        if len(self) + self.held >= self.capacity:
            if self.optional:
                if not snapshot:
                    self.dropped += 1  # the newest optional record goes: the older ones are queued
                    return None
                self.optional.popleft()  # a snapshot displaces the oldest optional record
            elif self.snapshots:
                self.snapshots.popleft()  # only snapshots: the oldest goes
            else:  # the buffer is all in flight: nothing waiting can make room
                self.dropped += 1
                return None
            self.dropped += 1
        self.seq += 1
        record: Record = {"type": kind, "router": self.router_id, "boot": self.boot, "seq": self.seq, "ts": ts}
        record.update(fields)
        (self.snapshots if snapshot else self.optional).append(record)
        return record

    def take(self, limit: int, hold: bool = False) -> list[Record]:
        """Up to `limit` records, oldest (lowest seq) first, removed from the buffer. Held
        (`hold`): in flight, still within the bound, until `confirm`, `refuse` or `release`."""
        out: list[Record] = []
        optional, snapshots = self.optional, self.snapshots
        while len(out) < limit and (optional or snapshots):
            if not snapshots or (optional and optional[0]["seq"] < snapshots[0]["seq"]):
                out.append(optional.popleft())
            else:
                out.append(snapshots.popleft())
        if hold:
            self.held += len(out)
        else:
            self.emitted += len(out)
        return out

    def confirm(self, records: list[Record]) -> None:
        """Held records a collector has: handed on."""
        self.held -= len(records)
        self.emitted += len(records)

    def refuse(self, records: list[Record]) -> None:
        """Held records a collector refused: dropped (sending them again would be refused again)."""
        self.held -= len(records)
        self.dropped += len(records)

    def release(self, records: list[Record]) -> None:
        """Held records no collector took: back at the front of the buffer, in their place.
        They were counted against the bound all along, so they fit."""
        self.held -= len(records)
        for record in reversed(records):
            (self.snapshots if record["type"] in SNAPSHOTS else self.optional).appendleft(record)

    def put_back(self, records: list[Record]) -> None:
        """Records taken but not handed on after all (no destination yet): back at the front,
        as far as the bound allows (the rest count as dropped)."""
        self.emitted -= len(records)
        for record in reversed(records):
            if len(self) >= self.capacity:
                self.dropped += 1
                continue
            queue = self.snapshots if record["type"] in SNAPSHOTS else self.optional
            queue.appendleft(record)


def encode_lines(records: list[Record]) -> bytes:
    """JSON lines: one compact object per line, UTF-8, each line ending in a newline."""
    return "".join(json.dumps(r, separators=(",", ":"), allow_nan=False) + "\n" for r in records).encode()


def decode_lines(data: bytes, max_records: int = 1_000_000) -> list[Record]:
    """The records of a batch from another process (untrusted): each line a JSON object with
    the common fields of the right types, else ValueError naming the line."""
    lines = [line for line in data.split(b"\n") if line.strip()]
    if len(lines) > max_records:
        raise ValueError(f"more than {max_records} records in one batch")
    try:  # one parse for the whole batch (a third of the time of a parse per line)
        records: Any = json.loads(b"[" + b",".join(lines) + b"]")
        if len(records) != len(lines):
            raise ValueError("a line holds more than one value")
    except (UnicodeDecodeError, ValueError):
        records = []
        for number, line in enumerate(lines, 1):  # again, line by line, to say which one
            try:
                records.append(json.loads(line))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise ValueError(f"line {number}: not JSON ({exc})") from None
        if len(records) != len(lines):
            raise ValueError("a line holds more than one value") from None
    for number, record in enumerate(records, 1):
        check_common(record, number)
    result: list[Record] = records
    return result


def check_common(record: Any, number: int = 0) -> None:
    where = f"line {number}: " if number else ""
    if type(record) is not dict:
        raise ValueError(f"{where}a record must be a JSON object")
    if record.get("type") not in TYPES:
        raise ValueError(f"{where}unknown record type {record.get('type')!r}")
    for key in ("router", "boot"):
        value = record.get(key)
        if type(value) is not str or not value or len(value) > 200:
            raise ValueError(f"{where}{key} must be a non-empty string (at most 200 characters)")
    seq = record.get("seq")
    if type(seq) is not int or seq < 0:
        raise ValueError(f"{where}seq must be a non-negative integer")
    ts = record.get("ts")
    if (type(ts) is not int and type(ts) is not float) or not 0 <= ts < 32503680000:  # before year 3000
        raise ValueError(f"{where}ts must be seconds since the epoch")
