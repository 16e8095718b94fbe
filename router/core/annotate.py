"""Router annotations: what routers tell each other about a message, in its message-annotations
section (the anchors' `x-opt-qd.*` keys, reference §2.7).

Owns: reading the router annotations of a delivery that arrived from another router (`parse`),
writing them for the next router (`for_router`: `x-opt-qd.ingress` = the router where the
message entered the mesh, `x-opt-qd.trace` = the routers it passed, this one last,
`x-opt-qd.to` = the address it is routed by when that is not its `properties.to`), and removing
them (`strip`) from what clients send and from what consumers receive.
Only the message-annotations section is rewritten, and without the general codec: its entries
are located with `skip_value`, the client's own entries are copied as bytes, ours are written by
hand (the general decoder and encoder cost about 20 us per hop). The other sections are sliced
around it, so the bare message keeps its exact bytes (messaging §3.2) and the body is never
decoded.
Must not touch: routing decisions (forwarding.py, remote.py), links.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from ..amqp.decode import decode_at, skip_value
from ..amqp.errors import DecodeError
from ..amqp.message import section_descriptor
from ..amqp.peek import RoutingView
from .delivery import Meta, Payload

PREFIX = "x-opt-qd."
TO = "x-opt-qd.to"
INGRESS = "x-opt-qd.ingress"
TRACE = "x-opt-qd.trace"
TRACE_MAX = 1024  # a longer trace is malformed (the radius check drops far shorter ones)
_SECTION = b"\x00\x53\x72"  # described by smallulong 0x72: message-annotations (messaging §3.2.3)

Entry = tuple[int, int, int, int]  # (kind, key offset, value offset, end)
OTHER, KEY_TO, KEY_INGRESS, KEY_TRACE, KEY_ROUTER = 0, 1, 2, 3, 4  # kinds of entries
_KINDS = {TO.encode(): KEY_TO, INGRESS.encode(): KEY_INGRESS, TRACE.encode(): KEY_TRACE}
_PREFIX = PREFIX.encode()
_SHORT = frozenset((0xA0, 0xA1, 0xA3, 0xC0, 0xC1))  # one length byte follows the constructor
_LONG = frozenset((0xB0, 0xB1, 0xB3, 0xD0, 0xD1))  # four length bytes follow
_EMPTY = frozenset((0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x56))  # no bytes follow (null, true, ...)


def _sym(name: str) -> bytes:
    data = name.encode("ascii")
    return b"\xa3" + bytes((len(data),)) + data


_K_TO, _K_INGRESS, _K_TRACE = _sym(TO), _sym(INGRESS), _sym(TRACE)


def _skip(payload: Payload, pos: int, stop: int) -> int:
    """The end of the value at `pos`: common encodings inline, the rest by skip_value."""
    code = payload[pos]
    if code in _SHORT and pos + 2 <= stop:
        end = pos + 2 + payload[pos + 1]
    elif code in _LONG and pos + 5 <= stop:
        end = pos + 5 + int.from_bytes(payload[pos + 1 : pos + 5], "big")
    elif code in _EMPTY:
        end = pos + 1
    else:
        return skip_value(payload, pos, stop)
    if end > stop:
        raise DecodeError(f"truncated value at offset {pos}")
    return end


def _entries(data: bytes, span: tuple[int, int]) -> list[Entry]:
    """The entries of the message-annotations map in `span`, located without decoding them:
    router keys are recognised by their bytes, every value is only skipped (bounds-checked)."""
    start, stop = span
    _, pos = section_descriptor(data, start + 1, stop)
    if pos + 3 <= stop and data[pos] == 0xC1:
        count, pos = data[pos + 2], pos + 3
    elif pos + 9 <= stop and data[pos] == 0xD1:
        count, pos = int.from_bytes(data[pos + 5 : pos + 9], "big"), pos + 9
    else:
        raise DecodeError("message-annotations must be a map")
    if count % 2:
        raise DecodeError("message-annotations map has an odd number of items")
    entries: list[Entry] = []
    for _ in range(count // 2):
        if pos >= stop:
            raise DecodeError("message-annotations map is truncated")
        kind = OTHER
        if data[pos] == 0xA3:  # a symbol key (the usual one); ulong keys (§3.2.10) are kept as they are
            value_at = pos + 2 + data[pos + 1]
            if data.startswith(_PREFIX, pos + 2):
                kind = _KINDS.get(data[pos + 2 : value_at], KEY_ROUTER)
        else:
            value_at = _skip(data, pos, stop)
            if data[pos] == 0xB3 and data.startswith(_PREFIX, pos + 5):
                kind = _KINDS.get(data[pos + 5 : value_at], KEY_ROUTER)
        if value_at >= stop:
            raise DecodeError("message-annotations value is missing")
        end = _skip(data, value_at, stop)
        entries.append((kind, pos, value_at, end))
        pos = end
    if pos != stop:
        raise DecodeError("message-annotations map size does not match its items")
    return entries


def _head(payload: Payload, span: tuple[int, int]) -> bytes:
    """The bytes up to the end of the annotations (a large first frame may be a memoryview)."""
    return payload if type(payload) is bytes else bytes(payload[: span[1]])


def _kept_of(payload: Payload, meta: Meta) -> list[bytes]:
    kept = meta.kept
    if kept is None:
        kept = []
        if meta.span is not None:
            data = _head(payload, meta.span)
            kept = [data[k:end] for kind, k, _, end in _entries(data, meta.span) if kind == OTHER]
        meta.kept = kept
    return kept


def _string(payload: Payload, pos: int, end: int) -> Any:
    if payload[pos] == 0xA1 and end == pos + 2 + payload[pos + 1]:
        return bytes(payload[pos + 2 : end]).decode("utf-8")
    value, _ = decode_at(payload, pos, end)  # any other encoding: the general decoder
    return value


def _strings(payload: Payload, pos: int, end: int) -> Any:
    code = payload[pos]
    if code == 0x45:
        return []
    if code == 0xC0 or code == 0xD0:
        wide = code == 0xD0
        count = int.from_bytes(payload[pos + 5 : pos + 9], "big") if wide else payload[pos + 2]
        pos += 9 if wide else 3
        items = []
        for _ in range(min(count, TRACE_MAX + 1)):
            stop = _skip(payload, pos, end)
            items.append(_string(payload, pos, stop))
            pos = stop
        return items
    value, _ = decode_at(payload, pos, end)
    return value


@lru_cache(maxsize=4096)
def _w_string(text: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) < 256:
        return b"\xa1" + bytes((len(data),)) + data
    return b"\xb1" + len(data).to_bytes(4, "big") + data


@lru_cache(maxsize=4096)
def _w_strings(items: tuple[str, ...]) -> bytes:
    body = b"".join(_w_string(item) for item in items)
    if len(body) < 255 and len(items) < 256:
        return b"\xc0" + bytes((len(body) + 1, len(items))) + body
    return b"\xd0" + (len(body) + 4).to_bytes(4, "big") + len(items).to_bytes(4, "big") + body


def _section(pieces: list[bytes], pairs: int) -> bytes:
    body = b"".join(pieces)
    if len(body) < 255 and 2 * pairs < 256:
        return _SECTION + b"\xc1" + bytes((len(body) + 1, 2 * pairs)) + body
    return _SECTION + b"\xd1" + (len(body) + 4).to_bytes(4, "big") + (2 * pairs).to_bytes(4, "big") + body


class Record:
    """What one message-annotations section from another router says (parsed once per distinct
    section on a link: consecutive deliveries between two routers nearly always carry the same
    bytes), and the sections derived from it, built on first use."""

    __slots__ = ("to", "ingress", "trace", "kept", "routed", "stripped", "checked_under", "looped")

    def __init__(self, to: str | None, ingress: str | None, trace: tuple[str, ...], kept: list[bytes]) -> None:
        self.to = to  # x-opt-qd.to, or None: routed by properties.to
        self.ingress = ingress
        self.trace = trace
        self.kept = kept  # the entries that are not router annotations, as bytes
        self.routed: bytes | None = None  # the section for the next router (this one traced)
        self.stripped: bytes | None = None  # the section for a consumer (b"": none at all)
        # Whether the trace shows a loop (remote.looped), and under which routes that was found.
        self.checked_under: object = None
        self.looped = False


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
    to = ingress = None
    trace: Any = ()
    kept: list[bytes] = []
    if span is not None:
        data = _head(payload, span)
        try:
            for kind, k, value_at, end in _entries(data, span):
                if kind == OTHER:
                    kept.append(data[k:end])
                elif kind == KEY_TO:
                    to = _string(data, value_at, end)
                elif kind == KEY_INGRESS:
                    ingress = _string(data, value_at, end)
                elif kind == KEY_TRACE:
                    trace = _strings(data, value_at, end)
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
    if entering:
        return Record(to, None, (), kept)
    # A router always sets the ingress: without one, take the neighbour as the ingress.
    return Record(to, ingress if ingress is not None else came_from, tuple(trace), kept)


def parse(payload: Payload, view: RoutingView, came_from: str, seen: Seen | None = None) -> Meta:
    """The metadata of a delivery that arrived from neighbour `came_from` (annotations trusted,
    but checked: a malformed value raises DecodeError and the delivery is rejected). With
    `seen`, a section already read on that link is not read again."""
    span = view.annotations_span
    if seen is None:
        record = _record(payload, span, came_from, False)
    else:
        last = seen.last
        if (last is not None and span is not None and isinstance(payload, bytes)
                and span[1] - span[0] == len(seen.last_key) and payload.startswith(seen.last_key, span[0])):  # fmt: skip
            record = last
        else:
            key = b"" if span is None else bytes(payload[span[0] : span[1]])
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
    pieces.append(_K_INGRESS + _w_string(meta.ingress or me))
    pieces.append(_K_TRACE + _w_strings((*meta.trace, me)))
    if meta.explicit_to and meta.to is not None:
        pieces.append(_K_TO + _w_string(meta.to))
        pairs += 1
    return _section(pieces, pairs)


@lru_cache(maxsize=4096)
def _entering(me: str, to: str | None) -> bytes:
    """The section of a message that enters the mesh here with no annotations of its own."""
    return _routed([], Meta(to, to is not None, None, (), None, 0, False), me)


def for_router(payload: Payload, meta: Meta, me: str) -> bytes:
    """The first frame to send to the next router: the client's own annotations kept (their
    bytes copied), the router annotations set (this router appended to the trace)."""
    span = meta.span
    record = meta.record
    if record is not None:  # from another router: built once per distinct section
        section = record.routed
        if section is None:
            section = record.routed = _routed(record.kept, meta, me)
    elif span is None and meta.ingress is None and not meta.trace:
        section = _entering(me, meta.to if meta.explicit_to else None)
    else:
        section = _routed(_kept_of(payload, meta), meta, me)
    start, stop = span if span is not None else (meta.insert_at, meta.insert_at)
    return b"".join((payload[:start], section, payload[stop:]))


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
            middle = record.stripped = _section(kept, len(kept)) if kept else b""
    else:
        middle = _section(kept, len(kept)) if kept else b""
    meta.span = (start, start + len(middle)) if kept else None
    meta.insert_at = start
    return b"".join((payload[:start], middle, payload[stop:]))


def strip_client(payload: Payload, view: RoutingView) -> tuple[Payload, RoutingView]:
    """Remove `x-opt-qd.*` keys a client set (only routers may set router annotations), and the
    view adjusted to the result."""
    span = view.annotations_span
    assert span is not None
    data = _head(payload, span)
    entries = _entries(data, span)
    if all(kind == OTHER for kind, _, _, _ in entries):
        return payload, view
    meta = Meta(None, False, None, (), span, view.insert_at, True)
    meta.kept = [data[k:end] for kind, k, _, end in entries if kind == OTHER]
    result = strip(payload, meta)
    return result, view._replace(annotations_span=meta.span, insert_at=meta.insert_at)
