"""A consumer that stops reading stops only its message's priority band between router
processes (docs/mesh.md, "Priorities", *One band stops, not the connection*): python-qpid-proton
clients, `router run` processes A - B on loopback. The stalled consumer on B is a Proton
BlockingConnection that attaches and then never reads its socket again, while an 8 MiB message
streams to it from A: B holds the frames its socket does not take, shuts that band's session
window at A and keeps reading A. A priority-9 message to another consumer on B arrives
meanwhile (before, B stopped reading A altogether and it waited as long as the consumer did:
the stall and idle time-outs are off here). Management on B says which band it stopped; once the consumer
goes, B holds nothing and every band is open again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from proton import Message
from proton.utils import BlockingConnection

from router.testing.meshprocs import MeshProcesses

from .test_mesh_process import Scenario, run_handler

pytestmark = [pytest.mark.interop, pytest.mark.process]

BIG = bytes(8 * 1024 * 1024)
CONNECTION = "org.apache.qpid.dispatch.connection"
ROUTER = "org.apache.qpid.dispatch.router"


class OvertakeTheStall(Scenario):
    """From A: the big message to `big` (default priority), then, once B has stopped that band,
    one priority-9 message to `urgent`, received by a consumer on B."""

    def __init__(self, mesh: MeshProcesses, band_stopped: Any) -> None:
        super().__init__(mesh)
        self.band_stopped = band_stopped
        self.big_sent = False
        self.urgent_sent = False
        self.urgent_received: list[Any] = []
        self.outcomes: dict[str, str] = {}

    def on_start(self, event: Any) -> None:
        event.container.create_receiver(self.connect(event.container, "B"), "urgent")
        at_a = self.connect(event.container, "A")
        self.big = event.container.create_sender(at_a, "big")
        self.urgent = event.container.create_sender(at_a, "urgent")

    def on_sendable(self, event: Any) -> None:
        address = event.sender.target.address
        if address == "big" and not self.big_sent:
            self.big_sent = True
            event.sender.send(Message(body=BIG))
            event.container.schedule(0.1, self)
        elif address == "urgent" and self.big_sent and not self.urgent_sent and self.band_stopped():
            self.urgent_sent = True
            event.sender.send(Message(body="now", priority=9))

    def on_timer_task(self, event: Any) -> None:
        if self.urgent_sent:
            return
        if self.band_stopped() and self.urgent.credit:
            self.urgent_sent = True
            self.urgent.send(Message(body="now", priority=9))
        else:
            event.container.schedule(0.1, self)

    def on_message(self, event: Any) -> None:
        self.urgent_received.append(event.message.body)

    def on_accepted(self, event: Any) -> None:
        self.outcomes[event.link.target.address] = "accepted"
        if event.link.target.address == "urgent":
            self.finish()

    def on_rejected(self, event: Any) -> None:
        self.outcomes[event.link.target.address] = "rejected"

    def on_released(self, event: Any) -> None:  # (modified too)
        self.outcomes[event.link.target.address] = "released or modified"


async def test_an_urgent_message_overtakes_a_consumer_that_stopped_reading(tmp_path: Path) -> None:
    timers = {"hello_interval_s": 0.2, "dead_interval_s": 0.8}
    # B's client listener: small buffers below the router, so that the stalled consumer's socket
    # takes little of the message before B holds the rest; no stall time-out, and no idle
    # time-out for the consumer that sends nothing. Between the routers a byte bound of 1 MiB,
    # well below the message.
    small = {"socket_buffer_bytes": 65536, "write_high_water_bytes": 65536, "stalled_stream_timeout_s": 0,
             "idle_timeout_s": 0}
    extra = {"B": {"listeners": [{"name": "amqp", "host": "127.0.0.1", "port": 0, **small}]}}
    with MeshProcesses(tmp_path, "A-B", extra=extra, inter_router={"read_high_water_bytes": 1 << 20}, **timers) as mesh:
        await mesh.wait_converged()
        link_to_a = [c["identity"] for c in await mesh.ask("B", "B", CONNECTION) if c["role"] == "inter-router"]
        stalled = BlockingConnection(f"127.0.0.1:{mesh.port('B')}")
        try:
            stalled.create_receiver("big", credit=10)  # then never read again
            stopped = trio.Event()

            async def watch() -> None:
                """Until B stops taking the big message from A: its band (or, as before, the
                whole connection)."""
                with trio.fail_after(20):
                    while True:
                        router = (await mesh.ask("B", "B", ROUTER))[0]
                        connections = await mesh.ask("B", "B", CONNECTION)
                        if router["pausedConnectionCount"] or any(c["shutWindows"] for c in connections):
                            break
                        await trio.sleep(0.1)
                stopped.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch)
                scenario = OvertakeTheStall(mesh, stopped.is_set)
                await run_handler(scenario)
            assert not scenario.errors
            assert scenario.urgent_received == ["now"]
            assert scenario.outcomes == {"urgent": "accepted"}  # the big one still streams to its stalled consumer
            inter = [c for c in await mesh.ask("B", "B", CONNECTION) if c["role"] == "inter-router"]
            assert [c["identity"] for c in inter] == link_to_a  # (the same connection all along)
            assert [c["shutWindows"] for c in inter] == [1]
            assert (await mesh.ask("B", "B", ROUTER))[0]["pausedConnectionCount"] == 0
        finally:
            stalled.close()  # reads what waited for it
        with trio.fail_after(20):
            while any(c["shutWindows"] or c["heldFrameBytes"] for c in await mesh.ask("B", "B", CONNECTION)):
                await trio.sleep(0.1)
