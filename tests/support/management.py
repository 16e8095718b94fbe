"""An in-process router with an HTTP listener, and a small HTTP client, for the management tests.

    async with managed_router() as router:        # AMQP and HTTP on 127.0.0.1, ephemeral ports
        status, headers, body = await router.http("GET", "/management/listener")
        router.amqp_port, router.server, router.id

The HTTP client is urllib in a worker thread (the router keeps running on the trio thread);
every request has a time-out, so a hung router fails the test instead of hanging it.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import trio

from router.config.models import HttpListener, Listener, RouterConfig, RouterSection
from router.net.server import RouterServer

MEDIA_TYPE = "application/amqp-management+json"
HTTP_TIMEOUT_S = 5.0


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


def _request(url: str, method: str, body: bytes | None, headers: dict[str, str]) -> Response:
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as answer:
            return Response(answer.status, {k.lower(): v for k, v in answer.headers.items()}, answer.read())
    except urllib.error.HTTPError as error:  # every non-2xx status lands here
        with error:
            return Response(error.code, {k.lower(): v for k, v in error.headers.items()}, error.read())


@dataclass
class ManagedRouter:
    server: RouterServer
    amqp_port: int
    http_port: int

    @property
    def id(self) -> str:
        return self.server.config.router.id

    async def http(
        self, method: str, path: str, body: Any = None, *, headers: dict[str, str] | None = None, raw: bytes | None = None
    ) -> Response:
        """`body` is sent as JSON with the management media type; `raw` as given."""
        sent = dict(headers or {})
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            sent.setdefault("Content-Type", MEDIA_TYPE)
        url = f"http://127.0.0.1:{self.http_port}{path}"
        with trio.fail_after(HTTP_TIMEOUT_S + 1):
            return await trio.to_thread.run_sync(_request, url, method, data, sent)


def management_config(router_id: str = "mgmt-router") -> RouterConfig:
    return RouterConfig(
        router=RouterSection(id=router_id),
        listeners=(Listener(name="amqp", host="127.0.0.1", port=0),),
        http=(HttpListener(name="http", host="127.0.0.1", port=0),),
    )


@asynccontextmanager
async def managed_router(config: RouterConfig | None = None) -> AsyncIterator[ManagedRouter]:
    """A RouterServer with one AMQP and one HTTP listener, stopped (gracefully) on exit."""
    server = RouterServer(config or management_config())
    async with trio.open_nursery() as nursery:
        addresses = await nursery.start(server.run)
        try:
            yield ManagedRouter(server, addresses[0][2], server.http_addresses[0][2])
        finally:
            server.shutdown()
            with trio.fail_after(5):
                await server.wait_stopped()
