"""What a router needs from a message, read as shallowly as possible (messaging §3.2).

Owns: `peek(payload)`, which walks the sections from the start and stops at the first section
after the properties: application-properties, the body and the footer are never read. It
returns the header's ttl and priority, the message-annotations span (for rewriting), and from the
properties only `to` and `absolute-expiry-time`, skipping the other fields without decoding them
(with sections.py's skipper, the bounds rule's one home; what is read and rewritten in the
annotations is sections.py's too).
Must not touch: the body, anything about routing decisions.
"""

from __future__ import annotations

from typing import Any, Final

from mypy_extensions import i64, mypyc_attr

from .decode import decode_at
from .decode_scalars import Buffer
from .errors import DecodeError
from .fastparse import u32
from .messaging import Header
from .sections import section_descriptor, skip_value

_HEADER: Final = 0x70
_DELIVERY_ANNOTATIONS: Final = 0x71
_MESSAGE_ANNOTATIONS: Final = 0x72
_PROPERTIES: Final = 0x73


@mypyc_attr(acyclic=True)  # holds ints, a str and a tuple: untracked by the cyclic collector
class RoutingView:
    """What routing reads from a message: the header's ttl and priority, the message-annotations section's
    span (for rewriting), `to` and the absolute expiry time from the properties, and where a
    message-annotations section would go if there is none. (A plain class: mypyc builds it
    natively, where a NamedTuple's constructor is a Python call.)"""

    __slots__ = ("ttl_ms", "annotations_span", "to", "absolute_expiry_ms", "insert_at", "priority")

    def __init__(
        self,
        ttl_ms: int | None,
        annotations_span: tuple[int, int] | None,
        to: str | None,
        absolute_expiry_ms: int | None,
        insert_at: int,
        priority: int | None = None,
    ) -> None:
        self.ttl_ms = ttl_ms
        self.annotations_span = annotations_span  # the whole message-annotations section
        self.to = to
        self.absolute_expiry_ms = absolute_expiry_ms
        self.insert_at = insert_at  # where a message-annotations section would go if there is none
        self.priority = priority  # the header's (messaging 3.2.1: a ubyte), None without one

    def with_annotations(self, span: tuple[int, int] | None, insert_at: int) -> RoutingView:
        """This view of a message whose annotations section was rewritten."""
        return RoutingView(self.ttl_ms, span, self.to, self.absolute_expiry_ms, insert_at, self.priority)

    def with_ttl(self, ttl_ms: int, moved_from: int, shift: int) -> RoutingView:
        """This view of a message whose header's ttl was rewritten to `ttl_ms`, the bytes from
        offset `moved_from` on now `shift` further (a header encoded anew may change length:
        sections.with_ttl)."""
        span, insert_at = shifted(self.annotations_span, self.insert_at, moved_from, shift)
        return RoutingView(ttl_ms, span, self.to, self.absolute_expiry_ms, insert_at, self.priority)

    def __repr__(self) -> str:
        return (f"RoutingView(ttl_ms={self.ttl_ms}, annotations_span={self.annotations_span}, "
                f"to={self.to!r}, absolute_expiry_ms={self.absolute_expiry_ms}, "
                f"insert_at={self.insert_at}, "
                f"priority={self.priority})")  # fmt: skip


def shifted(
    span: tuple[int, int] | None, insert_at: int, moved_from: int, shift: int
) -> tuple[tuple[int, int] | None, int]:
    """An annotations span and insertion offset into a message whose bytes from `moved_from`
    on moved `shift` further (the view's, and the router annotations' Meta keeps the same two)."""
    if shift and span is not None and span[0] >= moved_from:
        span = (span[0] + shift, span[1] + shift)
    if shift and insert_at >= moved_from:
        insert_at += shift
    return span, insert_at


def _list_items(payload: bytes, pos: i64, stop: i64) -> tuple[i64, i64]:
    """(item count, offset of the first item) of the list at `pos`."""
    if pos >= stop:
        raise DecodeError("message cut short before the end of its properties")
    code: i64 = payload[pos]
    if code == 0x45:
        return 0, pos + 1
    if code == 0xC0 and pos + 3 <= stop:
        return payload[pos + 2], pos + 3
    if code == 0xD0 and pos + 9 <= stop:
        return u32(payload, pos + 5), pos + 9
    raise DecodeError("section value must be a list")


