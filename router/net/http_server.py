"""Serving an ASGI application on an HTTP listener with Hypercorn's trio worker.

    port = await nursery.start(serve_http, app, listener, stop)   # stop: a trio.Event

Owns: the Hypercorn settings (bind address, logging through our `router.http` logger, no
access log, short graceful shutdown, TLS from the listener's ssl_profile through router.net.tls,
a bounded TLS handshake) and reporting the bound port; telling the application which listener a
request came through (the ASGI scope's `router.http_listener`: its authentication and whether
it is bound to loopback decide who may do what). HTTP parsing, keep-alive and HTTP/2 are
Hypercorn's; what is served is the application's (router.management.http).
Must not touch: the router's state (the application reads it through the management agent).

The TLS material is read when the listener starts: a rotated certificate reaches the HTTP
listener at the next start (the AMQP listeners pick it up at once).
"""

from __future__ import annotations

import logging
import ssl
from typing import Any, cast

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from hypercorn.typing import Framework

from ..config.models import HttpListener, SslProfile
from .tls import TlsProfile

# Requests in progress when the router stops get this long to finish. Management requests
# answer at once (the agent is synchronous) and idle keep-alive connections are closed by
# Hypercorn as soon as it stops, so this bounds only a slow client.
GRACEFUL_S = 1.0
KEEP_ALIVE_S = 5.0
MAX_BODY_BYTES = 1024 * 1024  # management bodies are small maps
TLS_HANDSHAKE_S = 10.0  # a peer that stalls mid-handshake holds one task this long at most
LISTENER_KEY = "router.http_listener"  # the ASGI scope's key for the listener of the request

log = logging.getLogger("router.http")


class _TlsConfig(Config):
    """Hypercorn's settings with our TLS context (router.net.tls: the profile's protocols,
    ciphers, certificate and, with a ca_file, client certificates asked for)."""

    def __init__(self, context: ssl.SSLContext) -> None:
        super().__init__()
        self._context = context

    @property
    def ssl_enabled(self) -> bool:
        return True

    def create_ssl_context(self) -> ssl.SSLContext:
        return self._context


def tls_context(profile: SslProfile) -> ssl.SSLContext:
    """A server context of its own (ALPN set on it must not reach the AMQP listeners' contexts)."""
    context = TlsProfile(profile).current().context("server", False)
    context.set_alpn_protocols(["h2", "http/1.1"])
    return context


def hypercorn_config(listener: HttpListener, profile: SslProfile | None = None) -> Config:
    """`profile`: the listener's ssl_profile (HTTPS), None for plain HTTP."""
    config: Config = _TlsConfig(tls_context(profile)) if profile is not None else Config()
    config.ssl_handshake_timeout = TLS_HANDSHAKE_S
    host = f"[{listener.host}]" if ":" in listener.host else listener.host
    config.bind = [f"{host}:{listener.port}"]
    config.accesslog = None  # a scraper every few seconds would flood the log
    config.errorlog = log
    config.graceful_timeout = GRACEFUL_S
    config.keep_alive_timeout = KEEP_ALIVE_S
    config.h11_max_incomplete_size = 64 * 1024
    config.wsgi_max_body_size = MAX_BODY_BYTES
    return config


def port_of(bind: str) -> int:
    """The port of a Hypercorn bind report such as `http://127.0.0.1:8080` or `http://[::1]:80`."""
    return int(bind.rsplit(":", 1)[1])


async def serve_http(
    app: Any,
    listener: HttpListener,
    stop: trio.Event,
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `app` (an ASGI 3 application) on `listener` until `stop` is set; reports the bound
    port once listening (a port in use fails the start with OSError; a profile whose files do
    not load fails it with router.net.tls.TlsError). The listener's ssl_profile is looked up in
    the application's `ssl_profiles()` (the live configuration's)."""
    profile = None
    if listener.ssl_profile is not None:
        profiles = {p.name: p for p in app.ssl_profiles()}
        profile = profiles.get(listener.ssl_profile)
        if profile is None:
            raise ValueError(f"http listener {listener.name!r}: no ssl profile named {listener.ssl_profile!r}")
    config = hypercorn_config(listener, profile)

    async def per_listener(scope: Any, receive: Any, send: Any) -> None:
        await app({**scope, LISTENER_KEY: listener}, receive, send)

    async with trio.open_nursery() as nursery:
        # Hypercorn types its application as a union of ASGI and WSGI callables with TypedDict
        # messages; our application takes plain mappings, which is what it receives.
        binds: list[str] = await nursery.start(
            lambda task_status: serve(cast(Framework, per_listener), config, shutdown_trigger=stop.wait, task_status=task_status)
        )
        port = port_of(binds[0])
        scheme = "https" if profile is not None else "http"
        log.info("http listener %s on %s://%s:%d (authentication: %s)", listener.name, scheme, listener.host, port, listener.authenticate)
        task_status.started(port)
