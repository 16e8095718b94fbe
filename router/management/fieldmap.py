"""The mapping between the configuration models and management attributes, which every
configuration entity type uses (config_entities.py, address_rules.py, link_routes.py,
autolinks.py, policy_entities.py).

Owns: a model's snake_case fields as management attributes (camelCase, the anchors' names where
the concept is the same: `idle_timeout_s` is `idleTimeoutSeconds`, `max_sessions_per_connection`
is `maxSessions`, `sasl_username` is `saslUsername`), their AMQP types, descriptions and
defaults; rendering a model's values (lists as space-separated words, secrets as a mask: a
connector's `saslPassword`), parsing attributes back into fields (read-only attributes and a
secret's mask ignored), merging an update into the old fields, and validating the result by the
model (a 400 with the model's problems).
Must not touch: RouterConfig's cross-field rules and applying changes (config_entities.py), the
agent, sockets, the core.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from ..config.loader import problems_of
from .model import Attribute, ManagementError


# Descriptions for model fields that carry none.
_DESCRIPTIONS = {
    "name": "Name, unique among entities of the type", "host": "Host name or IP address",
    "role": "Role of the connections (normal, inter-router, edge)", "max_frame_size": "Largest frame, bytes",
    "sasl_mechanisms": "SASL mechanisms, space separated", "max_sessions_per_connection": "Sessions per connection",
    "max_links_per_connection": "Links per connection", "sasl_username": "User name for SASL PLAIN",
    "prefix": "Address prefix (matches the address and its '.' or '/' sub-addresses)",
    "pattern": "Address pattern ('*' one word, '#' zero or more; words split on '.' or '/')",
    "distribution": "closest, balanced, multicast or unavailable (attaches refused, anonymous sends rejected)", "port": "TCP port",
    "sasl_password": "Password for SASL PLAIN (write-only: reads as ********)",
    "reconnect_initial_s": "Delay before the first retry after a failure (doubles, with jitter, up to reconnectMaxSeconds)",
    "reconnect_max_s": "Longest delay between retries",
}  # fmt: skip
MASK = "********"  # what a secret reads as (the anchors' tools print passwords the same way)
_RENAMED = {  # the anchors' names for the concept
    "max_sessions_per_connection": "maxSessions", "handshake_timeout_s": "initialHandshakeTimeoutSeconds",
    "key_file": "privateKeyFile", "ca_file": "caCertFile",
}  # fmt: skip


def camel(field: str) -> str:
    """`link_capacity` -> `linkCapacity`, `idle_timeout_s` -> `idleTimeoutSeconds`."""
    if field in _RENAMED:
        return _RENAMED[field]
    if field.endswith("_s"):
        field = field[:-2] + "_seconds"
    head, *rest = field.split("_")
    return head + "".join(word.capitalize() for word in rest)


def amqp_type(annotation: Any) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Union or type(annotation).__name__ == "UnionType":
        return amqp_type(next(a for a in args if a is not type(None)))
    if origin in (tuple, list):
        return "string"  # rendered as the anchors do: words separated by spaces
    return {bool: "boolean", int: "long", float: "double"}.get(annotation, "string")


class FieldMap:
    """Management attributes <-> the fields of a configuration model."""

    def __init__(self, model: type[BaseModel], writable: bool = True, secrets: tuple[str, ...] = ()) -> None:
        self.model = model
        self.fields: dict[str, str] = {}  # attribute -> field
        self.lists: set[str] = set()  # fields rendered as space-separated words
        self.secrets = set(secrets)  # fields never shown (MASK when set)
        attributes = []
        for field, info in model.model_fields.items():
            name = camel(field)
            self.fields[name] = field
            if get_origin(info.annotation) in (tuple, list):
                self.lists.add(field)
            default = None if info.is_required() or info.default_factory is not None else self._render(field, info.default)
            attributes.append(Attribute(name, amqp_type(info.annotation), info.description or _DESCRIPTIONS.get(field, ""),
                                        writable=writable, required=info.is_required(), default=default))  # fmt: skip
        self.attributes = tuple(attributes)

    def without_name(self) -> tuple[Attribute, ...]:
        """The attributes less `name` (every entity has one: model.BASE_ATTRIBUTES)."""
        return tuple(a for a in self.attributes if a.name != "name")

    def _render(self, field: str, value: Any) -> Any:
        if field in self.secrets:
            return None if value is None else MASK
        return " ".join(str(v) for v in value) if field in self.lists else value

    def render(self, obj: BaseModel) -> dict[str, Any]:
        return {name: self._render(field, getattr(obj, field)) for name, field in self.fields.items()}

    def parse(self, attributes: Mapping[str, Any], read_only: tuple[str, ...] = ()) -> dict[str, Any]:
        """Model fields from attributes (camelCase, or the configuration file's snake_case).
        Read-only attributes, and secrets given as the mask they read as, are ignored: a client
        may send back what it read (WD14 §5.6.2)."""
        out: dict[str, Any] = {}
        for key, value in attributes.items():
            if key in read_only:
                continue
            field = self.fields.get(key) or (key if key in self.model.model_fields else None)
            if field is None:
                raise ManagementError(400, f"unknown attribute {key!r} (known: {', '.join(self.fields)})")
            if field in self.secrets and value == MASK:
                continue
            if field in self.lists and isinstance(value, str):
                value = tuple(value.replace(",", " ").split())
            out[field] = value
        return out

    def merge(self, old: BaseModel, changes: dict[str, Any]) -> dict[str, Any]:
        """The old fields with `changes`; a None change restores the default (WD14 §5.6.2)."""
        fields = {f: getattr(old, f) for f in self.model.model_fields}
        for field, value in changes.items():
            if value is None:
                fields.pop(field, None)
            else:
                fields[field] = value
        return fields

    def build(self, fields: dict[str, Any], what: str) -> Any:
        try:
            return self.model.model_validate(fields)
        except ValidationError as exc:
            raise ManagementError(400, "; ".join(problems_of(exc, what))) from None
