"""The fields of a message a filter reads, read lazily and never from the body (messaging §3.2).

Owns: `MessageFields(payload)`: finds the spans of the header, message-annotations, properties
and application-properties sections with the one bounds-checked skipper (sections.py),
stopping at the first body section, and decodes a section only when a filter first asks for
one of its fields; `selector_value(name)`, the JMS selector's identifiers (apache-filters.xml:
the JMS header names and their `amqp.` forms, the rest application-properties) with the type
mapping the filter spec gives.
A message whose sections cannot be read up to the body (malformed, or a streamed first frame
cut inside them) is `unreadable`: filters that read it do not match.
Must not touch: the body, routing.
"""

from __future__ import annotations

from typing import Any, Final

from .decode import decode_at
from .decode_scalars import Buffer
from .errors import DecodeError
from .messaging import ApplicationProperties, Header, MessageAnnotations, Properties
from .sections import section_spans
from .types import Char, Decimal32, Decimal64, Decimal128, Symbol

_HEADER, _ANNOTATIONS, _PROPERTIES, _APPLICATION = 0x70, 0x72, 0x73, 0x74
_WANTED: Final = (_HEADER, _ANNOTATIONS, _PROPERTIES, _APPLICATION)
_NO_PROPERTIES: Final = Properties()
_NO_HEADER: Final = Header()
_JMS_TYPE_KEYS: Final = (Symbol("x-opt-jms-type"), Symbol("jms-type"))

# Selector identifiers for properties fields: JMS header names (apache-filters.xml's table) and
# the `amqp.` forms of every properties field (the field name, hyphen as underscore).
_PROPERTY_NAMES: Final = {
    "JMSMessageID": "message_id", "JMSCorrelationID": "correlation_id", "JMSDestination": "to",
    "JMSReplyTo": "reply_to", "JMSExpiration": "absolute_expiry_time", "JMSTimestamp": "creation_time",
    **{f"amqp.{name}": name for name in (
        "message_id", "user_id", "to", "subject", "reply_to", "correlation_id", "content_type",
        "content_encoding", "absolute_expiry_time", "creation_time", "group_id", "group_sequence",
        "reply_to_group_id")},
}  # fmt: skip
_HEADER_NAMES: Final = {f"amqp.{name}": name for name in ("durable", "priority", "ttl", "first_acquirer", "delivery_count")}
_HEADER_DEFAULTS: Final = {"durable": False, "priority": 4, "first_acquirer": False, "delivery_count": 0}


def selector_type(value: Any) -> Any:
    """An AMQP value as the selector sees it (apache-filters.xml's type mapping): numbers stay
    numbers, char and symbol become strings; decimals have no exact value here: unknown."""
    if isinstance(value, (Decimal32, Decimal64, Decimal128)):
        return None
    if isinstance(value, (Char, Symbol)):
        return str(value)
    return value


class MessageFields:
    """See the module docstring. Built only for a delivery some consumer's filter reads."""

    __slots__ = ("payload", "spans", "unreadable", "_decoded")

    def __init__(self, payload: Buffer) -> None:
        """`payload`: the first frame's bytes, or a view of them: then only the sections before
        the body are copied (a view may pin a whole read, and the body is never needed)."""
        self.spans: dict[int, tuple[int, int]] = {}
        self.unreadable = False
        self._decoded: dict[int, Any] = {}
        data = payload if type(payload) is bytes else bytes(payload)  # the skipper reads bytes
        pos = 0
        try:  # up to the body (or footer): never read
            spans, pos = section_spans(data, _APPLICATION)
            for code, start, stop in spans:
                if code in _WANTED:
                    self.spans[code] = (start, stop)
        except DecodeError:
            self.unreadable = True
        self.payload: bytes = data if data is payload else data[:pos]

    def _section(self, code: int) -> Any:
        if code in self._decoded:
            return self._decoded[code]
        span = self.spans.get(code)
        value = None
        if span is not None:
            try:
                value = decode_at(self.payload, span[0], span[1])[0]
            except (DecodeError, IndexError):
                self.unreadable = True
        self._decoded[code] = value
        return value

    def property(self, name: str) -> Any:
        """A field of the properties section (messaging §3.2.4), None when absent."""
        section = self._section(_PROPERTIES)
        return getattr(section if isinstance(section, Properties) else _NO_PROPERTIES, name)

    def header(self, name: str) -> Any:
        """A field of the header (messaging §3.2.1), with the spec's default when absent."""
        section = self._section(_HEADER)
        value = getattr(section if isinstance(section, Header) else _NO_HEADER, name)
        return _HEADER_DEFAULTS.get(name) if value is None else value

    def application_properties(self) -> dict[Any, Any]:
        section = self._section(_APPLICATION)
        return section.value if isinstance(section, ApplicationProperties) else {}

    def annotation(self, keys: tuple[Symbol, ...]) -> Any:
        section = self._section(_ANNOTATIONS)
        if not isinstance(section, MessageAnnotations):
            return None
        for key in keys:
            if key in section.value:
                return section.value[key]
        return None

    def selector_value(self, name: str) -> Any:
        """The value of a selector identifier, None when the message has none."""
        field = _PROPERTY_NAMES.get(name)
        if field is not None:
            return selector_type(self.property(field))
        field = _HEADER_NAMES.get(name)
        if field is not None:
            return self.header(field)
        if name == "JMSPriority":
            return self.header("priority")
        if name == "JMSDeliveryMode":
            return "PERSISTENT" if self.header("durable") else "NON_PERSISTENT"
        if name == "JMSRedelivered":
            return self.header("delivery_count") > 0
        if name in ("JMSType", "amqp.jms_type"):
            return selector_type(self.annotation(_JMS_TYPE_KEYS))
        props = self.application_properties()
        value = props.get(name)
        if value is None or isinstance(value, (dict, list)):
            return None
        return selector_type(value)
