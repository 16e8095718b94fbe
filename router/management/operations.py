"""The operation dialect of the anchors' tools (qdmanage, qdstat and scripts written for them).

A request names its operation in the application property `operation`; entity operations
(CREATE, READ, UPDATE, DELETE) name the entity with `type`, `name` and/or `identity`; node
operations (QUERY, GET-TYPES, GET-ATTRIBUTES, GET-OPERATIONS, GET-ANNOTATIONS, GET-MGMT-NODES)
are addressed to the node itself (`type` org.amqp.management, `name` self) and name the entity
type they are about in `entityType`. Bodies are AMQP maps: the attributes for CREATE and UPDATE,
`{attributeNames: [...]}` for QUERY, with `offset` and `count` application properties for paging.
The reply carries `statusCode` and `statusDescription` application properties and a body: the
entity (CREATE 201, READ and UPDATE 200), `{attributeNames, results}` for QUERY, an empty map
for DELETE (204) and for errors.

Owns: parsing these requests and shaping their replies. Status codes are the agent's, except
where the anchors' tools expect another: an operation a type does not allow is 501 (the agent's
405), and a deleted entity is 404 (the agent's 410).
Must not touch: the entities (the agent's), message addressing and correlation (node.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..amqp.message import Message
from .model import ManagementError, Reply, body_of, reason

if TYPE_CHECKING:
    from .agent import ManagementAgent

NODE_TYPE = "org.amqp.management"  # the type of the node itself in node operations
COMPAT_STATUS = {405: 501, 410: 404}  # what the anchors answer for these cases

Handler = Callable[["ManagementAgent", Mapping[str, Any], Any, float], tuple[int, Any]]


def error_reply(status: int, description: str) -> Reply:
    status = COMPAT_STATUS.get(status, status)
    return Reply(None, {"statusCode": status, "statusDescription": description}, {})


def handle(agent: ManagementAgent, request: Message, now: float) -> Reply:
    app = request.application_properties or {}
    operation = app.get("operation")
    try:
        if not isinstance(operation, str):
            raise ManagementError(400, "the operation application property must be a string")
        handler = HANDLERS.get(operation.upper())
        if handler is None:
            raise ManagementError(501, f"operation {operation!r} is not implemented (known: {', '.join(HANDLERS)})")
        status, body = handler(agent, app, body_of(request), now)
    except ManagementError as exc:
        return error_reply(exc.status, exc.description)
    return Reply(None, {"statusCode": status, "statusDescription": reason(status)}, body)


# --- request fields -------------------------------------------------------------------------------


def _string(app: Mapping[str, Any], key: str) -> str | None:
    value = app.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ManagementError(400, f"the {key} application property must be a string")
    return value


def _integer(app: Mapping[str, Any], key: str) -> int | None:
    value = app.get(key)
    if value is None:
        return None
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ManagementError(400, f"the {key} application property must be a non-negative integer")
    return int(value)


def _map(body: Any, what: str) -> dict[str, Any]:
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise ManagementError(400, f"the body of {what} must be a map (got {type(body).__name__})")
    return dict(body)


def _entity_type(app: Mapping[str, Any]) -> str | None:
    """The type a node operation is about: `entityType`, or `type` unless it names the node."""
    named = _string(app, "entityType")
    if named is None:
        named = _string(app, "type")
        named = None if named == NODE_TYPE else named
    return named


def _types(agent: ManagementAgent, app: Mapping[str, Any]) -> list[Any]:
    named = _entity_type(app)
    return [agent.entity_type(named)] if named is not None else agent.entity_types()


def _key(app: Mapping[str, Any]) -> str:
    """The entity an operation is on: its identity, or else its name (as the anchors' agent)."""
    key = _string(app, "identity") or _string(app, "name")
    if key is None:
        raise ManagementError(400, "give the name or the identity of the entity")
    return key


# --- operations -----------------------------------------------------------------------------------


def _query(agent: ManagementAgent, app: Mapping[str, Any], body: Any, now: float) -> tuple[int, Any]:
    request = _map(body, "QUERY")
    names = request.get("attributeNames")
    if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names)):
        raise ManagementError(400, "attributeNames must be a list of strings")
    offset, count = _integer(app, "offset") or 0, _integer(app, "count")
    attribute_names, rows = agent.query(_entity_type(app), names or None, offset, count, now=now)
    return 200, {"attributeNames": attribute_names, "results": rows}


