"""Real routers for tests: `router run` as a subprocess, and an in-process RouterServer.

    with RouterProcess.running(tmp_path, {"listeners": [{"name": "amqp", "port": 0}]}) as router:
        port = router.ports["amqp"]
    # leaving the block sends SIGTERM and asserts exit code 0 (a hung router is killed)

    async def test_x(router_server):          # trio fixture: (RouterServer, port), 127.0.0.1:0
        server, port = router_server

`core_ready()` says whether the routing core can route a message yet (tests that depend on it
are marked `skipif(not core_ready())`).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import trio

from router.amqp.message import Message
from router.config.models import Listener, RouterConfig, RouterSection
from router.net.client import connect
from router.net.server import RouterServer
from router.testing.processes import (  # noqa: F401  (the process harness, re-exported for tests)
    LISTENING,
    ROOT,
    START_TIMEOUT_S,
    STOP_TIMEOUT_S,
    RouterProcess,
    router_command,
    router_env,
)


# --- in process ------------------------------------------------------------------------------------


def router_config(**listener: Any) -> RouterConfig:
    """The default configuration with one listener on 127.0.0.1:0 (`listener` overrides)."""
    return RouterConfig(
        router=RouterSection(id="test-router"),
        listeners=(Listener(host="127.0.0.1", port=0, **listener),),
    )


@pytest.fixture
async def router_server(nursery: trio.Nursery) -> AsyncIterator[tuple[RouterServer, int]]:
    """A RouterServer on 127.0.0.1 (ephemeral port), stopped gracefully after the test."""
    server = RouterServer(router_config())
    addresses = await nursery.start(server.run)
    yield server, addresses[0][2]
    server.shutdown()
    with trio.fail_after(5):
        await server.wait_stopped()


@functools.cache
def core_ready() -> bool:
    """Whether the routing core imports and routes one message from a sender to a receiver."""
    async def probe() -> bool:
        server = RouterServer(router_config())
        async with trio.open_nursery() as nursery:
            port = (await nursery.start(server.run))[0][2]
            with trio.move_on_after(5):
                async with connect("127.0.0.1", port) as client:
                    receiver = await client.open_receiver("probe", credit=1)
                    sender = await client.open_sender("probe")
                    tracker = await sender.start_send(Message.value("probe"))
                    delivery = await receiver.receive()
                    receiver.accept(delivery)
                    await tracker.wait()
                    ok = delivery.message.body_value == "probe"
                    server.shutdown()
                    return ok
            server.shutdown()
        return False

    try:
        return trio.run(probe)
    except Exception:  # not importable yet, or broken: the tests that need it are skipped
        return False


def logged_problems(lines: list[str]) -> list[str]:
    """The lines of a router's log that must fail a test: tracebacks, errors, critical ones."""
    return [line for line in lines if "Traceback" in line or " ERROR " in line or " CRITICAL " in line]


def watched(router: RouterProcess) -> Iterator[RouterProcess]:
    """`router` (a module's shared router process) for one test, which fails if the router
    logged an error meanwhile: `yield from watched(shared_router)` in a function fixture."""
    assert router.proc is not None and router.proc.poll() is None, router.output
    before = len(router.stderr)
    yield router
    assert not logged_problems(router.stderr[before:]), router.output
