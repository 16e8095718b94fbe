"""Source filters in routing decisions: which consumers a delivery may go to.

Owns: `eligible(fwd, out)` (the consumer's filters pass the delivery: no-local, and the
filters that read the message, through router.amqp.filters), `matching(fwd, consumers)`, and
`capabilities(consumer_filter)` (what a source applying those filters advertises,
apache-filters.xml). The message's fields are read from the delivery's first frame once, when
a filter first asks, and kept on the Forward (`fields`) while it may be routed again (waiting
for credit). The forwarder consults this only for an address with filtered consumers
(AddressEntry.filtered): deliveries to other addresses cost nothing.
Semantics (docs/addressing.md "Filters"): a delivery goes only to consumers whose filters pass
it; a first frame whose sections cannot be read up to the body passes no filter that reads it.
Must not touch: choosing among the eligible consumers (sending.py, multicast.py), the bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..amqp import filters
from ..amqp.msgfields import MessageFields
from ..amqp.types import Symbol

if TYPE_CHECKING:
    from ..amqp.filters import ConsumerFilter
    from .delivery import Forward
    from .links import OutLink

_EXCHANGE = Symbol(filters.CAPABILITIES[0])
_NO_LOCAL = Symbol(filters.CAPABILITIES[1])
_SELECTOR = Symbol(filters.CAPABILITIES[2])


def _fields(fwd: Forward) -> MessageFields | None:
    fields = fwd.fields
    if fields is None and fwd.first is not None:
        fields = fwd.fields = MessageFields(fwd.first)
    return fields


def eligible(fwd: Forward, out: OutLink) -> bool:
    """Whether `out`'s filters let `fwd` through."""
    wanted = out.filter
    if wanted is None:
        return True
    if wanted.no_local:
        # apache-filters.xml: not a message sent on the connection receiving from the source
        session = fwd.in_session
        if session is not None and session.conn is out.conn.engine and out.neighbour is None:
            return False
    if not wanted.reads_message:
        return True
    fields = _fields(fwd)
    return fields is not None and wanted.matches(fields)


def matching(fwd: Forward, consumers: list[OutLink]) -> list[OutLink]:
    """The consumers of `consumers` whose filters let `fwd` through (in the same order)."""
    return [out for out in consumers if out.filter is None or eligible(fwd, out)]


def capabilities(wanted: ConsumerFilter) -> tuple[Symbol, ...]:
    """The capabilities of a source applying these filters (apache-filters.xml: a source
    supporting a filter type MUST carry its capability)."""
    caps: list[Symbol] = []
    if wanted.subject_equals is not None or wanted.topic is not None or wanted.headers is not None:
        caps.append(_EXCHANGE)
    if wanted.no_local:
        caps.append(_NO_LOCAL)
    if wanted.selector is not None:
        caps.append(_SELECTOR)
    return tuple(caps)
