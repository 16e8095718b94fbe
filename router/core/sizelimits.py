"""Consumers' max-message-size in routing decisions: which consumers a delivery may go to by its size.

Transport §2.7.3: a link endpoint's max-message-size is the largest message it supports, and
"any attempt to deliver a message larger than this results in a message-size-exceeded link
error"; zero or unset, no maximum. A consumer's is the max-message-size of its attach (the
remote attach of the router's sending link): the router never sends it a larger message (a
client such as node amqp10, whose receivers default to 10000, would detach its link, and its
unsettled deliveries with it).

Owns: `consumer_limit(link)` (a consumer's limit as the router keeps it: OutLink.max_message_size,
0 for none), `fits(fwd, out)`, `within(fwd, consumers)`, `unlimited(consumers)` and `refusal(fwd)`
(the outcome of a message no consumer of its address can take). The size compared is the
message's as the router received it: the payload bytes of its transfers so far
(`Forward.arrived`), all of them once it is complete, a lower bound while it still streams in
(the router strips router annotations for clients, so what a client gets is never larger;
a consumer whose listener keeps them, strip_annotations off, gets them added: not counted).
The forwarder consults this only for an address with such consumers (AddressEntry.limited):
deliveries to other addresses pay one test.
Semantics: docs/addressing.md, "Consumers' max-message-size".
Must not touch: choosing among the consumers that fit (sending.py, multicast.py), outcomes
(failures.py relays the refusal), the bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..amqp import errors as E
from ..amqp.linkfields import size_limit
from ..amqp.messaging import Rejected
from ..amqp.performatives import Error

if TYPE_CHECKING:
    from ..amqp.link import Link
    from .delivery import Forward
    from .links import OutLink


def consumer_limit(link: Link) -> int:
    """The max-message-size of the consumer's attach of `link` (the router's sending link), 0
    for none (absent, 0, or beyond any message)."""
    remote = link.remote_attach
    return 0 if remote is None else size_limit(remote.max_message_size)


def fits(fwd: Forward, out: OutLink) -> bool:
    """`out` may be sent `fwd`: no limit, or not below what arrived of it so far."""
    limit = out.max_message_size
    return limit == 0 or fwd.arrived <= limit


def within(fwd: Forward, consumers: list[OutLink]) -> list[OutLink]:
    """The consumers of `consumers` that `fwd` fits (in the same order)."""
    return [out for out in consumers if out.max_message_size == 0 or fwd.arrived <= out.max_message_size]


def unlimited(consumers: list[OutLink]) -> list[OutLink]:
    """The consumers of `consumers` without a limit (in the same order)."""
    return [out for out in consumers if out.max_message_size == 0]


def refusal(fwd: Forward) -> Rejected:
    """The outcome of `fwd` when no consumer of its address can take it: rejected with
    amqp:link:message-size-exceeded, naming its size (so far, while it streams in) and address."""
    size = f"{fwd.arrived} bytes" if fwd.complete else f"at least {fwd.arrived} bytes"
    description = f"message of {size} is larger than the max-message-size of every consumer of {fwd.entry.address}"
    return Rejected(error=Error(condition=E.MESSAGE_SIZE_EXCEEDED, description=description))
