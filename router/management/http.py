"""The management resources over HTTP/JSON, plus /metrics and /healthz: an ASGI 3 application.

    GET    /management                      discovery document (collections, types)
    GET    /management/types                the entity types
    GET    /management/{type}?$top=&$skip=  a collection (a JSON list; [] when the page is empty)
    POST   /management/{type}               create -> 201, Location, ETag
    GET    /management/{type}/{name}        an entity, ETag; If-None-Match -> 304
    PUT    /management/{type}/{name}        update (If-Match: a stale tag -> 409 + the entity)
    DELETE /management/{type}/{name}        -> 204 (If-Match as for PUT)
    GET    /metrics                         Prometheus text format
    GET    /healthz                         200 while the router runs, 503 while it stops

`type` is a full (`org.apache.qpid.dispatch.router.address`) or short (`router.address`)
name, and `{name}` an entity's name or identity (percent-encoded; a `/` in it may stay as is). Bodies are JSON with the media
type application/amqp-management+json (application/json is accepted too); a request body of
any other type gets 415. An entity's ETag is the agent's tag (the AMQP face's too); a page's is
a digest of its JSON, so either changes whenever the content does (WD14 §5.2). A PUT body may be
the entity as it was read: attributes whose value did not change are not sent to the agent.
The statuses are the agent's (400, 404, 405, 409, 410) plus the HTTP layer's own (400 for
bad JSON or paging, 405, 406 when Accept admits no JSON, 413, 415). An empty page is `200 []` rather than WD14's `204`: a
JSON client can parse every collection answer the same way.

Who may do what (authz.py): GET and HEAD read, POST, PUT and DELETE write. Who asks comes
from the listener in the ASGI scope (router.net.http_server) and its basic credentials
(http_auth.py): missing or wrong credentials where the listener needs them are 401 with a
`WWW-Authenticate: Basic` challenge; a requester the rules do not allow is 403. /healthz and
/metrics answer without credentials while the listener's `open_health_metrics` says so
(otherwise they are reads), and so does `/`, which only names the paths.

Owns: the HTTP mapping (paths, methods, statuses, headers, JSON) over the agent's methods. The
mapping itself is `handle()`, a plain function of the request (no I/O); the ASGI callable
around it only reads the body and writes the response, so Hypercorn (router/net) can serve it.
Must not touch: sockets, the router's state (only the agent reads and changes it).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NamedTuple
from urllib.parse import parse_qs, quote, unquote

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from ..config.models import HttpListener, SslProfile
from .agent import ManagementAgent
from .authz import Requester
from .http_auth import CHALLENGE, HttpAuthenticator
from .model import ManagementError, accepts, etag

MEDIA_TYPE = "application/amqp-management+json"
JSON_TYPES = (MEDIA_TYPE, "application/json")
PREFIX = "management"
MAX_BODY_BYTES = 1024 * 1024
LISTENER_KEY = "router.http_listener"  # set by router.net.http_server
WRITE_METHODS = frozenset({"POST", "PUT", "DELETE"})

Headers = list[tuple[str, str]]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]


class Response(NamedTuple):
    status: int
    headers: Headers
    body: bytes


def to_json(value: Any) -> bytes:
    def fallback(obj: Any) -> Any:
        if isinstance(obj, (bytes, bytearray, memoryview)):
            return bytes(obj).hex()
        if isinstance(obj, (set, frozenset, tuple)):
            return list(obj)
        return str(obj)

    return json.dumps(value, default=fallback, separators=(",", ":"), sort_keys=True).encode()


def digest_tag(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:24] + '"'


def entity_tag(entity: Mapping[str, Any]) -> str:
    return f'"{etag(entity)}"'


def _json(status: int, value: Any, *headers: tuple[str, str], kind: str | None = None) -> Response:
    body = to_json(value)
    media = MEDIA_TYPE + (f"; type={kind}" if kind else "")
    return Response(status, [("content-type", media), *headers], body)


def _error(status: int, description: str, *headers: tuple[str, str]) -> Response:
    return _json(status, {"status": status, "description": description}, *headers, kind="error")


def _tag_matches(header: str | None, tag: str) -> bool:
    """Whether an If-Match/If-None-Match header names `tag` (or is `*`); weak tags compare equal."""
    if header is None:
        return False
    tags = [t.strip().removeprefix("W/") for t in header.split(",")]
    return "*" in tags or tag in tags


class ManagementApp:
    """The ASGI application. `healthy()` says whether the router runs (False while it stops);
    `after_call()` runs after every agent call (the network layer flushes what it queued)."""

    def __init__(
        self,
        agent: ManagementAgent,
        *,
        healthy: Callable[[], bool],
        registry: CollectorRegistry | None = None,
        after_call: Callable[[], None] = lambda: None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        self.agent = agent
        self.healthy = healthy
        self.registry = registry
        self.after_call = after_call
        # Who asks (http_auth.py); `sleep` (the server's: trio's) holds back failed logins.
        self.auth = HttpAuthenticator(lambda: agent.config, agent.clock, sleep) if agent is not None else None

    # --- ASGI ------------------------------------------------------------------------------------

    async def __call__(self, scope: Mapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # websockets: not offered (Hypercorn refuses the upgrade)
        body, too_big = b"", False
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            too_big = too_big or len(body) > MAX_BODY_BYTES
            if too_big:
                body = b""  # keep reading (and dropping) so that the client gets the answer
            if not message.get("more_body", False):
                break
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        path = scope.get("raw_path") or scope["path"].encode()
        if too_big:
            response = _error(413, f"request body over {MAX_BODY_BYTES} bytes")
        else:
            listener = scope.get(LISTENER_KEY)
            listener = listener if isinstance(listener, HttpListener) else None
            requester = self.auth.requester(listener, headers.get("authorization")) if self.auth is not None else None
            if self.auth is not None and listener is not None and listener.authenticate != "none":
                client = scope.get("client")
                host = str(client[0]) if isinstance(client, (tuple, list)) and client else "?"
                await self.auth.throttle(host, ok=requester is not None, tried="authorization" in headers)
            response = self.handle(scope["method"], path.decode("latin-1"), scope.get("query_string", b"").decode("latin-1"),
                                   headers, body, requester=requester, listener=listener)  # fmt: skip
        out = b"" if scope["method"] == "HEAD" or response.status in (204, 304) else response.body
        raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers]
        if response.status not in (204, 304):
            raw.append((b"content-length", str(len(response.body)).encode()))
        await send({"type": "http.response.start", "status": response.status, "headers": raw})
        await send({"type": "http.response.body", "body": out})

    def ssl_profiles(self) -> tuple[SslProfile, ...]:
        """The live configuration's TLS profiles (the HTTP listeners' come from them)."""
        return self.agent.config.ssl_profiles

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    # --- the mapping (no I/O) --------------------------------------------------------------------

    def handle(self, method: str, path: str, query: str, headers: Mapping[str, str], body: bytes, *,
               requester: Requester | None = Requester(None, loopback=True, face="http"),
               listener: HttpListener | None = None) -> Response:  # fmt: skip
        """One request -> one response. `path` is the raw (percent-encoded) path; `headers`
        have lower-case names. `requester`: who asks (None: credentials missing or wrong, 401
        wherever they are needed); the default is an anonymous local caller. `listener`: the
        HTTP listener it came through (its open_health_metrics)."""
        method = "GET" if method == "HEAD" else method
        segments = [unquote(s) for s in path.split("?", 1)[0].strip("/").split("/")] if path.strip("/") else []
        open_paths = listener is None or listener.open_health_metrics
        # The root document only names the paths: it stays open with health and metrics.
        if segments and not (open_paths and segments in (["healthz"], ["metrics"])):
            refused = self._refused(method, requester)
            if refused is not None:
                return refused
        if segments == ["healthz"]:
            return self._only(method, "GET", self._healthz)
        if segments == ["metrics"]:
            return self._only(method, "GET", self._metrics)
        if not segments:
            return self._only(method, "GET", lambda: _json(200, {"management": f"/{PREFIX}", "metrics": "/metrics", "healthz": "/healthz"}))
        if segments[0] != PREFIX:
            return _error(404, f"no resource at {path}")
        accept = headers.get("accept")
        if accept is not None and not accepts(accept, JSON_TYPES):  # RFC 7231 §6.5.6, before any change
            return _error(406, f"only {MEDIA_TYPE} (or application/json) is available")
        if method in ("POST", "PUT") and not _is_json(headers.get("content-type")):
            return _error(415, f"request bodies must be {MEDIA_TYPE} (got {headers.get('content-type') or 'no content-type'})")
        try:
            try:
                return self._route(method, segments[1:], query, headers, body)
            finally:
                self.after_call()
        except ManagementError as exc:
            return _error(exc.status, exc.description)

    def _refused(self, method: str, requester: Requester | None) -> Response | None:
        """401 (no valid credentials) or 403 (not allowed), counted; None when allowed."""
        write = method in WRITE_METHODS
        if requester is None:
            self.agent.authz.refusals["http-write" if write else "http-read"] += 1
            return _error(401, "this listener needs HTTP basic credentials of a known user", CHALLENGE)
        try:
            self.agent.authz.check(requester, write=write)
        except ManagementError as exc:
            return _error(exc.status, exc.description)
        return None

    def _only(self, method: str, allowed: str, fn: Callable[[], Response]) -> Response:
        return fn() if method == allowed else _error(405, f"{method} not allowed here", ("allow", f"{allowed}, HEAD"))

    def _healthz(self) -> Response:
        if self.healthy():
            return _json(200, {"status": "ok"}, ("cache-control", "no-store"))
        return _json(503, {"status": "shutting down"}, ("cache-control", "no-store"))

    def _metrics(self) -> Response:
        if self.registry is None:
            return _error(404, "metrics are not enabled")
        return Response(200, [("content-type", CONTENT_TYPE_LATEST)], generate_latest(self.registry))

    def _route(self, method: str, rest: list[str], query: str, headers: Mapping[str, str], body: bytes) -> Response:
        if not rest:
            return self._only(method, "GET", self._discovery)
        if rest == ["types"]:
            return self._only(method, "GET", lambda: self._cacheable(self.agent.types(), None, headers, "entity-types"))
        if len(rest) == 1:
            if method == "GET":
                return self._collection(rest[0], query, headers)
            if method == "POST":
                return self._create(rest[0], body)
            return _error(405, f"{method} not allowed on a collection", ("allow", "GET, HEAD, POST"))
        # Type names have no '/'; keys may (`listener/amqp`): everything after the type is the
        # key, whether its slashes came percent-encoded or not.
        type_name, key = rest[0], "/".join(rest[1:])
        if method == "GET":
            entity = self._read(type_name, key)
            return self._cacheable(entity, entity_tag(entity), headers, "entity")
        if method == "PUT":
            return self._update(type_name, key, headers, body)
        if method == "DELETE":
            return self._delete(type_name, key, headers)
        return _error(405, f"{method} not allowed on an entity", ("allow", "GET, HEAD, PUT, DELETE"))

    def _discovery(self) -> Response:
        collections = {"entities": {"address": f"/{PREFIX}/entities", "label": "all entities"}}
        for etype in self.agent.entity_types():
            collections[etype.short_name] = {"address": f"/{PREFIX}/{etype.short_name}", "label": etype.description}
        document = {"collections": collections, "types": {"address": f"/{PREFIX}/types"}}
        return _json(200, document, kind="discovery-document")

    def _cacheable(self, value: Any, tag: str | None, headers: Mapping[str, str], kind: str) -> Response:
        """200 with an ETag, or 304 when If-None-Match names it (RFC 7232 §3.2)."""
        response = _json(200, value, kind=kind)
        tag = tag or digest_tag(response.body)
        if _tag_matches(headers.get("if-none-match"), tag):
            return Response(304, [("etag", tag)], b"")
        return Response(200, [*response.headers, ("etag", tag)], response.body)

    def _collection(self, type_name: str, query: str, headers: Mapping[str, str]) -> Response:
        params = parse_qs(query, keep_blank_values=True)
        paging: dict[str, int] = {}
        for key in ("$top", "$skip"):
            values = params.get(key)
            if values:
                if not values[-1].isdigit():
                    return _error(400, f"{key} must be a non-negative integer (got {values[-1]!r})")
                paging[key] = int(values[-1])
        type_or_all = None if type_name == "entities" else type_name
        page = self.agent.entities(type_or_all, paging.get("$skip", 0), paging.get("$top"))
        return self._cacheable(page, None, headers, "entity-collection")

    def _create(self, type_name: str, body: bytes) -> Response:
        attributes = _body_map(body)
        if type_name == "entities":  # WD14's generic factory: the type is in the body
            type_name = str(attributes.get("type") or "")
            if not type_name:
                raise ManagementError(400, "creating through /entities needs a `type` attribute")
        entity = self.agent.create(type_name, attributes)
        short = self.agent.entity_type(entity["type"]).short_name
        location = f"/{PREFIX}/{short}/{quote(str(entity['name']), safe='/')}"
        return _with_tag(_json(201, entity, ("location", location), kind="entity"), entity)

    def _update(self, type_name: str, key: str, headers: Mapping[str, str], body: bytes) -> Response:
        proposed = _body_map(body)
        current = self._read(type_name, key)
        # WD14 §5.6.2: the body is the entity as read with some attributes changed; only the
        # changes go to the agent (read-only attributes echoed back unchanged are no updates).
        changes = {k: v for k, v in proposed.items() if k not in current or current[k] != v}
        try:
            entity = self.agent.update(current["type"], current["identity"], changes, headers.get("if-match"))
        except ManagementError as exc:
            if exc.status == 409 and exc.entity is not None:
                return _with_tag(_json(409, exc.entity, kind="entity"), exc.entity)
            raise
        return _with_tag(_json(200, entity, kind="entity"), entity)

    def _delete(self, type_name: str, key: str, headers: Mapping[str, str]) -> Response:
        current = self._read(type_name, key)
        try:
            self.agent.delete(current["type"], current["identity"], headers.get("if-match"))
        except ManagementError as exc:
            if exc.status == 409 and exc.entity is not None:
                return _with_tag(_json(409, exc.entity, kind="entity"), exc.entity)
            raise
        return Response(204, [], b"")

    # --- the agent -------------------------------------------------------------------------------

    def _read(self, type_name: str, key: str) -> dict[str, Any]:
        """The entity whose identity or name is `key` (identity first, as the agent's update
        and delete look entities up)."""
        try:
            return self.agent.read(type_name, identity=key)
        except ManagementError as exc:
            if exc.status != 404:
                raise
        return self.agent.read(type_name, name=key)


def _with_tag(response: Response, entity: Mapping[str, Any]) -> Response:
    return Response(response.status, [*response.headers, ("etag", entity_tag(entity))], response.body)


def _is_json(content_type: str | None) -> bool:
    return content_type is not None and content_type.split(";", 1)[0].strip().lower() in JSON_TYPES


def _body_map(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ManagementError(400, f"the body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ManagementError(400, "the body must be a JSON map of attributes")
    return value
