"""What a manageable entity type is, and the vocabulary every face shares.

Owns: ManagementError (a status code and a description; every failure of the agent is one),
the reason phrases of the status codes, the shape of a reply (Reply), Attribute (`counters`: the
read-only counters many types have) and EntityType (names, attributes, operations,
and the hooks that read, create, update and delete entities), type-name resolution (the anchors'
long form `org.apache.qpid.dispatch.<short>` and the short form), ETags, and the protocols
through which configuration changes reach the network layer (ConfigControl, ConnectorControl).
Must not touch: message encoding (the faces'), the core's internals (entity types read them).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

from ..amqp.message import Message
from ..amqp.messaging import AmqpValue
from ..config.models import Connector, Listener

if TYPE_CHECKING:
    from .agent import ManagementAgent

# The anchors' type names (Qpid Dispatch's schema): tools send the long form, we accept both.
TYPE_PREFIX = "org.apache.qpid.dispatch."
BASE_ENTITY = TYPE_PREFIX + "entity"
CONFIGURATION_ENTITY = TYPE_PREFIX + "configurationEntity"
OPERATIONAL_ENTITY = TYPE_PREFIX + "operationalEntity"
OPERATIONS = ("CREATE", "READ", "UPDATE", "DELETE")

# Reason phrases (RFC 7231 §6, RFC 7232 §4.1) for the codes the faces produce.
REASONS: dict[int, str] = {
    200: "OK", 201: "Created", 204: "No Content", 304: "Not Modified", 400: "Bad Request",
    404: "Not Found", 405: "Method Not Allowed", 406: "Not Acceptable", 409: "Conflict",
    410: "Gone", 415: "Unsupported Media Type", 500: "Internal Server Error", 501: "Not Implemented",
}  # fmt: skip


def reason(status: int) -> str:
    return REASONS.get(status, "Unknown")


class ManagementError(Exception):
    """A management request failed with `status` (an HTTP status code). On a 409 `entity` is the
    current description of the entity (WD14 §5.6.2 asks for it in the answer)."""

    def __init__(self, status: int, description: str, entity: dict[str, Any] | None = None) -> None:
        super().__init__(f"{status} {description}")
        self.status = status
        self.description = description
        self.entity = entity


@dataclass(frozen=True, slots=True)
class Attribute:
    """One attribute of an entity type. `type` is an AMQP type name (WD14 §4.3.2 notation);
    `writable` attributes may be given on CREATE and UPDATE, the others are computed."""

    name: str
    type: str
    description: str
    writable: bool = False
    required: bool = False
    default: Any = None

    def describe(self) -> dict[str, Any]:
        """The WD14 entity-property map (§4.3.4), plus whether the attribute is writable."""
        out: dict[str, Any] = {"name": self.name, "type": self.type, "label": self.description,
                               "mandatory": self.required, "writable": self.writable}  # fmt: skip
        if self.default is not None:
            out["default"] = self.default
        return out


def counters(*specs: str) -> tuple[Attribute, ...]:
    """Read-only counters from "name: description" specs."""
    return tuple(Attribute(n.strip(), "ulong", d.strip()) for n, _, d in (s.partition(":") for s in specs))


# Every entity has these (the anchors' base entity type); WD14's `id` is our `identity`.
BASE_ATTRIBUTES = (
    Attribute("identity", "string", "Unique identity of the entity on this router, assigned by the router"),
    Attribute("name", "string", "Name of the entity, unique within its type"),
    Attribute("type", "string", "Long name of the entity's type"),
)


class EntityType:
    """A kind of manageable entity. Subclasses set the class attributes and implement
    `entities`; configuration types also implement create/update/delete."""

    short_name: str = ""
    description: str = ""
    attributes: tuple[Attribute, ...] = ()  # not counting BASE_ATTRIBUTES
    operations: tuple[str, ...] = ("READ",)
    aliases: tuple[str, ...] = ()  # more short names accepted (e.g. the config file's name)
    configuration = False  # a configuration entity (else operational)

    @property
    def name(self) -> str:
        return TYPE_PREFIX + self.short_name

    @property
    def all_attributes(self) -> tuple[Attribute, ...]:
        return BASE_ATTRIBUTES + self.attributes

    def attribute_names(self) -> list[str]:
        return [a.name for a in self.all_attributes]

    def attribute(self, name: str) -> Attribute | None:
        for attribute in self.all_attributes:
            if attribute.name == name:
                return attribute
        return None

    def names(self) -> tuple[str, ...]:
        """Every name this type answers to."""
        return (self.name, self.short_name, *self.aliases, *(TYPE_PREFIX + a for a in self.aliases))

    def bases(self) -> list[str]:
        return [BASE_ENTITY, CONFIGURATION_ENTITY if self.configuration else OPERATIONAL_ENTITY]

    def describe(self) -> dict[str, Any]:
        """The WD14 entity metatype (§4.3.4) with the anchors' extras (operations, short name)."""
        return {
            "name": self.name, "shortName": self.short_name, "version": "1.0",
            "description": self.description, "operations": list(self.operations),
            "properties": [a.describe() for a in self.all_attributes],
        }  # fmt: skip

    def entity(self, identity: str, name: str, **attributes: Any) -> dict[str, Any]:
        return {"identity": identity, "name": name, "type": self.name, **attributes}

    # --- hooks ------------------------------------------------------------------------------------

    def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
        """The current entities, in a stable order (paging relies on it, WD14 §5.5.1)."""
        raise NotImplementedError

    def find(self, agent: ManagementAgent, key: str, now: float, by: str = "any") -> dict[str, Any] | None:
        """The entity whose identity (by="identity"), name (by="name") or either is `key`."""
        by_name = None
        for entity in self.entities(agent, now):
            if by != "name" and entity.get("identity") == key:
                return entity  # an identity match wins over a name match
            if by != "identity" and by_name is None and entity.get("name") == key:
                by_name = entity
        return by_name

    def create(self, agent: ManagementAgent, attributes: dict[str, Any], now: float) -> dict[str, Any]:
        raise ManagementError(405, f"{self.short_name} entities cannot be created")

    def update(self, agent: ManagementAgent, entity: dict[str, Any], attributes: dict[str, Any], now: float) -> dict[str, Any]:
        raise ManagementError(405, f"{self.short_name} entities cannot be updated")

    def delete(self, agent: ManagementAgent, entity: dict[str, Any]) -> None:
        raise ManagementError(405, f"{self.short_name} entities cannot be deleted")


