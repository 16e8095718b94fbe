"""Flow records at run time: the flush once a second and the local files.

Owns: `FlowTask`, which a RouterServer runs when `flow.enabled`: once a second it polls the
recorder (router.flow.recorder: snapshots, hop samples, interval records when due), sends the
batches to the mesh address (router.flow.publish) and appends them to the files; a last flush
when the router stops (after the deliveries in flight are drained, before the connections
close, so that a subscriber gets the records up to the stop). `FlowFiles`: gzip JSON lines in
`file_dir`, `flow-<router>-<boot>-<n>.json.gz`, one gzip member per flush (a file cut short by
a crash loses at most its last member), a new file past `file_rotate_bytes` of records. The
writes are small and once a second, so they run on the router's thread; a failing write is
logged (once until writing works again) and its records count as dropped.
Must not touch: the record fields (router.flow), the core's state.
"""

from __future__ import annotations

import gzip
import importlib.machinery
import logging
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import trio

from ..config.models import Flow
from ..flow.publish import publish
from ..flow.recorder import FlowRecorder
from ..flow.records import Record, encode_lines

log = logging.getLogger("router.flow")
FLUSH_S: Final = 1.0


def _compiled(core: Any) -> bool:
    """Whether the core runs compiled (mypyc): its module is an extension module."""
    module = type(core).__module__
    path = getattr(sys.modules.get(module), "__file__", "") or ""
    return path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


class FlowFiles:
    def __init__(self, directory: str, router_id: str, boot: str, rotate_bytes: int) -> None:
        self.directory = Path(directory)
        self.prefix = f"flow-{re.sub(r'[^A-Za-z0-9._:-]', '_', router_id)}-{boot}"
        self.rotate_bytes = rotate_bytes
        self.number = 0
        self.written = rotate_bytes  # start a file at the first write
        self.failing = False

    @property
    def path(self) -> Path:
        return self.directory / f"{self.prefix}-{self.number:06d}.json.gz"

    def write(self, batches: list[list[Record]]) -> int:
        """Append the batches; the number of records that could not be written."""
        records = [r for batch in batches for r in batch]
        if not records:
            return 0
        data = encode_lines(records)
        try:
            if self.written + len(data) > self.rotate_bytes:
                self.number += 1
                self.written = 0
                self.directory.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab") as f:
                f.write(gzip.compress(data, compresslevel=6))
                f.flush()
            self.written += len(data)
        except OSError as exc:
            if not self.failing:
                log.error("flow records: cannot write %s: %s (records are dropped until it works)", self.path, exc)
            self.failing = True
            return len(records)
        if self.failing:
            log.info("flow records: writing %s again", self.path)
            self.failing = False
        return 0


class FlowTask:
    def __init__(self, core: Any, flow: Flow, clock: Callable[[], float], version: str) -> None:
        self.core = core
        self.flow = flow
        self.clock = clock
        self.recorder = FlowRecorder(core, flow, version=version, compiled=_compiled(core))
        emitter = self.recorder.emitter
        self.files = FlowFiles(flow.file_dir, core.router_id, emitter.boot, flow.file_rotate_bytes) if flow.file_dir else None
        log.info("flow records: boot %s, every %s s to %s%s", emitter.boot, flow.interval_s,
                 flow.mesh_address or "no address", f" and files in {flow.file_dir}" if flow.file_dir else "")  # fmt: skip

    def flush(self, now: float) -> None:
        self.recorder.poll(now)
        batches = publish(self.recorder, self.core, now, keep_unsent=self.files is None)
        if self.files is not None:
            lost = self.files.write(batches)
            if lost:
                emitter = self.recorder.emitter
                emitter.emitted -= lost
                emitter.dropped += lost

    def final(self, now: float) -> None:
        """The last flush, when the router stops: the interval so far is reported too."""
        self.recorder.poll(now)
        self.recorder.interval(now)
        self.flush(now)
        emitter = self.recorder.emitter
        log.info("flow records: %d emitted, %d dropped, %d left unsent (boot %s)", emitter.emitted,
                 emitter.dropped + self.core.forwarder.hops_dropped, len(emitter), emitter.boot)  # fmt: skip

    async def run(self, after_core: Callable[[], None]) -> None:
        while True:
            await trio.sleep(FLUSH_S)
            try:
                self.flush(self.clock())
                after_core()
            except Exception:  # records are not worth the router: log and go on
                log.exception("flow records: the flush failed")


