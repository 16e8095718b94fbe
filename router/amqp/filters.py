"""Source filters the router applies (messaging §3.5.8 filter-set; apache-filters.xml).

Owns: the descriptors of the filters it honours (legacy direct, topic and headers bindings, the
JMS selector, no-local), `parse_filter_set(filter_set)` (the filters in force, the filter-set to
echo in the attach reply: exactly those, keyed as received; FilterError for a known filter whose
value is malformed or too big), `ConsumerFilter.matches(fields)` and `topic_matches`.
A message passes a filter-set only if it passes each filter in it (messaging §3.5.8).
Messages are read through router.amqp.msgfields (lazily: only the sections a filter asks for).
Must not touch: links, routing decisions (router.core.filtering decides per consumer).
"""

from __future__ import annotations

from typing import Any, Final

from . import selector
from .msgfields import MessageFields
from .errors import EncodeError
from .types import Array, Described, Symbol, ULong, amqp_type_name

# Descriptors (apache-filters.xml): the symbol and the code (domain 0x0000468C).
DIRECT: Final = "apache.org:legacy-amqp-direct-binding:string"
TOPIC: Final = "apache.org:legacy-amqp-topic-binding:string"
HEADERS: Final = "apache.org:legacy-amqp-headers-binding:map"
NO_LOCAL: Final = "apache.org:no-local-filter:list"
SELECTOR: Final = "apache.org:selector-filter:string"
_CODES: Final = {0x0000468C_00000000: DIRECT, 0x0000468C_00000001: TOPIC, 0x0000468C_00000002: HEADERS,
                 0x0000468C_00000003: NO_LOCAL, 0x0000468C_00000004: SELECTOR}  # fmt: skip
_NAMES: Final = frozenset(_CODES.values())

# The connection capabilities of the open (apache-filters.xml), for what the router honours.
CAPABILITIES: Final[tuple[str, str, str]] = ("APACHE.ORG:LEGACY_AMQP_EXCHANGE_FILTERS", "APACHE.ORG:NO_LOCAL", "APACHE.ORG:SELECTOR")

MAX_FILTERS: Final = 8  # filters in one filter-set
MAX_HEADERS: Final = 64  # entries of one headers binding
MAX_TEXT: Final = selector.MAX_SELECTOR_CHARS  # a binding key or topic pattern, in characters


class FilterError(ValueError):
    """A filter the router knows, with a value it cannot accept: the attach is refused."""


def filter_kind(value: Any) -> str | None:
    """The descriptor name of a filter the router honours, None for any other value."""
    if not isinstance(value, Described):
        return None
    descriptor = value.descriptor
    if isinstance(descriptor, Symbol):
        return str(descriptor) if descriptor in _NAMES else None
    if type(descriptor) is ULong or (type(descriptor) is int and not isinstance(descriptor, bool)):
        return _CODES.get(int(descriptor))
    return None


def topic_segments(pattern: list[str]) -> list[list[str | None]]:
    """A topic pattern's words as selector.glob_match takes them: split at each `#` (any run
    of words), `*` (one word) as None."""
    segments: list[list[str | None]] = [[]]
    for word in pattern:
        if word == "#":
            segments.append([])
        else:
            segments[-1].append(None if word == "*" else word)
    return segments


def topic_matches(pattern: list[str], words: list[str]) -> bool:
    """`*` matches exactly one word, `#` zero or more: linear in the words for a given pattern
    (selector.glob_match), however many `#` and `*` a hostile pattern has."""
    return selector.glob_match(words, topic_segments(pattern))


def _simple(value: Any) -> bool:
    return not isinstance(value, (dict, list, tuple, Array))


def _same(value: Any, wanted: Any) -> bool:
    """Equal values of the same AMQP type (a long 3 is not a double 3.0)."""
    try:
        return bool(value == wanted) and amqp_type_name(value) == amqp_type_name(wanted)
    except EncodeError:
        return False


