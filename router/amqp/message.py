"""The byte layout of an AMQP 1.0 message: its sections, in order (messaging §3.2).

Owns: `Message` (the client's view) with `encode_message` / `decode_message`: `scan_sections`
finds each section's byte span with the skipper of sections.py (which, with peek.py, is also
what the router reads and rewrites in a message without decoding it), and `MessageLayout`
decodes single sections on demand.
Must not touch: the sections' fields (messaging.py), the codec, framing and links.

Choices where peers and the spec differ:
- Messaging §3.2 asks for a body section, but Proton omits it when a message has no body: a
  missing body (even an empty payload) is accepted and `Message.body` is then None.
- Annotation maps (delivery-annotations, message-annotations, footer) must have symbol or ulong
  keys (messaging §3.2.10); plain `str` keys are written as symbols. Likewise plain `int`
  message-id and correlation-id are written as ulong, the only integer id (messaging §3.2.11).
- Each section's value must have its declared type (list, map, binary); a null is refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Final, NamedTuple, TypeVar, cast

from .decode import decode_at
from .encode import encode_value
from .errors import DecodeError, EncodeError
from .messaging import (
    AmqpSequence, AmqpValue, ApplicationProperties, Data, DeliveryAnnotations,
    Footer, Header, MessageAnnotations, Properties,
)  # fmt: skip
from .sections import section_descriptor, skip_value
from .types import Symbol, ULong

Span = tuple[int, int]
_S = TypeVar("_S")
Body = AmqpValue | Sequence[Data] | Sequence[AmqpSequence] | None  # messaging §3.2, the body

_VALUE: Final = AmqpValue.DESCRIPTOR_CODE
_BODY: Final = 5  # rank of the body sections; ranks give the order of messaging §3.2
_RANK: Final = {0x70: 0, 0x71: 1, 0x72: 2, 0x73: 3, 0x74: 4, 0x75: 5, 0x76: 5, 0x77: 5, 0x78: 6}
_NAMES: Final = ("header", "delivery-annotations", "message-annotations", "properties",
                 "application-properties", "body", "footer")  # fmt: skip
_LISTS, _MAPS = frozenset((0x45, 0xC0, 0xD0)), frozenset((0xC1, 0xD1))
# Constructors allowed for each section's value (types §1.6: list8/32, list0, map8/32, vbin8/32).
_VALUE_CODES: Final[dict[int, frozenset[int] | None]] = {
    0x70: _LISTS, 0x71: _MAPS, 0x72: _MAPS, 0x73: _LISTS, 0x74: _MAPS,
    0x75: frozenset((0xA0, 0xB0)), 0x76: _LISTS, 0x77: None, 0x78: _MAPS,
}  # fmt: skip


def _new(cls: type[_S], value: Any) -> _S:
    """`cls(value=value)` for a section class chosen at run time (a TypeVar hides __init__)."""
    return cls(**{"value": value})


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """A whole message. Map sections are plain dicts, None meaning the section is absent.

    `body` is one AmqpValue, or a sequence (kept as a tuple) of Data or of AmqpSequence sections.
    """

    header: Header | None = None
    delivery_annotations: dict[Any, Any] | None = None
    message_annotations: dict[Any, Any] | None = None
    properties: Properties | None = None
    application_properties: dict[Any, Any] | None = None
    body: Body = None
    footer: dict[Any, Any] | None = None

    def __post_init__(self) -> None:
        if (body := self.body) is None or isinstance(body, AmqpValue):
            return
        if not isinstance(body, Sequence) or not body:
            raise EncodeError("body must be an AmqpValue or a non-empty sequence of sections")
        kind = type(body[0])
        if kind not in (Data, AmqpSequence) or any(type(s) is not kind for s in body):
            raise EncodeError("body sections must be all Data or all AmqpSequence")
        object.__setattr__(self, "body", tuple(body))

    @classmethod
    def value(cls, value: Any, **sections: Any) -> Message:
        """A message whose body is one amqp-value section holding `value`."""
        return cls(body=AmqpValue(value=value), **sections)

    @classmethod
    def data(cls, *chunks: bytes, **sections: Any) -> Message:
        """A message whose body is one data section per chunk."""
        return cls(body=[Data(value=bytes(chunk)) for chunk in chunks], **sections)

    @classmethod
    def sequence(cls, *items: list[Any], **sections: Any) -> Message:
        """A message whose body is one amqp-sequence section per list."""
        return cls(body=[AmqpSequence(value=list(item)) for item in items], **sections)

    @property
    def body_value(self) -> Any:
        """The amqp-value body's value (None when there is no body)."""
        if self.body is None or isinstance(self.body, AmqpValue):
            return None if self.body is None else self.body.value
        raise TypeError("the body is not an amqp-value section")

    @property
    def body_bytes(self) -> bytes:
        """The data sections' bytes, concatenated."""
        if isinstance(self.body, Sequence) and isinstance(self.body[0], Data):
            return b"".join(section.value for section in self.body if isinstance(section, Data))
        raise TypeError("the body is not made of data sections")

    @property
    def body_sequence(self) -> list[Any]:
        """The amqp-sequence sections' items, concatenated."""
        if isinstance(self.body, Sequence) and isinstance(self.body[0], AmqpSequence):
            return [item for s in self.body if isinstance(s, AmqpSequence) for item in s.value]
        raise TypeError("the body is not made of amqp-sequence sections")


