"""Router annotations read: what another router's annotations (router.core.annotate) say about
a delivery, checked, and remembered per inter-router link.

Owns: reading the router annotations of a delivery that arrived from another router (`parse`),
of one from a router-aware client whose listener keeps them (`kept_from_client`), and the trace
id a client asks hop records for (`client_trace`). Between two routers consecutive deliveries
nearly always carry the same section: each inter-router link remembers what the sections it saw
said (`Seen`, a `Record` per distinct section), so a section is read, and the next router's and
the consumer's sections are built (annotate.py, from the Record), once per link and kind of
delivery rather than once per delivery. A malformed router annotation raises DecodeError (the
delivery is rejected).
Must not touch: writing or stripping sections (annotate.py), routing decisions, links.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ..amqp.errors import DecodeError
from ..amqp.peek import RoutingView
from ..amqp.sections import OTHER, read_string, read_strings
from .annotate import (
    INGRESS, K_CLIENT_TRACE, KEY_FLOW_TRACE, KEY_INGRESS, KEY_TO, KEY_TRACE, TO, TRACE, TRACE_MAX, entries, head,
)  # fmt: skip
from .delivery import Meta, Payload

if TYPE_CHECKING:
    from .paths import Remembered

__all__ = ["Record", "Seen", "SEEN_MAX", "parse", "client_trace", "kept_from_client"]


class Record:
    """What one message-annotations section from another router says (parsed once per distinct
    section on a link: consecutive deliveries between two routers nearly always carry the same
    bytes), and the sections derived from it, built on first use."""

    __slots__ = ("to", "ingress", "trace", "kept", "routed", "stripped", "checked_under", "looped", "flow_trace",
                 "remembered")

    def __init__(
        self, to: str | None, ingress: str | None, trace: tuple[str, ...], kept: list[bytes], flow_trace: str | None = None,
    ) -> None:  # fmt: skip
        self.to = to  # x-opt-qd.to, or None: routed by properties.to
        self.flow_trace = flow_trace  # x-opt-qd.flow-trace (a valid one), or None
        self.ingress = ingress
        self.trace = trace
        self.kept = kept  # the entries that are not router annotations, as bytes
        self.routed: bytes | None = None  # the section for the next router (this one traced)
        self.stripped: bytes | None = None  # the section for a consumer (b"": none at all)
        # Whether the trace shows a loop (remote.looped), and under which Paths generation
        # (routes and data links) that was found.
        self.checked_under = -1
        self.looped = False
        # The anycast paths of its deliveries (remote.anycast; made on first use): consecutive
        # deliveries of a link nearly always share record and destinations.
        self.remembered: Remembered | None = None


class Seen:
    """The records of one inter-router receiving link, by section bytes (bounded)."""

    __slots__ = ("came_from", "entering", "records", "last", "last_key")

    def __init__(self, came_from: str, entering: bool = False) -> None:
        self.came_from = came_from
        # From an edge router: the message enters the mesh here (the edge takes no part in
        # routes, valid origins or traces), so its ingress and trace are not kept.
        self.entering = entering
        self.records: dict[bytes, Record] = {}
        # The record of the previous delivery, and its section's bytes: the next one nearly
        # always has the same, which a comparison in place finds without copying the section.
        self.last: Record | None = None
        self.last_key = b""


SEEN_MAX = 256  # distinct sections remembered per link (then it starts afresh)


def _record(payload: Payload, span: tuple[int, int] | None, came_from: str, entering: bool) -> Record:
    """Read and check the router annotations (a malformed value raises DecodeError)."""
    to = ingress = flow_trace = None
    trace: Any = ()
    kept: list[bytes] = []
    if span is not None:
        data = head(payload, span)
        try:
            for kind, k, value_at, end in entries(data, span):
                if kind == OTHER:
                    kept.append(data[k:end])
                elif kind == KEY_TO:
                    to = read_string(data, value_at, end)
                elif kind == KEY_INGRESS:
                    ingress = read_string(data, value_at, end)
                elif kind == KEY_TRACE:
                    trace = read_strings(data, value_at, end, TRACE_MAX)
                elif kind == KEY_FLOW_TRACE:
                    flow_trace = read_string(data, value_at, end)
        except UnicodeDecodeError:
            raise DecodeError("a router annotation is not valid UTF-8") from None
    if to is not None and (type(to) is not str or not to):
        raise DecodeError(f"{TO} must be a non-empty string")
    if ingress is not None and (type(ingress) is not str or not ingress):
        raise DecodeError(f"{INGRESS} must be a non-empty string")
    if type(trace) is not list and type(trace) is not tuple or len(trace) > TRACE_MAX:
        raise DecodeError(f"{TRACE} must be a list of router ids")
    for item in trace:
        if type(item) is not str:
            raise DecodeError(f"{TRACE} must be a list of router ids")
    if not _valid_trace_id(flow_trace):
        flow_trace = None  # only analytics depend on it: the delivery is routed all the same
    if entering:
        return Record(to, None, (), kept, flow_trace)
    # A router always sets the ingress: without one, take the neighbour as the ingress.
    return Record(to, ingress if ingress is not None else came_from, tuple(trace), kept, flow_trace)


TRACE_ID_MAX: Final = 64  # a longer trace id (from a client or a router) is not taken


def _valid_trace_id(value: Any) -> bool:
    return type(value) is str and 0 < len(value) <= TRACE_ID_MAX and value.isprintable()


def client_trace(payload: Payload, view: RoutingView, new_id: Callable[[], str]) -> str | None:
    """The trace id a client asks for with the `x-opt-router-trace` message annotation (true:
    the router makes one; a string of up to 64 printable characters: that one), or None. Read
    only while flow records are on, and only from messages that carry annotations."""
    span = view.annotations_span
    if span is None:
        return None
    data = head(payload, span)
    try:
        for kind, k, value_at, end in entries(data, span):
            if kind == OTHER and data.startswith(K_CLIENT_TRACE, k) and value_at == k + len(K_CLIENT_TRACE):
                if data[value_at] == 0x41:  # true
                    return new_id()
                value = read_string(data, value_at, end)
                return value if _valid_trace_id(value) else None
    except (DecodeError, UnicodeDecodeError, ValueError):
        return None
    return None


def parse(payload: Payload, view: RoutingView, came_from: str, seen: Seen | None = None) -> Meta:
    """The metadata of a delivery that arrived from neighbour `came_from` (annotations trusted,
    but checked: a malformed value raises DecodeError and the delivery is rejected). With
    `seen`, a section already read on that link is not read again."""
    span = view.annotations_span
    if seen is None:
        record = _record(payload, span, came_from, False)
    else:
        last = seen.last
        # The section's bytes (a copy: the key of a new record), compared with the last one's:
        # cheaper compiled than `startswith(key, start)`, a method call by name that parses its
        # arguments.
        if span is None:
            key = b""
        elif isinstance(payload, bytes):  # (the slice native when compiled)
            key = payload[span[0] : span[1]]
        else:
            key = bytes(payload[span[0] : span[1]])
        if last is not None and span is not None and key == seen.last_key:
            record = last
        else:
            found = seen.records.get(key)
            if found is None:
                found = _record(payload, span, came_from, seen.entering)
                if len(seen.records) >= SEEN_MAX:
                    seen.records.clear()
                seen.records[key] = found
            record = seen.last = found
            seen.last_key = key
    to = record.to
    meta = Meta(to if to is not None else view.to, to is not None, record.ingress, record.trace, span,
                view.insert_at, True, came_from)  # fmt: skip
    meta.kept = record.kept
    meta.record = record
    meta.flow_trace = record.flow_trace
    return meta


def kept_from_client(payload: Payload, view: RoutingView, to: str | None, explicit_to: bool) -> Meta | None:
    """The metadata of a delivery from a router-aware client (its listener keeps annotations:
    strip_annotations out or no): its x-opt-qd.ingress and trace are taken as a router's, so
    they travel on with this router added; its x-opt-qd.to does not route (the link's address
    or properties.to does, as for any client). None when the section holds no router
    annotation, or a malformed one: the caller then strips them."""
    span = view.annotations_span
    assert span is not None
    try:
        record = _record(payload, span, "", False)
    except DecodeError:
        return None
    if not record.ingress and not record.trace and record.to is None:
        return None
    meta = Meta(to, explicit_to, record.ingress or None, record.trace, span, view.insert_at, True)
    meta.kept = record.kept
    return meta
