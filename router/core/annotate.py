"""Router annotations: what routers tell each other about a message, in its message-annotations
section (the anchors' `x-opt-qd.*` keys, reference §2.7).

Owns: reading the router annotations of a delivery that arrived from another router (`parse`),
writing them for the next router (`for_router`: `x-opt-qd.ingress` = the router where the
message entered the mesh, `x-opt-qd.trace` = the routers it passed, this one last,
`x-opt-qd.to` = the address it is routed by when that is not its `properties.to`), and removing
them (`strip`) from what clients send and from what consumers receive.
Only the message-annotations section is decoded and re-encoded: the other sections are sliced
around it, so the bare message keeps its exact bytes (messaging §3.2) and the body is never
decoded.
Must not touch: routing decisions (forwarding.py, remote.py), links.
"""

from __future__ import annotations

from typing import Any

from ..amqp.decode import decode_at
from ..amqp.encode import encode
from ..amqp.errors import DecodeError
from ..amqp.messaging import MessageAnnotations
from ..amqp.peek import RoutingView
from ..amqp.types import Symbol
from .delivery import Meta, Payload

PREFIX = "x-opt-qd."
TO = Symbol("x-opt-qd.to")
INGRESS = Symbol("x-opt-qd.ingress")
TRACE = Symbol("x-opt-qd.trace")
TRACE_MAX = 1024  # a longer trace is malformed (the radius check drops far shorter ones)


def _annotations(payload: Payload, span: tuple[int, int] | None) -> dict[Any, Any]:
    if span is None:
        return {}
    section, _ = decode_at(payload, span[0], span[1])
    if not isinstance(section, MessageAnnotations) or not isinstance(section.value, dict):
        raise DecodeError("malformed message-annotations section")
    return section.value


def parse(payload: Payload, view: RoutingView, came_from: str) -> Meta:
    """The metadata of a delivery that arrived from neighbour `came_from` (annotations trusted,
    but checked: a malformed value raises DecodeError and the delivery is rejected)."""
    values = _annotations(payload, view.annotations_span)
    to = values.get(TO)
    ingress = values.get(INGRESS)
    trace = values.get(TRACE, ())
    if to is not None and (not isinstance(to, str) or not to):
        raise DecodeError(f"{TO} must be a non-empty string")
    if ingress is not None and (not isinstance(ingress, str) or not ingress):
        raise DecodeError(f"{INGRESS} must be a non-empty string")
    if not isinstance(trace, (list, tuple)) or len(trace) > TRACE_MAX or not all(isinstance(r, str) for r in trace):
        raise DecodeError(f"{TRACE} must be a list of router ids")
    explicit = to is not None
    if to is None:
        to = view.to
    if ingress is None:  # a router always sets it: take the neighbour as the ingress
        ingress = came_from
    return Meta(to, explicit, ingress, tuple(trace), view.annotations_span, view.insert_at, True, came_from)


def for_client_delivery(view: RoutingView | None, to: str | None, explicit_to: bool) -> Meta:
    """The metadata of a delivery that entered the mesh here (its annotations hold no router
    keys: they were stripped on ingress)."""
    if view is None:
        return Meta(to, explicit_to, None, (), None, 0, False)
    return Meta(to, explicit_to, None, (), view.annotations_span, view.insert_at, False)


def _splice(payload: Payload, meta: Meta, values: dict[Any, Any]) -> bytes:
    start, stop = meta.span if meta.span is not None else (meta.insert_at, meta.insert_at)
    middle = encode(MessageAnnotations(value=values)) if values else b""
    return b"".join((payload[:start], middle, payload[stop:]))


def for_router(payload: Payload, meta: Meta, me: str) -> bytes:
    """The first frame to send to the next router: the client's own annotations kept, the
    router annotations set (this router appended to the trace)."""
    values = {k: v for k, v in _annotations(payload, meta.span).items() if not str(k).startswith(PREFIX)}
    values[INGRESS] = meta.ingress or me
    values[TRACE] = [*meta.trace, me]
    if meta.explicit_to and meta.to is not None:
        values[TO] = meta.to
    return _splice(payload, meta, values)


def strip(payload: Payload, meta: Meta) -> Payload:
    """The first frame without router annotations (for a consumer); `meta` then describes it."""
    meta.raw = False
    span = meta.span
    if span is None:
        return payload
    values = _annotations(payload, span)
    kept = {k: v for k, v in values.items() if not str(k).startswith(PREFIX)}
    if len(kept) == len(values):
        return payload
    start, stop = span
    middle = encode(MessageAnnotations(value=kept)) if kept else b""
    meta.span = (start, start + len(middle)) if kept else None
    meta.insert_at = start
    return b"".join((payload[:start], middle, payload[stop:]))


def strip_client(payload: Payload, view: RoutingView) -> tuple[Payload, RoutingView]:
    """Remove `x-opt-qd.*` keys a client set (only routers may set router annotations), and the
    view adjusted to the result."""
    span = view.annotations_span
    assert span is not None
    meta = Meta(None, False, None, (), span, view.insert_at, True)
    result = strip(payload, meta)
    if result is payload:
        return payload, view
    return result, view._replace(annotations_span=meta.span, insert_at=meta.insert_at)
