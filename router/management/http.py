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

Owns: the ASGI application and the front of the HTTP mapping: who asks and whether they may,
/, /healthz and /metrics, content negotiation (406, 415) and the agent's errors as responses.
The mapping itself is `handle()`, a plain function of the request (no I/O); the ASGI callable
around it only reads the body and writes the response, so Hypercorn (router/net) can serve it.
What is below /management is http_resources.py's; the JSON, tags and conditional requests of
a response are http_responses.py's.
Must not touch: sockets, the router's state (only the agent reads and changes it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol
from urllib.parse import unquote

from prometheus_client import CONTENT_TYPE_LATEST

from ..config.models import HttpListener, SslProfile
from .agent import ManagementAgent
from .authz import Requester
from .http_auth import CHALLENGE, HttpAuthenticator
from .http_resources import PREFIX, route
from .http_responses import JSON_TYPES, MEDIA_TYPE, Response, error_response, is_json, json_response, only
from .metrics import Metrics
from .model import ManagementError, accepts

MAX_BODY_BYTES = 1024 * 1024
LISTENER_KEY = "router.http_listener"  # set by router.net.http_server
WRITE_METHODS = frozenset({"POST", "PUT", "DELETE"})

Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]


class Event(Protocol):
    """What the server's task library gives (trio.Event): set once, awaited by many."""

    def set(self) -> None: ...

    async def wait(self) -> None: ...


class _Scrape:
    """A scrape being written: requests that arrive meanwhile wait for it and share its text
    (None if it did not finish: each writes its own then)."""

    def __init__(self, done: Event) -> None:
        self.done = done
        self.text: bytes | None = None