class Reply(NamedTuple):
    """What a dialect answers: the reply's subject, application properties and body (the node
    adds addressing and correlation)."""

    subject: str | None
    application_properties: dict[str, Any]
    body: Any = None
    has_body: bool = True
    content_type: str | None = None


def body_of(request: Message) -> Any:
    """The request's amqp-value body (None when there is none); 400 for data or sequence
    bodies: management bodies are AMQP-encoded (WD14 §5.1 application/amqp-management+amqp)."""
    if request.body is None:
        return None
    if isinstance(request.body, AmqpValue):
        return request.body.value
    raise ManagementError(400, "the request body must be one amqp-value section (an AMQP-encoded map)")


def accepts(accept: str, media_types: tuple[str, ...]) -> bool:
    """Whether an Accept header (RFC 7231 §5.3.2) admits one of `media_types` (wildcards and
    q-values understood; a q-value that is not a number counts as 1)."""
    for item in accept.split(","):
        media, *params = (p.strip().lower() for p in item.split(";"))
        q = next((p[2:] for p in params if p.startswith("q=")), "1")
        try:
            wanted = float(q) > 0
        except ValueError:
            wanted = True
        if wanted and media in ("*/*", "application/*", *media_types):
            return True
    return False


def etag(entity: Mapping[str, Any]) -> str:
    """A digest of an entity's attributes (WD14 §4.3.3 `tag`): it changes whenever the
    description does. WD14's own decorations (tag, self) are left out."""
    content = {k: v for k, v in entity.items() if k not in ("tag", "self", "id")}
    text = json.dumps(content, sort_keys=True, default=_jsonable, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _jsonable(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=str)
    return str(value)


# --- the network layer's side of configuration changes ------------------------------------------


@runtime_checkable
class ConfigControl(Protocol):
    """Starts and stops AMQP listeners when management creates or deletes them (the network
    layer implements it). A listener is updated by deleting it and creating it anew. Raising
    ManagementError refuses a change; OSError (e.g. the port is taken) answers 409."""

    def create_listener(self, listener: Listener) -> int | None:
        """Open `listener` now; return its bound port (None when not known)."""
        ...

    def delete_listener(self, name: str) -> bool:
        """Stop accepting on listener `name`; False if it was not open."""
        ...

    def listener_ports(self) -> Mapping[str, int]:
        """The bound port of every open listener, by name."""
        ...


@runtime_checkable
class ConnectorControl(Protocol):
    """Optional: a control that also implements these starts a connector created by management
    at once and stops a deleted one (an update is a delete then a create); without it connector
    entities are only stored in the configuration. Raising ManagementError refuses the change."""

    def create_connector(self, connector: Connector) -> None: ...

    def delete_connector(self, name: str) -> bool: ...


@runtime_checkable
class ConnectorStatusSource(Protocol):
    """Optional: a control that also implements this fills the connector entities' read-only
    `connectionStatus` (CONNECTING, SUCCESS or FAILED, as the anchors say) and `connectionMsg`
    (the last error, or "" when there is none); they are null without it."""

    def connector_status(self, name: str) -> tuple[str, str] | None:
        """(status, message) of connector `name`, or None when it is not running."""
        ...
