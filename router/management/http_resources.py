"""The /management resources over the agent (WD14 §5 as HTTP): what the HTTP face answers under
/management once the request got past who asks and content negotiation (http.py).

Owns: the paths below /management (the discovery document, the types, a type's collection or
`entities` for all, an entity by type and key, slashes in the key allowed), the methods each
allows (405 with Allow otherwise), paging ($top, $skip), 304 for a matching If-None-Match, a
create's 201 with Location and ETag (through /entities with the type in the body too), an update
sending the agent only the attributes that changed, If-Match passed on (a stale tag: 409 with
the entity), and finding an entity by identity, then by name.
Collaborators, passed in: the ManagementAgent (its types, entities, create, read, update and
delete; its ManagementErrors propagate, http.py turns them into responses).
Must not touch: who may ask (http.py, authz.py), /metrics and /healthz (http.py), the JSON and
tags of a response (http_responses.py), sockets, the router's state (the agent's).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote

from .http_responses import (
    Response,
    body_map,
    digest_tag,
    entity_tag,
    error_response,
    json_response,
    only,
    tag_matches,
    with_tag,
)
from .model import ManagementError

if TYPE_CHECKING:
    from .agent import ManagementAgent

PREFIX = "management"


def route(agent: ManagementAgent, method: str, rest: list[str], query: str, headers: Mapping[str, str], body: bytes) -> Response:
    if not rest:
        return only(method, "GET", lambda: _discovery(agent))
    if rest == ["types"]:
        return only(method, "GET", lambda: _cacheable(agent.types(), None, headers, "entity-types"))
    if len(rest) == 1:
        if method == "GET":
            return _collection(agent, rest[0], query, headers)
        if method == "POST":
            return _create(agent, rest[0], body)
        return error_response(405, f"{method} not allowed on a collection", ("allow", "GET, HEAD, POST"))
    # Type names have no '/'; keys may (`listener/amqp`): everything after the type is the
    # key, whether its slashes came percent-encoded or not.
    type_name, key = rest[0], "/".join(rest[1:])
    if method == "GET":
        entity = _read(agent, type_name, key)
        return _cacheable(entity, entity_tag(entity), headers, "entity")
    if method == "PUT":
        return _update(agent, type_name, key, headers, body)
    if method == "DELETE":
        return _delete(agent, type_name, key, headers)
    return error_response(405, f"{method} not allowed on an entity", ("allow", "GET, HEAD, PUT, DELETE"))


def _discovery(agent: ManagementAgent) -> Response:
    collections = {"entities": {"address": f"/{PREFIX}/entities", "label": "all entities"}}
    for etype in agent.entity_types():
        collections[etype.short_name] = {"address": f"/{PREFIX}/{etype.short_name}", "label": etype.description}
    document = {"collections": collections, "types": {"address": f"/{PREFIX}/types"}}
    return json_response(200, document, kind="discovery-document")


def _cacheable(value: Any, tag: str | None, headers: Mapping[str, str], kind: str) -> Response:
    """200 with an ETag, or 304 when If-None-Match names it (RFC 7232 §3.2)."""
    response = json_response(200, value, kind=kind)
    tag = tag or digest_tag(response.body)
    if tag_matches(headers.get("if-none-match"), tag):
        return Response(304, [("etag", tag)], b"")
    return Response(200, [*response.headers, ("etag", tag)], response.body)


def _collection(agent: ManagementAgent, type_name: str, query: str, headers: Mapping[str, str]) -> Response:
    params = parse_qs(query, keep_blank_values=True)
    paging: dict[str, int] = {}
    for key in ("$top", "$skip"):
        values = params.get(key)
        if values:
            if not values[-1].isdigit():
                return error_response(400, f"{key} must be a non-negative integer (got {values[-1]!r})")
            paging[key] = int(values[-1])
    type_or_all = None if type_name == "entities" else type_name
    page = agent.entities(type_or_all, paging.get("$skip", 0), paging.get("$top"))
    return _cacheable(page, None, headers, "entity-collection")


def _create(agent: ManagementAgent, type_name: str, body: bytes) -> Response:
    attributes = body_map(body)
    if type_name == "entities":  # WD14's generic factory: the type is in the body
        type_name = str(attributes.get("type") or "")
        if not type_name:
            raise ManagementError(400, "creating through /entities needs a `type` attribute")
    entity = agent.create(type_name, attributes)
    short = agent.entity_type(entity["type"]).short_name
    location = f"/{PREFIX}/{short}/{quote(str(entity['name']), safe='/')}"
    return with_tag(json_response(201, entity, ("location", location), kind="entity"), entity)


def _update(agent: ManagementAgent, type_name: str, key: str, headers: Mapping[str, str], body: bytes) -> Response:
    proposed = body_map(body)
    current = _read(agent, type_name, key)
    # WD14 §5.6.2: the body is the entity as read with some attributes changed; only the
    # changes go to the agent (read-only attributes echoed back unchanged are no updates).
    changes = {k: v for k, v in proposed.items() if k not in current or current[k] != v}
    try:
        entity = agent.update(current["type"], current["identity"], changes, headers.get("if-match"))
    except ManagementError as exc:
        if exc.status == 409 and exc.entity is not None:
            return with_tag(json_response(409, exc.entity, kind="entity"), exc.entity)
        raise
    return with_tag(json_response(200, entity, kind="entity"), entity)


def _delete(agent: ManagementAgent, type_name: str, key: str, headers: Mapping[str, str]) -> Response:
    current = _read(agent, type_name, key)
    try:
        agent.delete(current["type"], current["identity"], headers.get("if-match"))
    except ManagementError as exc:
        if exc.status == 409 and exc.entity is not None:
            return with_tag(json_response(409, exc.entity, kind="entity"), exc.entity)
        raise
    return Response(204, [], b"")


def _read(agent: ManagementAgent, type_name: str, key: str) -> dict[str, Any]:
    """The entity whose identity or name is `key` (identity first, as the agent's update
    and delete look entities up)."""
    try:
        return agent.read(type_name, identity=key)
    except ManagementError as exc:
        if exc.status != 404:
            raise
    return agent.read(type_name, name=key)
