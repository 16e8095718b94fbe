"""Router annotations: what routers tell each other about a message, in its message-annotations
section (the anchors' `x-opt-qd.*` keys, reference §2.7).

Owns: reading the router annotations of a delivery that arrived from another router (`parse`),
writing them for the next router (`for_router`: `x-opt-qd.ingress` = the router where the
message entered the mesh, `x-opt-qd.trace` = the routers it passed, this one last,
`x-opt-qd.to` = the address it is routed by when that is not its `properties.to`,
`x-opt-qd.flow-trace` = the trace id of its hop records when flow records follow it), and removing
them (`strip`) from what clients send and from what consumers receive, unless the client's
listener keeps them (strip_annotations: `kept_from_client` takes a router-aware client's
ingress and trace as a router's; a consumer that keeps them gets them as the next router would).
Only the message-annotations section is rewritten, and without the general codec
(router/amqp/sections.py scans and writes it: this module gives only what the router's own keys
mean); the other sections are sliced around it, so the bare message keeps its exact bytes
(messaging §3.2) and the body is never decoded.
Between two routers consecutive deliveries nearly always carry the same section: each
inter-router link remembers what the sections it saw said (`Seen`, a `Record` per distinct
section), so a section is read, and the next router's and the consumer's sections are built,
once per link and kind of delivery rather than once per delivery.
Must not touch: routing decisions (sending.py, multicast.py, remote.py), links.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ..amqp.errors import DecodeError
from ..amqp.peek import RoutingView
from ..amqp.sections import (
    OTHER, Entry, annotation_entries, annotations_section, read_string, read_strings, symbol_bytes, write_string,
    write_strings,
)  # fmt: skip
from ..amqp.sections import head as _head
from .delivery import Meta, Payload

if TYPE_CHECKING:
    from .paths import Remembered

__all__ = ["PREFIX", "TO", "INGRESS", "TRACE", "TRACE_MAX", "Record", "Seen", "SEEN_MAX", "parse",
           "for_client_delivery", "for_router", "client_trace", "kept_from_client", "strip", "strip_client"]  # fmt: skip


# The router's own keys (the anchors' names, reference §2.7), and the kinds they sort into.
PREFIX = "x-opt-qd."
TO = "x-opt-qd.to"
INGRESS = "x-opt-qd.ingress"
TRACE = "x-opt-qd.trace"
FLOW_TRACE = "x-opt-qd.flow-trace"  # the trace id of a delivery's hop records (docs/flow-records.md)
CLIENT_TRACE = "x-opt-router-trace"  # a client's flag: hop records for this message (not a router key)
TRACE_MAX = 1024  # a longer trace is malformed (the radius check drops far shorter ones)
# Kinds of entries (sections.OTHER: any other key). Final: constants in the compiled build.
KEY_TO: Final = 1
KEY_INGRESS: Final = 2
KEY_TRACE: Final = 3
KEY_ROUTER: Final = 4
KEY_FLOW_TRACE: Final = 5
_KINDS: Final = {TO.encode(): KEY_TO, INGRESS.encode(): KEY_INGRESS, TRACE.encode(): KEY_TRACE,
                 FLOW_TRACE.encode(): KEY_FLOW_TRACE}  # fmt: skip
_PREFIX_BYTES: Final = PREFIX.encode()
# Their encoded forms (Final: C statics in the compiled build, not a dict lookup per use).
K_TO: Final = symbol_bytes(TO)
K_INGRESS: Final = symbol_bytes(INGRESS)
K_TRACE: Final = symbol_bytes(TRACE)
K_FLOW_TRACE: Final = symbol_bytes(FLOW_TRACE)
K_CLIENT_TRACE: Final = symbol_bytes(CLIENT_TRACE)


def entries(data: bytes, span: tuple[int, int]) -> list[Entry]:
    """The entries of the message-annotations section at `span`, router keys sorted by kind."""
    return annotation_entries(data, span, _PREFIX_BYTES, _KINDS, KEY_ROUTER)


def head(payload: Payload, span: tuple[int, int]) -> bytes:
    """The first frame's bytes up to the end of its annotations (it may be a memoryview)."""
    return _head(payload, span[1])


def _kept_of(payload: Payload, meta: Meta) -> list[bytes]:
    kept = meta.kept
    if kept is None:
        kept = []
        if meta.span is not None:
            data = head(payload, meta.span)
            kept = [data[k:end] for kind, k, _, end in entries(data, meta.span) if kind == OTHER]
        meta.kept = kept
    return kept


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


TRACE_ID_MAX = 64


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


