"""AMQP Management WD14 at the management node, carried by the HTTP-over-AMQP mapping.

A request is an HTTP request in an AMQP message: the method in properties.subject, the
request-target in properties.to, headers as application properties (with `http:request` =
"1.1"), the entity body an amqp-value. The reply carries the status code in properties.subject,
`http:response` ("1.1") and `http:reason` application properties, response headers (ETag,
Location, Allow) as application properties, and correlation-id = the request's message-id
(node.py). WD14 sections are cited as §n.

Resources, relative to the node address (`$management`, `_local/$management` or
`_topo/0/<id>/$management`; a target without the node's name is taken as relative to it):

    (the node)              GET: the discovery document (§3.2, §5.3)
    types                   GET: the entity metatypes (§4.3.5, §5.4); types/<name>: one of them
    entities                GET: every entity (§5.5.1); POST: create any type, named in the body (§2.2)
    <type>                  GET: that type's entities; POST: create one (§5.5.2)
    <type>/<identity>       the entity's `self` address (§2.4): GET, PUT, DELETE (§5.6)

Choices where the draft is open or inconsistent:
- The discovery document has both forms of §3.2: the overview's reserved `entity` (all
  entities) and `type` (the metatypes) keys in `collections`, and the normative schema's
  `entities` there with `types` at the top. Its addresses are relative to the node (§2.1.1);
  `self` addresses are absolute node paths (`$management/listener/listener%2Famqp`: the identity
  percent-encoded). Keys are symbols.
- Collection and self addresses are addresses of the router (node.py serves every address below
  the node's): a request reaches them on a link attached to the node with the resource in
  properties.to (HTTP-over-AMQP), on a link attached to the resource itself (a request without
  `to` is for its link's address), or through the anonymous relay with the resource in `to`. A
  request without `to` on an anonymous link or the node's own is for the node: GET is the
  discovery document.
- A PUT must carry the entity's `tag` (§5.6.2) in the body or an If-Match header, else 400; a
  DELETE may carry If-Match. A stale tag is 409 with the current description (§5.6.2).
- If-None-Match on any GET answers 304 when the ETag is current (§5.2); collections' ETags digest
  the page returned. An empty page is 204 without a body (§5.5.1).
- $top/$skip come from the request-target's query (`<type>?$top=10&$skip=20`, §5.5.1); anything
  but a non-negative integer is 400.
- Bodies are application/amqp-management+amqp only (§5.1): Accept without it (nor */*, nor
  application/*) is 406 before anything is done; a request body of another Content-Type is 415
  (a body without Content-Type is taken as AMQP). JSON is the HTTP face's (http.py).
- Deleted entities are remembered (a bounded number) and answer 410 (§5.2); other unknown
  addresses 404. A method a resource does not allow is 405 with Allow; OPTIONS answers 204 with
  Allow (§2.4); an unknown method is 501. Errors carry their description as a string body.
Owns: this mapping. Must not touch: entities (the agent's), addressing replies (node.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, unquote

from ..amqp.message import Message
from ..amqp.types import Symbol
from ..core.addressing import strip_scheme
from .model import ManagementError, Reply, accepts, body_of, etag, reason

if TYPE_CHECKING:
    from .agent import ManagementAgent

MEDIA = "application/amqp-management+amqp"
NODE = "$management"
METHODS = ("GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS")
WD14_DECORATIONS = ("tag", "self", "management", "version")  # set by the node, not attributes


def _reply(status: int, body: Any = None, *, kind: str | None = None, **headers: str) -> Reply:
    props: dict[str, Any] = {"http:response": "1.1", "http:reason": reason(status), **headers}
    if body is None:
        return Reply(str(status), props, has_body=False)
    return Reply(str(status), props, body, content_type=f"{MEDIA}; type={kind}" if kind else None)


def error_reply(status: int, description: str, **headers: str) -> Reply:
    reply = _reply(status, **headers)
    return reply._replace(body=description, has_body=True, content_type="text/plain; charset=utf-8")


def parse_target(to: str | None) -> tuple[str, list[str], dict[str, str]]:
    """(node address, resource path segments, query parameters) of a request-target."""
    if not to:
        return NODE, [], {}
    path, _, query = strip_scheme(to).partition("?")
    segments = path.strip("/").split("/")
    if NODE in segments:
        at = segments.index(NODE)
        node, rest = "/".join(segments[: at + 1]), segments[at + 1 :]
    else:
        node, rest = NODE, segments
    params = {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}
    return node, [unquote(s) for s in rest if s], params


class Request:
    """One WD14 request being answered."""

    def __init__(self, agent: ManagementAgent, message: Message, now: float, link_address: str | None = None) -> None:
        self.agent, self.message, self.now = agent, message, now
        props = message.properties
        self.method = (props.subject or "").upper() if props is not None else ""
        self.headers = {str(k).lower(): v for k, v in (message.application_properties or {}).items()}
        to = props.to if props is not None else None
        self.node, self.path, self.params = parse_target(to or link_address)
        content_type = (props.content_type if props is not None else None) or self.headers.get("content-type")
        self.content_type = str(content_type).split(";")[0].strip().lower() if content_type else None

    def header(self, name: str) -> str | None:
        value = self.headers.get(name)
        return None if value is None else str(value)

    def describe(self, entity: dict[str, Any]) -> dict[str, Any]:
        """The entity as WD14 describes it: our attributes plus id, tag and self (§4.3.3)."""
        short = self.agent.entity_type(entity["type"]).short_name
        self_address = f"{self.node}/{short}/{quote(entity['identity'], safe='')}"
        return {**entity, "id": entity["identity"], "tag": etag(entity), "self": self_address}

    def cacheable(self, body: Any, tag: str, kind: str) -> Reply:
        """200 with an ETag, or 304 when If-None-Match names it (§5.2, RFC 7232 §3.2)."""
        quoted = f'"{tag}"'
        none_match = self.header("if-none-match")
        if none_match is not None:
            tags = [t.strip().removeprefix("W/") for t in none_match.split(",")]
            if "*" in tags or quoted in tags or tag in tags:
                return _reply(304, ETag=quoted)
        return _reply(200, None if self.method == "HEAD" else body, kind=kind, ETag=quoted)

    def attributes(self) -> dict[str, Any]:
        """The request's entity description (§5.1), less the node's decorations."""
        if self.content_type is not None and self.content_type != MEDIA:
            raise ManagementError(415, f"request bodies must be {MEDIA} (got {self.content_type})")
        body = body_of(self.message)
        if not isinstance(body, dict):
            raise ManagementError(400, "the request body must be a map (an entity description)")
        attributes = {str(k): v for k, v in body.items()}
        given_id = attributes.pop("id", None)
        if given_id is not None:
            attributes.setdefault("identity", given_id)
        return attributes

    # --- resources --------------------------------------------------------------------------------

    def answer(self) -> Reply:
        if not self.method:
            raise ManagementError(400, "no request method (properties.subject) and no operation")
        if self.method not in METHODS:
            raise ManagementError(501, f"method {self.method} is not implemented")
        accept = self.header("accept")
        if accept is not None and not accepts(accept, (MEDIA,)):
            raise ManagementError(406, f"only {MEDIA} is available")
        path = self.path
        if not path:
            return self.only(("GET",), lambda: self.discovery())
        if path[0] == "types" and len(path) <= 2:
            return self.only(("GET",), lambda: self.types(path[1] if len(path) == 2 else None))
        if len(path) == 1:
            return self.collection(path[0])
        if len(path) == 2:
            return self.entity(path[0], path[1])
        raise ManagementError(404, f"no resource at {'/'.join(path)}")

    def only(self, allowed: tuple[str, ...], answer: Callable[[], Reply]) -> Reply:
        methods = (*allowed, "HEAD", "OPTIONS") if "GET" in allowed else (*allowed, "OPTIONS")
        if self.method == "OPTIONS":
            return _reply(204, Allow=", ".join(methods))
        if self.method not in methods:
            return error_reply(405, f"{self.method} is not allowed here", Allow=", ".join(methods))
        return answer()

    def discovery(self) -> Reply:
        types = self.agent.entity_types()
        # The main collections under both names the draft gives them: the reserved `entity` and
        # `type` keys of §3.2's overview, and the normative schema's `entities` (with `types` at
        # the top), so that a client written to either finds them.
        collections: dict[Symbol, Any] = {
            Symbol("entity"): _ref("All entities", "entities"),
            Symbol("type"): _ref("Entity types", "types"),
            Symbol("entities"): _ref("All entities", "entities"),
        }
        for t in types:
            collections.setdefault(Symbol(t.short_name), _ref(t.description, t.short_name))
        document = {Symbol("collections"): collections, Symbol("types"): _ref("Entity types", "types")}
        return self.cacheable(document, etag({"document": document}), "discovery-document")

    def types(self, name: str | None) -> Reply:
        if name is not None:
            described = self.agent.entity_type(name).describe()
            return self.cacheable(described, etag(described), "entity-type")
        metatypes = [t.describe() for t in self.agent.entity_types()]
        return self.cacheable(metatypes, etag({"types": metatypes}), "entity-type-collection")

    def collection(self, name: str) -> Reply:
        etype = None if name == "entities" else self.agent.entity_type(name)
        creatable = etype is None or "CREATE" in etype.operations
        allowed = ("GET", "POST") if creatable else ("GET",)
        return self.only(allowed, lambda: self.create(etype) if self.method == "POST" else self.enumerate(etype))

    def enumerate(self, etype: Any) -> Reply:
        skip, top = _paging(self.params, "$skip"), _paging(self.params, "$top")
        found = self.agent.entities(etype.name if etype is not None else None, skip or 0, top, now=self.now)
        page = [self.describe(e) for e in found]
        if not page:
            return _reply(204)  # §5.5.1: an empty collection or page
        return self.cacheable(page, etag({"page": [(e["id"], e["tag"]) for e in page]}), "entity-collection")

    def create(self, etype: Any) -> Reply:
        attributes = self.attributes()
        type_name = etype.name if etype is not None else attributes.get("type")
        if not isinstance(type_name, str) or not type_name:
            raise ManagementError(400, "the entity description needs a type (§2.2)")
        for key in WD14_DECORATIONS:
            attributes.pop(key, None)
        entity = self.describe(self.agent.create(type_name, attributes, now=self.now))
        return _reply(201, entity, kind=entity["type"], Location=entity["self"], ETag=f'"{entity["tag"]}"')

    def entity(self, collection: str, key: str) -> Reply:
        etype = None if collection == "entities" else self.agent.entity_type(collection)
        type_name = etype.name if etype is not None else None
        current = self.agent.find(type_name, key, now=self.now)
        ops = self.agent.entity_type(current["type"]).operations
        allowed = ("GET", *(m for m, op in (("PUT", "UPDATE"), ("DELETE", "DELETE")) if op in ops))
        if self.method == "PUT" and "PUT" in allowed:
            return self.update(current)
        if self.method == "DELETE" and "DELETE" in allowed:
            self.agent.delete(current["type"], current["identity"], self.header("if-match"), now=self.now)
            return _reply(204)
        return self.only(allowed, lambda: self.cacheable(self.describe(current), etag(current), current["type"]))

    def update(self, current: dict[str, Any]) -> Reply:
        attributes = self.attributes()
        tag = attributes.pop("tag", None) or self.header("if-match")
        if tag is None:
            raise ManagementError(400, "a PUT must carry the entity's tag as read (§5.6.2)")
        for key in WD14_DECORATIONS:
            attributes.pop(key, None)
        updated = self.agent.update(current["type"], current["identity"], attributes, str(tag), now=self.now)
        described = self.describe(updated)
        return _reply(200, described, kind=updated["type"], ETag=f'"{described["tag"]}"')


def _ref(label: str, address: str) -> dict[Symbol, str]:
    """An entity-collection-ref (§3.2.1.1): its address is relative to the node."""
    return {Symbol("label"): label, Symbol("address"): address}


def _paging(params: Mapping[str, str], key: str) -> int | None:
    value = params.get(key)
    if value is None:
        return None
    if not value.isdigit():
        raise ManagementError(400, f"{key} must be a non-negative integer (got {value!r})")
    return int(value)


def handle(agent: ManagementAgent, message: Message, now: float, link_address: str | None = None) -> Reply:
    request = Request(agent, message, now, link_address)
    try:
        return request.answer()
    except ManagementError as exc:
        if exc.status == 409 and exc.entity is not None:  # §5.6.2: with the current description
            described = request.describe(exc.entity)
            return _reply(409, described, kind=described["type"], ETag=f'"{described["tag"]}"')
        return error_reply(exc.status, exc.description)
