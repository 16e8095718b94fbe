"""The collector's files: flow records as gzip JSON lines partitioned by date, hour and router.

    <root>/date=YYYY-MM-DD/hour=HH/router=<id>/part-<n>.json.gz     (docs/flow-records.md)

Owns: `PartitionWriter`: the partition of a record (its `ts`, UTC; the router id
percent-encoded so that no id can name another directory), the part files (a run never
appends to a file an earlier run wrote: it starts the next `<n>`), one gzip member per write,
`fsync` of every part file written before `write` returns, and deduplication on (router,
boot, seq): a router numbers its records in order, so the highest seq written per (router,
boot) is remembered (`<root>/_collector/seen.json`, replaced atomically after the part files
are synced, bounded) and anything at or below it is a duplicate.

A part file is written under a hidden name, `.part-<n>.json.gz.inprogress` (readers such as
Spark skip names that start with a dot), and renamed to `part-<n>.json.gz` once complete: when
it is `finish_after_s` old (at the next write or `finish_old`), and at `close`. A reader thus
never sees a file that still grows (the pipeline reads each file once). The state file also
holds the length of every file in progress as of the last write acknowledged; a run that
starts after a crash cuts each file it finds in progress back to that length (a member cut
short, or one written whose records the state does not hold, goes: their records are not in
`seen`, so the router sends them again) and renames it complete.
Must not touch: the AMQP side (collect.py), the record fields beyond the common ones.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Final
from urllib.parse import quote

from ..flow.records import Record, encode_lines

STATE_DIR: Final = "_collector"
SEEN_MAX: Final = 100_000  # (router, boot) pairs remembered (the oldest are forgotten first)
OPEN_MAX: Final = 64  # part files kept open at once
FINISH_AFTER_S: Final = 60.0  # a part file is complete (renamed for readers) this long after it was started
_PART: Final = re.compile(r"^\.?part-(\d+)\.json\.gz(\.inprogress)?$")
IN_PROGRESS: Final = ".inprogress"


def final_name(path: Path) -> Path:
    """`.part-<n>.json.gz.inprogress` -> `part-<n>.json.gz`"""
    return path.with_name(path.name[1 : -len(IN_PROGRESS)])


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
    def __init__(self, root: str | Path, finish_after_s: float = FINISH_AFTER_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._state_path = self.root / STATE_DIR / "seen.json"
        self.finish_after_s = finish_after_s
        self._clock = clock
        self.seen: dict[str, int]
        lengths: dict[str, int]
        self.seen, lengths = self._load_state()
        self._open: dict[tuple[str, str, str], tuple[IO[bytes], Path, float]] = {}  # key -> (file, path, started)
        self.lengths: dict[str, int] = {}  # files in progress (relative paths): their length acknowledged
        self.written = 0
        self.duplicates = 0
        self.recovered = self._recover(lengths)

    def _load_state(self) -> tuple[dict[str, int], dict[str, int]]:
        try:
            data: Any = json.loads(self._state_path.read_text())
        except FileNotFoundError:
            return {}, {}
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot read the collector's state {self._state_path}: {exc}") from None
        if isinstance(data, dict) and set(data) == {"seen", "in_progress"}:
            seen, lengths = data["seen"], data["in_progress"]
        else:  # (the state of a collector from before files in progress: `seen` alone)
            seen, lengths = data, {}
        if not all(isinstance(v, dict) and all(type(n) is int for n in v.values()) for v in (seen, lengths)):
            raise ValueError(f"the collector's state {self._state_path} is not what this collector writes")
        return seen, lengths

    def _save_state(self) -> None:
        self._state_path.parent.mkdir(exist_ok=True)
        if len(self.seen) > SEEN_MAX:
            for key in list(self.seen)[: len(self.seen) - SEEN_MAX]:
                del self.seen[key]
        tmp = self._state_path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump({"seen": self.seen, "in_progress": self.lengths}, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._state_path)

    def _recover(self, lengths: dict[str, int]) -> int:
        """Files an earlier run left in progress (it crashed): cut back to what it acknowledged,
        and complete. The number of files recovered."""
        found = sorted(self.root.glob(f"date=*/hour=*/router=*/.part-*.json.gz{IN_PROGRESS}"))
        for path in found:
            keep = lengths.get(str(path.relative_to(self.root)), 0)
            if keep and path.stat().st_size >= keep:
                with open(path, "r+b") as f:
                    f.truncate(keep)
                    f.flush()
                    os.fsync(f.fileno())
                os.rename(path, final_name(path))
            else:
                path.unlink()  # nothing acknowledged in it
            _fsync_dir(path.parent)
        if found or lengths:
            self._save_state()
        return len(found)

    def _file(self, key: tuple[str, str, str]) -> IO[bytes]:
        opened = self._open.get(key)
        if opened is not None:
            return opened[0]
        if len(self._open) >= OPEN_MAX:
            self._finish(next(iter(self._open)))
        date, hour, router = key
        directory = self.root / f"date={date}" / f"hour={hour}" / f"router={router}"
        directory.mkdir(parents=True, exist_ok=True)
        taken = [int(m[1]) for name in os.listdir(directory) if (m := _PART.match(name))]
        path = directory / f".part-{max(taken, default=-1) + 1:05d}.json.gz{IN_PROGRESS}"
        f = open(path, "xb")
        self._open[key] = (f, path, self._clock())
        _fsync_dir(directory)
        return f

    def _finish(self, key: tuple[str, str, str]) -> None:
        """The file of `key` is complete: closed, and renamed for readers."""
        f, path, _ = self._open.pop(key)
        f.close()
        if self.lengths.pop(str(path.relative_to(self.root)), 0):
            os.rename(path, final_name(path))
        else:
            path.unlink()  # (opened, and nothing written in it)
        _fsync_dir(path.parent)

    def finish_old(self) -> None:
        """Complete the files started `finish_after_s` ago or longer."""
        now = self._clock()
        old = [key for key, (_, _, started) in self._open.items() if now - started >= self.finish_after_s]
        for key in old:
            self._finish(key)
        if old:
            self._save_state()

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
            _, path, _ = self._open[part]
            self.lengths[str(path.relative_to(self.root))] = f.tell()
        if newest:
            for key, seq in newest.items():
                seen.pop(key, None)
                seen[key] = seq  # (most recent last: the oldest are forgotten first)
            self._save_state()
        count = sum(len(batch) for batch in fresh.values())
        self.written += count
        self.finish_old()
        return count

    def close(self) -> None:
        """Complete every file in progress."""
        if not self._open:
            return
        for key in list(self._open):
            self._finish(key)
        self._save_state()
