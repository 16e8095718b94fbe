"""Flow records at run time: the flush once a second and the local files.

Owns: `FlowTask`, which a RouterServer runs when `flow.enabled`: once a second it polls the
recorder (router.flow.recorder: snapshots, hop samples, interval records when due; what it
must read whole a slice at a time, the router's loop serving connections between) and sends
the records to the mesh address (router.flow.publish: without files, one batch at a time,
unsettled, the next as soon as a collector accepted the last; with files, every batch
presettled beside the files) and appends them to the files; a last flush when the router stops
(after the deliveries in flight are drained, before the connections close, so that a subscriber
gets the records up to the stop). `FlowFiles`: gzip JSON lines in
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
from ..flow.publish import Publisher, publish
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
        # Records on the mesh only: kept until a collector accepts them (files keep them otherwise).
        self.publisher: Publisher | None = None
        if flow.mesh_address is not None and self.files is None:
            self.publisher = Publisher(emitter, flow.mesh_address, flow.batch_records)
            self.publisher.woken = self._woken
        self._wake = trio.Event()
        log.info("flow records: boot %s, every %s s to %s%s", emitter.boot, flow.interval_s,
                 flow.mesh_address or "no address", f" and files in {flow.file_dir}" if flow.file_dir else "")  # fmt: skip

    def _woken(self) -> None:
        self._wake.set()  # an outcome: the next batch may go without waiting for the second

    def flush(self, now: float) -> None:
        """Poll the recorder, make every record it leaves, and send or write them."""
        self.recorder.poll(now)
        self._hand_on(now)

    async def flush_in_slices(self, now: float) -> None:
        """As flush, with the router's loop serving connections between the recorder's slices
        (router.flow.recorder.SLICE): at 10,000 busy addresses an interval's records took one
        ~0.4 s stall of every connection when made at once."""
        self.recorder.begin_poll(now)
        while self.recorder.step():
            await trio.lowlevel.checkpoint()
        self._hand_on(now)

    def _hand_on(self, now: float) -> None:
        if self.publisher is not None:
            self.publisher.send(self.core, now)
            return
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
        publisher = self.publisher
        if publisher is not None:
            # Nothing could send a batch again after the stop: the one in flight goes again
            # with the rest (a collector that has it already drops it as a duplicate).
            publisher.recall()
            self.publisher = None
        try:
            self.flush(now)
        finally:
            self.publisher = publisher
        emitter = self.recorder.emitter
        log.info("flow records: %d emitted, %d dropped, %d left unsent (boot %s)", emitter.emitted,
                 emitter.dropped + self.core.forwarder.hops_dropped, len(emitter), emitter.boot)  # fmt: skip
        if publisher is not None and (publisher.retried or publisher.rejected):
            log.info("flow records: %d batch(es) accepted, %d sent again, %d refused by a collector",
                     publisher.accepted, publisher.retried, publisher.rejected)  # fmt: skip

    def send_more(self, now: float) -> None:
        """After an outcome: the next batch, if the records are waiting for one."""
        if self.publisher is not None:
            self.publisher.send(self.core, now)

    async def run(self, after_core: Callable[[], None]) -> None:
        next_flush = trio.current_time() + FLUSH_S
        while True:
            with trio.move_on_at(next_flush):
                await self._wake.wait()
            self._wake = trio.Event()  # before the work: an outcome during it wakes the next wait
            try:
                if trio.current_time() >= next_flush:
                    next_flush = trio.current_time() + FLUSH_S
                    await self.flush_in_slices(self.clock())
                else:
                    self.send_more(self.clock())
                after_core()
            except Exception:  # records are not worth the router: log and go on
                log.exception("flow records: the flush failed")


