"""Serving an ASGI application on an HTTP listener with Hypercorn's trio worker.

    port = await nursery.start(serve_http, app, listener, stop)   # stop: a trio.Event

Owns: the Hypercorn settings (bind address, logging through our `router.http` logger, no
access log, short graceful shutdown) and reporting the bound port. HTTP parsing, keep-alive and
HTTP/2 are Hypercorn's; what is served is the application's (router.management.http).
Must not touch: the router's state (the application reads it through the management agent).
"""

from __future__ import annotations

import logging
from typing import Any, cast

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from hypercorn.typing import Framework

from ..config.models import HttpListener

# Requests in progress when the router stops get this long to finish. Management requests
# answer at once (the agent is synchronous) and idle keep-alive connections are closed by
# Hypercorn as soon as it stops, so this bounds only a slow client.
GRACEFUL_S = 1.0
KEEP_ALIVE_S = 5.0
MAX_BODY_BYTES = 1024 * 1024  # management bodies are small maps

log = logging.getLogger("router.http")


def hypercorn_config(listener: HttpListener) -> Config:
    config = Config()
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
    port once listening (a port in use fails the start with OSError)."""
    config = hypercorn_config(listener)
    async with trio.open_nursery() as nursery:
        # Hypercorn types its application as a union of ASGI and WSGI callables with TypedDict
        # messages; our application takes plain mappings, which is what it receives.
        binds: list[str] = await nursery.start(
            lambda task_status: serve(cast(Framework, app), config, shutdown_trigger=stop.wait, task_status=task_status)
        )
        port = port_of(binds[0])
        log.info("http listener %s on %s:%d", listener.name, listener.host, port)
        task_status.started(port)
