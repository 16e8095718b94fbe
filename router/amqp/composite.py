"""Described composite and restricted types (types §1.4-§1.5) as frozen dataclasses.

Owns: the `composite` and `restricted` class decorators. A composite declares its descriptor
(numeric code and symbolic name) and the AMQP kind of each field, in field order; the decorator
registers an encoder (a described list, fields equal to their default written as null and trailing
nulls trimmed) and a decoder that validates every field and fills defaults.

Field kinds: "string", "symbol", "binary", "boolean", "ubyte", "ushort", "uint", "ulong",
"timestamp", "fields" (map with symbol keys), "map", "list", "filter-set" (messaging §3.5.8),
"unsettled" (attach: delivery-tag -> delivery-state, transport §2.7.3), "*" (any value); or the
name of a composite ("error", "source") or of an archetype composites provide ("delivery-state",
"outcome", "target"): the value must be one of those described types, so a field is never
stored with a type the spec does not allow (a wrong type is amqp:decode-error). A trailing "*"
marks a multiple field (types §1.3: a single value or an array, kept as a tuple) and a trailing
"!" a mandatory one.
Must not touch: the meaning of any particular performative (performatives.py, messaging.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from .decode import register_described
from .encode import encode_value, register_encoder
from .errors import DecodeError, EncodeError
from .types import Array, Described, Symbol, Timestamp, UByte, UInt, ULong, UShort

T = TypeVar("T")

_INTS: dict[str, type[int]] = {
    "ubyte": UByte,
    "ushort": UShort,
    "uint": UInt,
    "ulong": ULong,
    "timestamp": Timestamp,
}


def _to_wire(kind: str, value: Any) -> Any:
    """Coerce a field value to the AMQP type its kind asks for (validating its range)."""
    if value is None or kind == "*":
        return value
    if kind.endswith("*"):
        single = kind[:-1]
        if isinstance(value, (str, bytes)):
            value = (value,)
        items = [_to_wire(single, item) for item in value]
        return Array(single, items)
    int_type = _INTS.get(kind)
    if int_type is not None:
        return value if type(value) is int_type else int_type(value)
    if kind == "symbol":
        return value if type(value) is Symbol else Symbol(value)
    if kind == "fields":
        return {(k if type(k) is Symbol else Symbol(k)): v for k, v in value.items()}
    return value


_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "binary": lambda v: isinstance(v, bytes),
    "boolean": lambda v: isinstance(v, bool),
    "fields": lambda v: isinstance(v, dict),
    "map": lambda v: isinstance(v, dict),
    "list": lambda v: isinstance(v, list),
}


# Composite type name or archetype -> the classes that are or provide it (filled by `composite`).
# Kinds naming a described type are looked up when a value is decoded, so a performative may name
# a type that a later module defines (attach's source, defined in messaging.py).
_DESCRIBED_KINDS: dict[str, tuple[type, ...]] = {}


def described_kind(kind: str) -> tuple[type, ...] | None:
    """The classes a described-type kind accepts, None if `kind` names no described type."""
    return _DESCRIBED_KINDS.get(kind)


def _filter_set(value: Any, where: str) -> dict[Any, Any]:
    """messaging §3.5.8: symbol keys; each value null or a described filter."""
    if not isinstance(value, dict):
        raise DecodeError(f"{where} must be a map, got {type(value).__name__}")
    out: dict[Any, Any] = {}
    for key, item in value.items():
        if item is not None and not isinstance(item, Described) and not hasattr(item, "DESCRIPTOR_CODE"):
            raise DecodeError(f"{where} value must be a described filter, got {type(item).__name__}")
        out[_from_wire("symbol", key, f"{where} key")] = item
    return out


def _unsettled(value: Any, where: str) -> dict[Any, Any]:
    """transport §2.7.3: delivery-tag (binary) -> delivery-state or null."""
    if not isinstance(value, dict):
        raise DecodeError(f"{where} must be a map, got {type(value).__name__}")
    for key, item in value.items():
        if not isinstance(key, bytes):
            raise DecodeError(f"{where} key must be a delivery-tag, got {type(key).__name__}")
        if item is not None:
            _from_wire("delivery-state", item, f"{where} value")
    return value


_SPECIAL: dict[str, Callable[[Any, str], Any]] = {"filter-set": _filter_set, "unsettled": _unsettled}


def _from_wire(kind: str, value: Any, where: str) -> Any:
    """Validate a decoded field against its kind; raise DecodeError naming the field."""
    if kind == "*":
        return value
    if kind.endswith("*"):
        single = kind[:-1]
        items = value.elements if isinstance(value, Array) else (value,)
        if isinstance(value, list):
            items = tuple(value)
        return tuple(_from_wire(single, item, where) for item in items)
    int_type = _INTS.get(kind)
    if int_type is not None:
        # Accept any integer encoding that fits: peers differ in how they narrow values.
        if isinstance(value, bool) or not isinstance(value, int):
            raise DecodeError(f"{where} must be {kind}, got {type(value).__name__}")
        try:
            return value if type(value) is int_type else int_type(value)
        except EncodeError:
            raise DecodeError(f"{where} out of range for {kind}: {value}") from None
    if kind == "symbol":
        if not isinstance(value, str):
            raise DecodeError(f"{where} must be symbol, got {type(value).__name__}")
        if type(value) is Symbol:
            return value
        try:
            return Symbol(value)  # a string sent for a symbol: only ASCII converts
        except EncodeError:
            raise DecodeError(f"{where} must be symbol, got non-ASCII text") from None
    check = _CHECKS.get(kind)
    if check is not None:
        if not check(value):
            raise DecodeError(f"{where} must be {kind}, got {type(value).__name__}")
        if kind == "fields":
            # fields keys are symbols (transport §2.8.13); anything else could not be re-encoded.
            return {_from_wire("symbol", key, f"{where} key"): item for key, item in value.items()}
        return value
    special = _SPECIAL.get(kind)
    if special is not None:
        return special(value, where)
    classes = _DESCRIBED_KINDS.get(kind)
    if classes is None:  # a kind no module registered: a bug here, reported as bad input
        raise DecodeError(f"{where}: unknown field kind {kind!r}")
    if not isinstance(value, classes):
        raise DecodeError(f"{where} must be {kind}, got {_described_name(value)}")
    return value


def _described_name(value: Any) -> str:
    if isinstance(value, Described):
        return f"described {value.descriptor!r}"
    return type(value).__name__


def _descriptor_prefix(code: int) -> bytes:
    out = bytearray(b"\x00")
    encode_value(out, ULong(code))
    return bytes(out)


def composite(
    code: int, name: str, *kinds: str, provides: tuple[str, ...] = ()
) -> Callable[[type[T]], type[T]]:
    """Register a dataclass as the composite type with descriptor `code` / `name`, which
    provides the archetypes `provides` (types §1.4, e.g. a source provides "source")."""

    def wrap(cls: type[T]) -> type[T]:
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]
        if len(fields) != len(kinds):
            raise TypeError(f"{cls.__name__}: {len(fields)} fields but {len(kinds)} kinds")
        names = tuple(f.name for f in fields)
        wire_names = tuple(n.replace("_", "-") for n in names)
        plain_kinds = tuple(k.rstrip("!") for k in kinds)
        mandatory = tuple(k.endswith("!") for k in kinds)
        defaults = tuple(
            f.default if f.default is not dataclasses.MISSING else None for f in fields
        )
        prefix = _descriptor_prefix(code)
        type_name = name.split(":")[1] if ":" in name else name

        def encode_composite(out: bytearray, value: Any) -> None:
            items: list[Any] = []
            for field_name, kind, default, required in zip(
                names, plain_kinds, defaults, mandatory
            ):
                item = getattr(value, field_name)
                if item is None or (item == default and not required):
                    items.append(None)
                else:
                    items.append(_to_wire(kind, item))
            while items and items[-1] is None:
                items.pop()
            out += prefix
            encode_value(out, items)

        def decode_composite(value: Any) -> Any:
            if not isinstance(value, list):
                raise DecodeError(f"{type_name} must be a described list")
            kwargs: dict[str, Any] = {}
            for index, item in enumerate(value[: len(names)]):
                if item is not None:
                    where = f"{type_name}.{wire_names[index]}"
                    kwargs[names[index]] = _from_wire(plain_kinds[index], item, where)
            for index, required in enumerate(mandatory):
                if required and names[index] not in kwargs:
                    raise DecodeError(f"{type_name}.{wire_names[index]} is mandatory")
            try:
                return cls(**kwargs)
            except (TypeError, ValueError, EncodeError) as exc:
                raise DecodeError(f"invalid {type_name}: {exc}") from None

        register_encoder(cls, encode_composite)
        register_described((code, Symbol(name)), decode_composite)
        for kind_name in (type_name, *provides):
            _DESCRIBED_KINDS[kind_name] = (*_DESCRIBED_KINDS.get(kind_name, ()), cls)
        setattr(cls, "DESCRIPTOR_CODE", code)
        setattr(cls, "DESCRIPTOR_NAME", name)
        return cls

    return wrap


def restricted(code: int, name: str, kind: str) -> Callable[[type[T]], type[T]]:
    """Register a one-field dataclass (`value`) as a described restricted type (e.g. data)."""

    def wrap(cls: type[T]) -> type[T]:
        prefix = _descriptor_prefix(code)
        type_name = name.split(":")[1] if ":" in name else name

        def encode_restricted(out: bytearray, value: Any) -> None:
            out += prefix
            encode_value(out, _to_wire(kind, value.value))

        def decode_restricted(value: Any) -> Any:
            if value is not None:
                value = _from_wire(kind, value, type_name)
            return cls(value=value)  # type: ignore[call-arg]

        register_encoder(cls, encode_restricted)
        register_described((code, Symbol(name)), decode_restricted)
        setattr(cls, "DESCRIPTOR_CODE", code)
        setattr(cls, "DESCRIPTOR_NAME", name)
        return cls

    return wrap