class ManagementApp:
    """The ASGI application. `healthy()` says whether the router runs (False while it stops);
    `after_call()` runs after every agent call (the network layer flushes what it queued)."""

    def __init__(
        self,
        agent: ManagementAgent,
        *,
        healthy: Callable[[], bool],
        metrics: Metrics | None = None,
        after_call: Callable[[], None] = lambda: None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        new_event: Callable[[], Event] | None = None,
    ) -> None:
        self.agent = agent
        self.healthy = healthy
        self.metrics = metrics
        self.sleep = sleep
        # Scrapes that overlap share one (without `new_event`, as in tests, each writes its own).
        self.new_event = new_event
        self._scraping: _Scrape | None = None
        self.after_call = after_call
        # `sleep` (the server's: trio's) lets the router run between a scrape's slices; with it,
        # who asks (http_auth.py) holds back failed logins.
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
            response = error_response(413, f"request body over {MAX_BODY_BYTES} bytes")
        else:
            listener = scope.get(LISTENER_KEY)
            listener = listener if isinstance(listener, HttpListener) else None
            requester = self.auth.requester(listener, headers.get("authorization")) if self.auth is not None else None
            if self.auth is not None and listener is not None and listener.authenticate != "none":
                client = scope.get("client")
                host = str(client[0]) if isinstance(client, (tuple, list)) and client else "?"
                await self.auth.throttle(host, ok=requester is not None, tried="authorization" in headers)
            response = self._answer(scope["method"], path.decode("latin-1"), scope.get("query_string", b"").decode("latin-1"),
                                    headers, body, requester=requester, listener=listener)  # fmt: skip
            if response is _METRICS:
                response = await self._scrape()
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
        response = self._answer(method, path, query, headers, body, requester=requester, listener=listener)
        if response is _METRICS:
            assert self.metrics is not None
            return _metrics_response(self.metrics.text())
        return response

    async def _scrape(self) -> Response:
        """/metrics for a request. One scrape is written at a time: a request arriving while one
        is written waits for it and answers with its text (begun at most one scrape's time
        before), so that many monitors, or a stranger's flood of requests (/metrics needs no
        credentials by default), cost the router one scrape at a time, not one each."""
        while self._scraping is not None:
            current = self._scraping
            await current.done.wait()
            if current.text is not None:
                return _metrics_response(current.text)
            # (its request went away before it finished: the first waiter to wake writes one)
        scrape = _Scrape(self.new_event()) if self.new_event is not None else None
        if scrape is not None:
            self._scraping = scrape
        try:
            text = await self._write_scrape()
            if scrape is not None:
                scrape.text = text
            return _metrics_response(text)
        finally:
            if scrape is not None:
                self._scraping = None  # (only a writer sets it, and one writes at a time)
                scrape.done.set()

    async def _write_scrape(self) -> bytes:
        """/metrics written a slice at a time, the router's connections running between slices
        (`sleep(0)`: trio's checkpoint): a scrape of a router with 10,000 addresses writes
        50,000 series."""
        assert self.metrics is not None
        pieces = []
        for piece in self.metrics.pieces():
            if piece is not None:
                pieces.append(piece.encode())  # (each piece apart: one 3 MB encode would be a stall of its own)
            elif self.sleep is not None:
                await self.sleep(0)
        return b"".join(pieces)

    def _answer(self, method: str, path: str, query: str, headers: Mapping[str, str], body: bytes, *,
                requester: Requester | None, listener: HttpListener | None) -> Response:  # fmt: skip
        """handle()'s answer, or _METRICS for a scrape its caller is to write."""
        method = "GET" if method == "HEAD" else method
        segments = [unquote(s) for s in path.split("?", 1)[0].strip("/").split("/")] if path.strip("/") else []
        open_paths = listener is None or listener.open_health_metrics
        # The root document only names the paths: it stays open with health and metrics.
        if segments and not (open_paths and segments in (["healthz"], ["metrics"])):
            refused = self._refused(method, requester)
            if refused is not None:
                return refused
        if segments == ["healthz"]:
            return only(method, "GET", self._healthz)
        if segments == ["metrics"]:
            return only(method, "GET", self._metrics)
        if not segments:
            return only(method, "GET", lambda: json_response(200, {"management": f"/{PREFIX}", "metrics": "/metrics", "healthz": "/healthz"}))
        if segments[0] != PREFIX:
            return error_response(404, f"no resource at {path}")
        accept = headers.get("accept")
        if accept is not None and not accepts(accept, JSON_TYPES):  # RFC 7231 §6.5.6, before any change
            return error_response(406, f"only {MEDIA_TYPE} (or application/json) is available")
        if method in ("POST", "PUT") and not is_json(headers.get("content-type")):
            return error_response(415, f"request bodies must be {MEDIA_TYPE} (got {headers.get('content-type') or 'no content-type'})")
        try:
            try:
                return route(self.agent, method, segments[1:], query, headers, body)
            finally:
                self.after_call()
        except ManagementError as exc:
            return error_response(exc.status, exc.description)

    def _refused(self, method: str, requester: Requester | None) -> Response | None:
        """401 (no valid credentials) or 403 (not allowed), counted; None when allowed."""
        write = method in WRITE_METHODS
        if requester is None:
            self.agent.authz.refusals["http-write" if write else "http-read"] += 1
            return error_response(401, "this listener needs HTTP basic credentials of a known user", CHALLENGE)
        try:
            self.agent.authz.check(requester, write=write)
        except ManagementError as exc:
            return error_response(exc.status, exc.description)
        return None

    def _healthz(self) -> Response:
        if self.healthy():
            return json_response(200, {"status": "ok"}, ("cache-control", "no-store"))
        return json_response(503, {"status": "shutting down"}, ("cache-control", "no-store"))

    def _metrics(self) -> Response:
        if self.metrics is None:
            return error_response(404, "metrics are not enabled")
        return _METRICS


# What _answer gives for a scrape allowed to go ahead: handle() writes it at once, the ASGI
# callable a slice at a time (compared by identity).
_METRICS = Response(200, [], b"")


def _metrics_response(text: bytes) -> Response:
    return Response(200, [("content-type", CONTENT_TYPE_LATEST)], text)