class ConsumerFilter:
    """The filters in force on one consumer link: all must pass."""

    __slots__ = ("subject_equals", "topic", "segments", "headers", "match_all", "selector", "no_local")

    def __init__(self) -> None:
        self.subject_equals: str | None = None
        self.topic: list[str] | None = None
        self.segments: list[list[str | None]] = []  # the topic pattern for glob_match
        self.headers: dict[str, Any] | None = None
        self.match_all = True
        self.selector: selector.Node | None = None
        self.no_local = False

    @property
    def reads_message(self) -> bool:
        return self.subject_equals is not None or self.topic is not None or self.headers is not None \
            or self.selector is not None  # fmt: skip

    def matches(self, fields: MessageFields) -> bool:
        """Whether the message passes (no-local is the caller's: it knows the connections).
        A message whose sections cannot be read (MessageFields.unreadable) passes no filter
        that reads it."""
        if fields.unreadable:
            return False
        passed = self._passes(fields)
        return passed and not fields.unreadable  # (a section decoded just now may be malformed)

    def _passes(self, fields: MessageFields) -> bool:
        if self.subject_equals is not None and fields.property("subject") != self.subject_equals:
            return False
        if self.topic is not None:
            subject = fields.property("subject")
            if not isinstance(subject, str):
                if self.topic != ["#"]:  # apache-filters.xml: no subject matches only "#"
                    return False
            elif not selector.glob_match(subject.split("."), self.segments):
                return False
        if self.headers is not None and not self._headers_match(fields.application_properties()):
            return False
        return self.selector is None or selector.matches(self.selector, fields.selector_value)

    def _headers_match(self, props: dict[Any, Any]) -> bool:
        headers = self.headers
        assert headers is not None
        if not headers:
            return self.match_all
        for key, wanted in headers.items():
            present = key in props
            # apache-filters.xml: same key, and the same value (and type), or a null in the filter
            hit = present and (wanted is None or _same(props[key], wanted))
            if hit and not self.match_all:
                return True
            if not hit and self.match_all:
                return False
        return self.match_all


def parse_filter_set(filter_set: Any) -> tuple[ConsumerFilter | None, dict[Any, Any] | None]:
    """(the filters in force or None, the filter-set to answer with or None).

    Unknown filters are left out of both (not applied, so not claimed); FilterError for a
    known filter that is malformed, repeated, or too big, or for too many filters."""
    if not isinstance(filter_set, dict) or not filter_set:
        return None, None
    if len(filter_set) > MAX_FILTERS:
        raise FilterError(f"filter-set has {len(filter_set)} filters, at most {MAX_FILTERS} are accepted")
    result = ConsumerFilter()
    echo: dict[Any, Any] = {}
    seen: set[str] = set()
    for key, value in filter_set.items():
        kind = filter_kind(value)
        if kind is None:
            continue
        if kind in seen:
            raise FilterError(f"filter {key!s}: a second {kind} filter")
        seen.add(kind)
        _apply(result, kind, value.value, str(key))
        echo[key] = value
    if not echo:
        return None, None
    return result, echo


def _apply(result: ConsumerFilter, kind: str, value: Any, key: str) -> None:
    if kind == NO_LOCAL:
        if value is not None and not isinstance(value, (list, tuple)):
            raise FilterError(f"filter {key}: {NO_LOCAL} needs a list")
        result.no_local = True
        return
    if kind == HEADERS:
        if not isinstance(value, dict):
            raise FilterError(f"filter {key}: {HEADERS} needs a map")
        if len(value) > MAX_HEADERS:
            raise FilterError(f"filter {key}: more than {MAX_HEADERS} headers")
        match = value.get("x-match", value.get(Symbol("x-match")))
        if match not in ("any", "all"):
            raise FilterError(f"filter {key}: x-match must be the symbol any or all")
        headers: dict[str, Any] = {}
        for name, wanted in value.items():
            if not isinstance(name, str):
                raise FilterError(f"filter {key}: header keys must be strings")
            if name.startswith("x-"):
                continue  # apache-filters.xml: other x- keys are ignored
            if not _simple(wanted):
                raise FilterError(f"filter {key}: header {name!r} must have a simple value")
            headers[str(name)] = wanted
        result.headers, result.match_all = headers, match == "all"
        return
    if not isinstance(value, str):
        raise FilterError(f"filter {key}: {kind} needs a string, got {type(value).__name__}")
    if kind == SELECTOR:
        try:
            result.selector = selector.parse(value)
        except selector.SelectorError as exc:
            raise FilterError(f"filter {key}: {exc}") from None
        return
    if len(value) > MAX_TEXT:
        raise FilterError(f"filter {key}: longer than {MAX_TEXT} characters")
    if kind == DIRECT:
        result.subject_equals = value
    else:
        result.topic = value.split(".")
        result.segments = topic_segments(result.topic)