def _get_types(agent: ManagementAgent, app: Mapping[str, Any], body: Any, now: float) -> tuple[int, Any]:
    return 200, {t.name: t.bases() for t in _types(agent, app)}


def _get_attributes(agent: ManagementAgent, app: Mapping[str, Any], body: Any, now: float) -> tuple[int, Any]:
    return 200, {t.name: t.attribute_names() for t in _types(agent, app)}


def _get_operations(agent: ManagementAgent, app: Mapping[str, Any], body: Any, now: float) -> tuple[int, Any]:
    return 200, {t.name: list(t.operations) for t in _types(agent, app)}


def _get_annotations(agent: ManagementAgent, app: Mapping[str, Any], body: Any, now: float) -> tuple[int, Any]:
    return 200, {t.name: [] for t in _types(agent, app)}  # no annotations are defined


def _get_mgmt_nodes(agent: ManagementAgent, app: Mapping[str, Any], body: Any, now: float) -> tuple[int, Any]:
    """The management node of every router reachable from here, this one included (the anchors
    list their router.node entities, which include themselves), in the anchors'
    `amqp:/_topo/0/<id>/$management` form. A router the mesh still knows but has no path to
    (no next hop) is left out: a request to its node could not arrive."""
    ids = [agent.config.router.id]
    for node in agent.entities("router.node", now=now):
        if node.get("id") not in ids and node.get("nextHop") is not None:
            ids.append(str(node["id"]))
    return 200, [f"amqp:/_topo/0/{router_id}/$management" for router_id in ids]


def _create(agent: ManagementAgent, app: Mapping[str, Any], body: Any, now: float) -> tuple[int, Any]:
    attributes = _map(body, "CREATE")
    for key in ("type", "name"):  # the anchors take these from the properties or the body
        given = _string(app, key)
        if given is not None:
            if attributes.get(key) not in (None, given):
                raise ManagementError(400, f"conflicting values for {key}: {given!r} and {attributes[key]!r}")
            attributes[key] = given
    type_name = attributes.pop("type", None)
    if not isinstance(type_name, str) or not type_name:
        raise ManagementError(400, "CREATE needs a type")
    return 201, agent.create(type_name, attributes, now=now)


def _read(agent: ManagementAgent, app: Mapping[str, Any], body: Any, now: float) -> tuple[int, Any]:
    return 200, agent.read(_string(app, "type"), name=_string(app, "name"), identity=_string(app, "identity"), now=now)


def _update(agent: ManagementAgent, app: Mapping[str, Any], body: Any, now: float) -> tuple[int, Any]:
    return 200, agent.update(_string(app, "type"), _key(app), _map(body, "UPDATE"), now=now)


def _delete(agent: ManagementAgent, app: Mapping[str, Any], body: Any, now: float) -> tuple[int, Any]:
    agent.delete(_string(app, "type"), _key(app), now=now)
    return 204, {}


HANDLERS: dict[str, Handler] = {
    "QUERY": _query, "GET-TYPES": _get_types, "GET-ATTRIBUTES": _get_attributes,
    "GET-OPERATIONS": _get_operations, "GET-ANNOTATIONS": _get_annotations, "GET-MGMT-NODES": _get_mgmt_nodes,
    "CREATE": _create, "READ": _read, "UPDATE": _update, "DELETE": _delete,
}  # fmt: skip
