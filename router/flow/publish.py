"""Flow records as AMQP messages on the mesh (docs/flow-records.md, "Transport").

Owns: the message a batch travels in (a data section of JSON lines, content-type
`application/x-ndjson`, subject `flow-records`, application-properties naming the router, the
boot and the batch's first and last seq), and handing batches to the core:
- `Publisher` (the router's way, records on the mesh only): one batch at a time, sent
  unsettled to `mesh_address`, held in the bounded buffer (records.Emitter) until its outcome:
  accepted (a collector has written it) confirms it; released or modified (no collector took
  it, or one went away before it wrote) puts it back at the front, sent again after a backoff
  (1 s doubling to 30 s, reset by an accepted batch); rejected (a collector refused it) drops
  it, counted and logged once. One batch in flight keeps each router's batches in seq order
  at a collector, whose dedupe remembers the highest seq written (router.cli.collect_files).
- `publish` (files beside the mesh, and the last flush when the router stops): every buffered
  record in batches, sent presettled (the files keep them; at the stop nothing could send
  them again).
With no destination anywhere the records stay buffered (bounded) for the next flush, unless
files keep them anyway.
Must not touch: files and timers (router.net.flowtask), the record fields (recorder.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ..amqp.message import Message, encode_message
from ..amqp.messaging import Accepted, Properties, Rejected
from .records import Emitter, Record, encode_lines

if TYPE_CHECKING:
    from ..core.router import RouterCore
    from .recorder import FlowRecorder

log = logging.getLogger("router.flow")
CONTENT_TYPE: Final = "application/x-ndjson"
SUBJECT: Final = "flow-records"


def batch_message(records: list[Record], address: str) -> bytes:
    first, last = records[0], records[-1]
    app: dict[str, Any] = {"router": first["router"], "boot": first["boot"], "first_seq": first["seq"],
                           "last_seq": last["seq"], "count": len(records)}  # fmt: skip
    message = Message.data(
        encode_lines(records), properties=Properties(to=address, subject=SUBJECT, content_type=CONTENT_TYPE),
        application_properties=app,
    )  # fmt: skip
    return encode_message(message)


def publish(recorder: FlowRecorder, core: RouterCore, now: float, keep_unsent: bool = True) -> list[list[Record]]:
    """Take every buffered record, in batches; send each to the mesh address if there is one.
    Returns the batches taken (for the files). A batch with no destination is put back when
    `keep_unsent` (no files), else it is only written."""
    flow = recorder.flow
    address = flow.mesh_address
    batches: list[list[Record]] = []
    while True:
        records = recorder.take(flow.batch_records)
        if not records:
            return batches
        if address is not None:
            # Looked at first, so that a router nobody collects from does not count a dropped
            # message (droppedFromRouter) every second.
            entry = core.table.lookup(address)
            if entry is not None and entry.has_destination:
                core.send(address, batch_message(records, address), now)
            elif keep_unsent:
                recorder.put_back(records)
                return batches
        batches.append(records)


RETRY_FIRST_S: Final = 1.0  # after a batch released or modified, the first wait before sending it again
RETRY_MAX_S: Final = 30.0
STALLED_S: Final = 60.0  # a batch without an outcome this long is logged (once)


class Publisher:
    """See the module docstring: one batch in flight, kept until a collector accepts it."""

    def __init__(self, emitter: Emitter, address: str, batch_records: int) -> None:
        self.emitter = emitter
        self.address = address
        self.batch_records = batch_records
        self.in_flight: list[Record] | None = None
        self.sent_at = 0.0
        self.retry_at = 0.0
        self.delay_s = 0.0  # the backoff: 0 after an accepted batch
        self._failed = False  # a batch came back released or modified: the backoff starts at the next send()
        self._stall_logged = False
        self._rejection_logged = False
        self.accepted = self.retried = self.rejected = 0  # batches
        self.woken: Callable[[], None] | None = None  # told when an outcome arrives (the next batch may go)

    def send(self, core: RouterCore, now: float) -> bool:
        """Send the next batch if none is in flight, no backoff runs and a collector can be
        reached; True when one went."""
        if self._failed:
            self._failed = False
            self.delay_s = min(max(self.delay_s * 2, RETRY_FIRST_S), RETRY_MAX_S)
            self.retry_at = now + self.delay_s
        if self.in_flight is not None:
            if now - self.sent_at >= STALLED_S and not self._stall_logged:
                self._stall_logged = True
                log.warning("flow records: no outcome after %.0f s for the batch of seqs %d..%d (a collector "
                            "that holds it unsettled?); still waiting", now - self.sent_at,
                            self.in_flight[0]["seq"], self.in_flight[-1]["seq"])  # fmt: skip
            return False
        if now < self.retry_at:
            return False
        entry = core.table.lookup(self.address)  # first: nobody to send to is no dropped message
        if entry is None or not entry.has_destination:
            return False
        records = self.emitter.take(self.batch_records, hold=True)
        if not records:
            return False
        self.in_flight = records

        def told(state: Any) -> None:
            self._outcome(records, state)

        if not core.send(self.address, batch_message(records, self.address), now, told):
            self.emitter.release(records)
            self.in_flight = None
            return False
        self.sent_at = now
        self._stall_logged = False
        return True

    def recall(self) -> None:
        """Give up waiting for the batch in flight (the router stops): back to the buffer; an
        outcome that comes later is ignored."""
        if self.in_flight is not None:
            self.emitter.release(self.in_flight)
            self.in_flight = None

    def _outcome(self, records: list[Record], state: Any) -> None:
        """Called by the core (within its event handling: no call back into it)."""
        if records is not self.in_flight:
            return  # recalled meanwhile
        self.in_flight = None
        kind = type(state)
        if kind is Accepted:
            self.emitter.confirm(records)
            self.accepted += 1
            self.delay_s = 0.0
        elif kind is Rejected:
            self.emitter.refuse(records)
            self.rejected += 1
            if not self._rejection_logged:
                self._rejection_logged = True
                error = getattr(state, "error", None)
                log.error("flow records: a collector refused the batch of seqs %d..%d (%s); refused batches are "
                          "dropped and counted (flowRecordsDropped)", records[0]["seq"], records[-1]["seq"],
                          getattr(error, "description", None) or getattr(error, "condition", None) or "no reason given")  # fmt: skip
        else:  # released (nobody took it) or modified (taken, then lost): again, after a while
            self.emitter.release(records)
            self.retried += 1
            self._failed = True
        if self.woken is not None:
            self.woken()