def for_client_delivery(view: RoutingView | None, to: str | None, explicit_to: bool) -> Meta:
    """The metadata of a delivery that entered the mesh here (its annotations hold no router
    keys: they were stripped on ingress)."""
    if view is None:
        return Meta(to, explicit_to, None, (), None, 0, False)
    return Meta(to, explicit_to, None, (), view.annotations_span, view.insert_at, False)


def _routed(kept: list[bytes], meta: Meta, me: str) -> bytes:
    """The message-annotations section for the next router."""
    pieces: list[bytes] = list(kept)
    pairs = len(pieces) + 2
    pieces.append(K_INGRESS + write_string(meta.ingress or me))
    pieces.append(K_TRACE + write_strings((*meta.trace, me)))
    if meta.explicit_to and meta.to is not None:
        pieces.append(K_TO + write_string(meta.to))
        pairs += 1
    if meta.flow_trace is not None:
        pieces.append(K_FLOW_TRACE + write_string(meta.flow_trace))
        pairs += 1
    return annotations_section(pieces, pairs)


# The sections of messages entering the mesh with no annotations of their own, by router and
# x-opt-qd.to (None: routed by properties.to): plain dicts, read natively when compiled, where
# an lru_cache was a call through the interpreter with a tuple of its arguments (~900
# instructions per delivery entering a mesh).
_ENTERING: Final[dict[str, dict[str | None, bytes]]] = {}
ENTERING_MAX: Final = 4096  # sections remembered per router (then it starts afresh)


def _entering(me: str, to: str | None) -> bytes:
    """The section of a message that enters the mesh here with no annotations of its own."""
    known = _ENTERING.get(me)
    if known is None:
        known = _ENTERING[me] = {}
    section = known.get(to)
    if section is None:
        if len(known) >= ENTERING_MAX:
            known.clear()
        section = known[to] = _routed([], Meta(to, to is not None, None, (), None, 0, False), me)
    return section


def _splice(payload: Payload, start: int, stop: int, middle: bytes) -> bytes:
    """The first frame with the bytes between `start` and `stop` replaced by `middle`. Most
    messages have no header, so their annotations come first: one concatenation then, where a
    join builds a tuple of three pieces. A first frame of bytes (not a view of a large read) is
    sliced and concatenated natively when compiled; a `Payload` generically (a slice object,
    `PyObject_GetItem`, `PyNumber_Add`)."""
    if isinstance(payload, bytes):
        if start == 0:
            return middle + payload[stop:]
        return b"".join((payload[:start], middle, payload[stop:]))
    if start == 0:
        return middle + payload[stop:]
    return b"".join((payload[:start], middle, payload[stop:]))


def for_router(payload: Payload, meta: Meta, me: str) -> bytes:
    """The first frame to send to the next router: the client's own annotations kept (their
    bytes copied), the router annotations set (this router appended to the trace)."""
    span = meta.span
    record = meta.record
    if record is not None and record.flow_trace == meta.flow_trace:  # built once per distinct section
        section = record.routed
        if section is None:
            section = record.routed = _routed(record.kept, meta, me)
    elif record is not None:  # traced here first: its own section
        section = _routed(record.kept, meta, me)
    elif span is None and meta.ingress is None and not meta.trace and meta.flow_trace is None:
        section = _entering(me, meta.to if meta.explicit_to else None)
    else:
        section = _routed(_kept_of(payload, meta), meta, me)
    start, stop = span if span is not None else (meta.insert_at, meta.insert_at)
    return _splice(payload, start, stop, section)


def strip(payload: Payload, meta: Meta) -> Payload:
    """The first frame without router annotations (for a consumer); `meta` then describes it."""
    span = meta.span
    if span is None or not meta.raw:
        meta.raw = False
        return payload
    meta.raw = False
    kept = _kept_of(payload, meta)
    start, stop = span
    record = meta.record
    if record is not None:  # from another router: built once per distinct section
        middle = record.stripped
        if middle is None:
            middle = record.stripped = annotations_section(kept, len(kept)) if kept else b""
    else:
        middle = annotations_section(kept, len(kept)) if kept else b""
    meta.span = (start, start + len(middle)) if kept else None
    meta.insert_at = start
    return _splice(payload, start, stop, middle)


def strip_client(payload: Payload, view: RoutingView) -> tuple[Payload, RoutingView]:
    """Remove `x-opt-qd.*` keys a client set (only routers may set router annotations), and the
    view adjusted to the result."""
    span = view.annotations_span
    assert span is not None
    data = head(payload, span)
    found = entries(data, span)
    if all(kind == OTHER for kind, _, _, _ in found):
        return payload, view
    meta = Meta(None, False, None, (), span, view.insert_at, True)
    meta.kept = [data[k:end] for kind, k, _, end in found if kind == OTHER]
    result = strip(payload, meta)
    return result, view.with_annotations(meta.span, meta.insert_at)
