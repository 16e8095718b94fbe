"""The collector's files: flow records as gzip JSON lines partitioned by date, hour and router.

    <root>/date=YYYY-MM-DD/hour=HH/router=<id>/part-<n>.json.gz     (docs/flow-records.md)

Owns: `PartitionWriter`: the partition of a record (its `ts`, UTC; the router id
percent-encoded so that no id can name another directory), the part files (a run never
appends to a file an earlier run wrote: it starts the next `<n>`), one gzip member per write,
`fsync` of every part file written before `write` returns, and deduplication on (router,
boot, seq): a router numbers its records in order, so the highest seq written per (router,
boot) is remembered (`<root>/_collector/seen.json`, replaced atomically after the part files
are synced, bounded) and anything at or below it is a duplicate.
Must not touch: the AMQP side (collect.py), the record fields beyond the common ones.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Final
from urllib.parse import quote

from ..flow.records import Record, encode_lines

STATE_DIR: Final = "_collector"
SEEN_MAX: Final = 100_000  # (router, boot) pairs remembered (the oldest are forgotten first)
OPEN_MAX: Final = 64  # part files kept open at once
_PART: Final = re.compile(r"^part-(\d+)\.json\.gz$")


def partition(record: Record) -> tuple[str, str, str]:
    when = datetime.fromtimestamp(record["ts"], timezone.utc)
    return when.strftime("%Y-%m-%d"), when.strftime("%H"), quote(record["router"], safe="")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class PartitionWriter:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._state_path = self.root / STATE_DIR / "seen.json"
        self.seen: dict[str, int] = self._load_state()
        self._open: dict[tuple[str, str, str], IO[bytes]] = {}
        self.written = 0
        self.duplicates = 0

    def _load_state(self) -> dict[str, int]:
        try:
            data: Any = json.loads(self._state_path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot read the collector's state {self._state_path}: {exc}") from None
        if not isinstance(data, dict) or not all(isinstance(v, int) for v in data.values()):
            raise ValueError(f"the collector's state {self._state_path} is not what this collector writes")
        return data

    def _save_state(self) -> None:
        self._state_path.parent.mkdir(exist_ok=True)
        if len(self.seen) > SEEN_MAX:
            for key in list(self.seen)[: len(self.seen) - SEEN_MAX]:
                del self.seen[key]
        tmp = self._state_path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(self.seen, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._state_path)

    def _file(self, key: tuple[str, str, str]) -> IO[bytes]:
        f = self._open.get(key)
        if f is not None:
            return f
        if len(self._open) >= OPEN_MAX:
            oldest = next(iter(self._open))
            self._open.pop(oldest).close()
        date, hour, router = key
        directory = self.root / f"date={date}" / f"hour={hour}" / f"router={router}"
        directory.mkdir(parents=True, exist_ok=True)
        taken = [int(m[1]) for name in os.listdir(directory) if (m := _PART.match(name))]
        path = directory / f"part-{max(taken, default=-1) + 1:05d}.json.gz"
        f = self._open[key] = open(path, "xb")
        _fsync_dir(directory)
        return f

    def write(self, records: list[Record]) -> int:
        """Append the records not written before; when it returns they are on disk. The number
        of records written (the rest were duplicates)."""
        fresh: dict[tuple[str, str, str], list[Record]] = {}
        seen = self.seen
        newest: dict[str, int] = {}
        for record in records:
            key = f"{record['router']}\t{record['boot']}"
            last = newest.get(key, seen.get(key, -1))
            if record["seq"] <= last:
                self.duplicates += 1
                continue
            newest[key] = record["seq"]
            fresh.setdefault(partition(record), []).append(record)
        for part, batch in fresh.items():
            f = self._file(part)
            f.write(gzip.compress(encode_lines(batch), compresslevel=6))
            f.flush()
            os.fsync(f.fileno())
        if newest:
            for key, seq in newest.items():
                seen.pop(key, None)
                seen[key] = seq  # (most recent last: the oldest are forgotten first)
            self._save_state()
        count = sum(len(batch) for batch in fresh.values())
        self.written += count
        return count

    def close(self) -> None:
        for f in self._open.values():
            f.close()
        self._open.clear()