def _properties(payload: bytes, pos: i64, stop: i64, need_to: bool) -> tuple[Any, Any]:
    """(to, absolute-expiry-time) from the properties list at `pos`.

    Fields are skipped without decoding, and the walk stops as soon as the list has nothing
    more we need: most messages never reach field 8. (creation-time, field 9, is not read: a
    ttl counts from the message's arrival, messaging §3.2.1.)
    """
    count, pos = _list_items(payload, pos, stop)
    # Any, not `str | None`: compiled, a non-string `to` would raise TypeError where the check
    # below raises DecodeError (a client's bad message must be refused, not crash the core).
    to: Any = None
    expiry: Any = None
    last: i64 = 3 if count <= 8 else 9  # fields read: up to `to`, or up to absolute-expiry-time
    index: i64 = -1
    while True:
        index += 1
        if index >= count or index >= last:
            break
        if index == 2 and pos + 2 <= stop and payload[pos] == 0xA1:
            # str8, the usual encoding of `to`: read inline, or passed when not needed (anything
            # odd goes to decode_at or the skipper, which raise the errors they always raised)
            value_end: i64 = pos + 2 + payload[pos + 1]
            if value_end <= stop:
                if not need_to:
                    pos = value_end
                    continue
                try:
                    to = payload[pos + 2 : value_end].decode("utf-8")
                    pos = value_end
                    continue
                except UnicodeDecodeError:
                    pass
        if (index == 2 and need_to) or index >= 8:
            value, pos = decode_at(payload, pos, stop)
            if index == 2:
                to = value
            else:
                expiry = value
            continue
        if pos < stop and payload[pos] == 0x40:  # null, the usual message-id and user-id: no call
            pos += 1
        else:
            pos = skip_value(payload, pos, stop)
    if pos > stop:
        raise DecodeError("properties section is truncated")
    if to is not None and not isinstance(to, str):
        raise DecodeError(f"properties.to must be a string, got {type(to).__name__}")
    if expiry is not None and not _timestamp(expiry):
        raise DecodeError("properties absolute-expiry-time must be a timestamp")
    return to, expiry


def _timestamp(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_MAPS: Final = (0xC1, 0xD1)  # map8, map32


def peek(payload: Buffer, need_to: bool = True) -> RoutingView:
    """The routing view of an encoded message (at least its first transfer frame's bytes).

    Raises DecodeError when the sections it reads are malformed or cut short before the end of
    the properties (a first frame of a streamed message may end anywhere: the router needs at
    least the properties in it); a message cut short after the properties is fine.
    """
    data = payload if type(payload) is bytes else bytes(payload)
    return peek_at(data, 0, len(data), need_to)


def peek_at(source: bytes, start: i64, end: i64, need_to: bool = True) -> RoutingView:
    """peek() of the payload that is source[start:end]: a large payload is read where it
    arrived (TransferReceived.source), not through a copy. Nothing at or past `end` is read;
    the view's offsets are the payload's own."""
    try:
        return _peek(source, start, end, need_to)
    except IndexError:  # (every read is bounded by `end`; this is the last line of defence)
        raise DecodeError("message cut short before the end of its properties") from None


# The view of a message with nothing routing reads (no header, annotations, `to` asked for or
# times: a bare body, or properties without them), shared: views are never changed after
# they are made (with_annotations makes a new one), and a view per message cost its allocation
# and its freeing (~300 instructions in bench/instructions.py's relay).
_PLAIN: Final = RoutingView(None, None, None, None, 0, None)


def _view(
    ttl: int | None, annotations: tuple[int, int] | None, to: Any, expiry: Any,
    insert_at: i64, priority: int | None,
) -> RoutingView:  # fmt: skip
    if (
        insert_at == 0 and ttl is None and annotations is None and to is None and expiry is None
        and priority is None
    ):  # fmt: skip
        return _PLAIN
    return RoutingView(ttl, annotations, to, expiry, insert_at, priority)


def _peek(payload: bytes, base: i64, end: i64, need_to: bool) -> RoutingView:
    """The walk of peek_at over payload[base:end]; offsets returned are relative to `base`."""
    ttl = to = expiry = priority = None
    annotations: tuple[int, int] | None = None
    pos: i64 = base
    insert_at: i64 = 0
    code: i64
    value_pos: i64
    while pos < end:
        if payload[pos] != 0x00:
            raise DecodeError(f"expected a message section at offset {pos - base}")
        start = pos
        if pos + 3 <= end and payload[pos + 1] == 0x53:  # smallulong, as section_descriptor reads it
            code, value_pos = payload[pos + 2], pos + 3
        else:
            code, value_pos = section_descriptor(payload, pos + 1, end)
        if code > _PROPERTIES:
            return _view(ttl, annotations, to, expiry, insert_at, priority)
        if code == _PROPERTIES:  # the last section we read: no need to find its end first
            to, expiry = _properties(payload, value_pos, end, need_to)
            return _view(ttl, annotations, to, expiry, insert_at, priority)
        if code == _MESSAGE_ANNOTATIONS or code == _DELIVERY_ANNOTATIONS:
            if value_pos >= end:
                raise DecodeError("message cut short before the end of its properties")
            if payload[value_pos] not in _MAPS:
                # annotations are maps (messaging §3.2.2-§3.2.3): the router reads and rewrites
                # message annotations, so any other value is refused here, not deep in the core
                raise DecodeError(f"section {code:#04x} must be a map")
        stop = skip_value(payload, value_pos, end)
        if code == _HEADER:
            header, _ = decode_at(payload, start, stop)
            if type(header) is not Header:
                raise DecodeError("malformed header section")
            ttl = header.ttl
            priority = header.priority
            if annotations is None:
                insert_at = stop - base
        elif code == _DELIVERY_ANNOTATIONS:
            if annotations is None:
                insert_at = stop - base
        elif code == _MESSAGE_ANNOTATIONS:
            annotations = (start - base, stop - base)
            insert_at = start - base  # (with annotations, insert_at is where they start)
        else:
            raise DecodeError(f"unknown message section {code:#04x}")
        pos = stop
    return _view(ttl, annotations, to, expiry, insert_at, priority)