def _annotations(value: dict[Any, Any]) -> dict[Any, Any]:
    """Keys of an annotations map are symbols or ulongs (messaging §3.2.10): str -> symbol."""
    return {Symbol(k) if type(k) is str else k: v for k, v in value.items()}


def _map_section(cls: type[_S], value: dict[Any, Any] | None) -> _S | None:
    if value is None:
        return None
    return _new(cls, value if cls is ApplicationProperties else _annotations(value))


def _id(value: Any) -> Any:
    """A message-id is a ulong, uuid, binary or string (messaging §3.2.11-§3.2.14)."""
    return ULong(value) if type(value) is int else value


def encode_message(message: Message) -> bytes:
    """The message's sections in the order of messaging §3.2, absent ones omitted."""
    m, out, props = message, bytearray(), message.properties
    if props is not None and int in (type(props.message_id), type(props.correlation_id)):
        fix = {"message_id": _id(props.message_id), "correlation_id": _id(props.correlation_id)}
        props = dataclasses.replace(cast(Any, props), **fix)
    for section in (
        m.header,
        _map_section(DeliveryAnnotations, m.delivery_annotations),
        _map_section(MessageAnnotations, m.message_annotations),
        props,
        _map_section(ApplicationProperties, m.application_properties),
        *([m.body] if isinstance(m.body, AmqpValue) else m.body or ()),
        _map_section(Footer, m.footer),
    ):
        if section is not None:
            encode_value(out, section)
    return bytes(out)


def decode_message(payload: bytes) -> Message:
    """Decode every section; DecodeError on bad bytes or sections out of order (see scan)."""
    layout = scan_sections(payload)
    body: Body = None
    if layout.body_span is not None:
        pos, stop = layout.body_span
        sections = []
        while pos < stop:
            section, pos = decode_at(payload, pos, stop)
            sections.append(section)
        body = sections[0] if layout.body_code == _VALUE else sections
    return Message(
        header=layout.header(payload),
        delivery_annotations=_map(payload, layout.delivery_annotations_span),
        message_annotations=layout.message_annotations(payload),
        properties=layout.properties(payload),
        application_properties=_map(payload, layout.application_properties_span),
        body=body,
        footer=_map(payload, layout.footer_span),
    )


def _section(payload: bytes, span: Span | None) -> Any:
    if span is None:
        return None
    # scan_sections found the span with skip_value, which ends where decoding ends
    return decode_at(payload, span[0], span[1])[0]


def _map(payload: bytes, span: Span | None) -> dict[Any, Any] | None:
    section = _section(payload, span)
    return None if section is None else dict(section.value)


class MessageLayout(NamedTuple):
    """Byte spans (start, end) of the sections present, else None. The body span runs from the
    first body section to the end of the last; `body_code` is their descriptor code, 0 if none."""

    header_span: Span | None
    delivery_annotations_span: Span | None
    message_annotations_span: Span | None
    properties_span: Span | None
    application_properties_span: Span | None
    body_span: Span | None
    footer_span: Span | None
    body_code: int

    def header(self, payload: bytes) -> Header | None:
        return cast(Header | None, _section(payload, self.header_span))

    def message_annotations(self, payload: bytes) -> dict[Any, Any] | None:
        return _map(payload, self.message_annotations_span)

    def properties(self, payload: bytes) -> Properties | None:
        return cast(Properties | None, _section(payload, self.properties_span))


def scan_sections(payload: bytes) -> MessageLayout:
    """Find each section's span, checking the order of messaging §3.2 without decoding values.

    DecodeError for anything but described sections, unknown descriptors, sections out of order
    or repeated, a body mixing kinds or holding more than one amqp-value, and bad lengths.
    """
    if type(payload) is not bytes:  # the skipper reads bytes (compiled: typed); a client may hold a view
        payload = bytes(payload)
    spans: list[Span | None] = [None] * 7
    end, pos, last, body_code = len(payload), 0, -1, 0
    while pos < end:
        start = pos
        if payload[pos] != 0x00:
            raise DecodeError(f"expected a described section at offset {pos}")
        code, pos = section_descriptor(payload, pos + 1, end)
        rank = _RANK.get(code)
        if rank is None:
            raise DecodeError(f"descriptor {code:#x} at offset {start} is not a message section")
        if rank < last or rank == last and rank != _BODY:
            what = "repeated" if rank == last else f"after the {_NAMES[last]}"
            raise DecodeError(f"{_NAMES[rank]} section at offset {start} is {what}")
        if rank == _BODY and last == _BODY and (code != body_code or code == _VALUE):
            raise DecodeError(f"body section at offset {start} cannot follow a {body_code:#x}")
        allowed = _VALUE_CODES[code]
        if allowed is not None and (pos >= end or payload[pos] not in allowed):
            raise DecodeError(f"{_NAMES[rank]} section at offset {start} has a wrong value type")
        pos = skip_value(payload, pos, end)
        first = spans[rank]
        spans[rank] = (start if first is None else first[0], pos)
        if rank == _BODY:
            body_code = code
        last = rank
    return MessageLayout._make((*spans, body_code))
