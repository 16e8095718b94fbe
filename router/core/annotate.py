"""Router annotations: what routers tell each other about a message, in its message-annotations
section (the anchors' `x-opt-qd.*` keys, reference §2.7).

Owns: the router's keys and their encoded forms, writing them for the next router
(`for_router`: `x-opt-qd.ingress` = the router where the message entered the mesh,
`x-opt-qd.trace` = the routers it passed, this one last, `x-opt-qd.to` = the address it is
routed by when that is not its `properties.to`, `x-opt-qd.flow-trace` = the trace id of its hop
records when flow records follow it), and removing them (`strip`) from what clients send and
from what consumers receive, unless the client's listener keeps them (strip_annotations: a
consumer that keeps them gets them as the next router would). Reading them (`parse`, the
per-link `Seen` and its `Record`s, a router-aware client's: `kept_from_client`) is
annotparse.py's; a Record from there keeps the sections built here from it, once per distinct
section.
Only the message-annotations section is rewritten, and without the general codec
(router/amqp/sections.py scans and writes it: this module gives only what the router's own keys
mean); the other sections are sliced around it, so the bare message keeps its exact bytes
(messaging §3.2) and the body is never decoded.
Must not touch: routing decisions (sending.py, multicast.py, remote.py), links.
"""

from __future__ import annotations

from typing import Final

from ..amqp.peek import RoutingView
from ..amqp.sections import (
    OTHER, Entry, annotation_entries, annotations_section, symbol_bytes, write_string, write_strings,
)  # fmt: skip
from ..amqp.sections import head as _head
from .delivery import Meta, Payload

__all__ = ["PREFIX", "TO", "INGRESS", "TRACE", "TRACE_MAX", "for_client_delivery", "for_router", "strip",
           "strip_client"]  # fmt: skip


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
