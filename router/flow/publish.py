"""Flow records as AMQP messages on the mesh (docs/flow-records.md, "Transport").

Owns: the message a batch travels in (a data section of JSON lines, content-type
`application/x-ndjson`, subject `flow-records`, application-properties naming the router, the
boot and the batch's first and last seq), and handing batches to the core (`publish`): one
message per `batch_records` records, sent presettled to the multicast `mesh_address` like
any message the router itself sends. With no subscriber anywhere the records stay buffered
(bounded: Emitter) for the next flush, unless files keep them anyway.
Must not touch: files and timers (router.net.flowtask), the record fields (recorder.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ..amqp.message import Message, encode_message
from ..amqp.messaging import Properties
from .records import Record, encode_lines

if TYPE_CHECKING:
    from ..core.router import RouterCore
    from .recorder import FlowRecorder

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
