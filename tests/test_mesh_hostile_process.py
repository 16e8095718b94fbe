"""Hostile and broken neighbours, with `router run` processes on loopback: a router frozen with
SIGSTOP on the path (traffic moves over after the dead interval, not the idle time-out), and a
stranger claiming a connected router's id on an inter-router listener (refused; the real
router's connection is untouched)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from router.amqp.connection import Connection, ConnectionConfig
from router.amqp.events import RemoteClose, TransportClosed
from router.amqp.performatives import Error
from router.amqp.sasl import SaslClientConfig
from router.core.interrouter import COST_PROPERTY, ROLE_PROPERTY, VERSION_PROPERTY
from router.net.client import connect
from router.net.management_client import management_session

from router.testing.meshprocs import MeshProcesses
from .test_mesh_process import KillMidStream, run_handler

pytestmark = [pytest.mark.interop, pytest.mark.process]

CONNECTION = "org.apache.qpid.dispatch.connection"


class UntilLast(KillMidStream):
    """KillMidStream, noting when the last message was accepted."""

    last_accept: float | None = None

    def on_accepted(self, event: Any) -> None:
        self.last_accept = time.monotonic()
        super().on_accepted(event)


async def test_a_frozen_router_on_the_path_holds_traffic_for_the_dead_interval_only(tmp_path: Path) -> None:
    # hello 0.2 s, dead interval 0.8 s; the idle time-out stays at its default (16 s)
    with MeshProcesses(tmp_path, "A-B B-C C-D D-A") as mesh:
        await mesh.wait_converged()
        (c_from_a,) = [n for n in await mesh.nodes("A") if n["id"] == "C"]
        assert c_from_a["nextHop"] == "B"
        proc = mesh.processes["B"].proc
        assert proc is not None

        def freeze() -> None:
            os.kill(proc.pid, signal.SIGSTOP)

        scenario = UntilLast(mesh, total=1000, kill_after=200, kill=freeze)
        try:
            await run_handler(scenario, timeout_s=30)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        assert not scenario.errors
        assert scenario.accepted == set(range(1000)), "every message was accepted in the end"
        assert scenario.killed_at is not None and scenario.first_accept_after_kill is not None
        # The last message held on the path through B is reported (modified) and sent again
        # through D after about the dead interval, not the idle time-out.
        assert scenario.last_accept is not None
        assert scenario.last_accept - scenario.killed_at < 6.0, "held until the idle time-out"
        (c_now,) = [n for n in await mesh.nodes("A") if n["id"] == "C"]
        assert c_now["nextHop"] == "D"


async def _claim(port: int, router_id: str) -> Error | None:
    """Open an inter-router connection claiming `router_id`; the error the router closes it with."""
    engine = Connection(ConnectionConfig(container_id=router_id,
                                         sasl_client=SaslClientConfig(mechanisms=("ANONYMOUS",), hostname="127.0.0.1")))  # fmt: skip
    engine.open(properties={ROLE_PROPERTY: "inter-router", VERSION_PROPERTY: 1, COST_PROPERTY: 1})
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    try:
        with trio.fail_after(10):
            while True:
                data = engine.data_to_send()
                if data:
                    await stream.send_all(data)
                chunk = await stream.receive_some(65536)
                engine.receive_data(chunk, time.monotonic())
                for event in engine.events():
                    if isinstance(event, RemoteClose):
                        return event.error
                    if isinstance(event, TransportClosed):
                        return None
    finally:
        await stream.aclose()


async def _inter_router_connections(port: int) -> list[dict[str, Any]]:
    async with connect("127.0.0.1", port) as client, management_session(client) as mgmt:
        return [c for c in await mgmt.query_dicts(CONNECTION) if c["role"] == "inter-router" and c["operStatus"] == "up"]


async def test_a_stranger_claiming_a_connected_routers_id_is_refused(tmp_path: Path) -> None:
    with MeshProcesses(tmp_path, "A-B") as mesh:  # B dials A's inter-router listener
        await mesh.wait_converged()
        (before,) = await _inter_router_connections(mesh.port("A"))
        assert before["container"] == "B"
        for _ in range(3):
            error = await _claim(mesh.ports["A"]["inter"], "B")
            assert error is not None and error.condition == "amqp:invalid-field"
            assert "router B is already connected" in (error.description or "")
        (after,) = await _inter_router_connections(mesh.port("A"))
        assert after["identity"] == before["identity"], "the real router's connection was replaced"
        await mesh.wait_converged()
        (b_from_a,) = [n for n in await mesh.nodes("A") if n["id"] == "B"]
        assert b_from_a["nextHop"] == "B"
