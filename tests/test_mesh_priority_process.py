"""Priorities across router processes with python-qpid-proton clients at the ends
(docs/mesh.md, "Priorities"): Message(priority=...) of every level crosses A - B - C on its
band's data link and every outcome reaches the sender; C runs with one data link per direction
(router.priority_bands 1, as a router without bands) and still takes B's band links."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from proton import Message

from router.config.models import PRIORITY_BANDS_DEFAULT
from router.core.paths import band_of
from router.testing.meshprocs import MeshProcesses

from .test_mesh_process import Scenario, run_handler

pytestmark = [pytest.mark.interop, pytest.mark.process]

PER_LEVEL = 10


class EveryLevel(Scenario):
    """PER_LEVEL messages of each priority 0-9 from A to C, and as many to `alerts` (whose
    address rule on A says priority 9) at priority 0; the sender records each outcome."""

    def __init__(self, mesh: MeshProcesses) -> None:
        super().__init__(mesh)
        self.plan = [("levels", p) for p in range(10) for _ in range(PER_LEVEL)] + [("alerts", 0)] * PER_LEVEL
        self.outcomes: Counter[str] = Counter()
        self.received: Counter[tuple[str, int]] = Counter()
        self.receivers = 0
        self.senders: dict[str, Any] = {}
        self.sent = {"levels": 0, "alerts": 0}

    def on_start(self, event: Any) -> None:
        at_c = self.connect(event.container, "C")
        for address in ("levels", "alerts"):
            event.container.create_receiver(at_c, address)
        at_a = self.connect(event.container, "A")
        for address in ("levels", "alerts"):
            self.senders[address] = event.container.create_sender(at_a, address)

    def on_sendable(self, event: Any) -> None:
        address = event.sender.target.address
        todo = [p for a, p in self.plan if a == address]
        while event.sender.credit and self.sent[address] < len(todo):
            priority = todo[self.sent[address]]
            event.sender.send(Message(body=[address, priority], priority=priority))
            self.sent[address] += 1

    def on_message(self, event: Any) -> None:
        address, priority = event.message.body
        self.received[(address, event.message.priority)] += 1

    def on_accepted(self, event: Any) -> None:
        self._outcome("accepted")

    def on_rejected(self, event: Any) -> None:
        self._outcome("rejected")

    def on_released(self, event: Any) -> None:
        self._outcome("released")

    def _outcome(self, name: str) -> None:
        self.outcomes[name] += 1
        if sum(self.outcomes.values()) == len(self.plan):
            self.finish()


def _by_name(links: list[dict[str, Any]], prefix: str) -> dict[str, int]:
    return {link["name"]: link["deliveryCount"] for link in links if str(link["name"]).startswith(prefix)}


async def test_every_level_crosses_processes_on_its_band_beside_a_router_with_one_link(tmp_path: Path) -> None:
    timers = {"hello_interval_s": 0.2, "dead_interval_s": 0.8}
    extra = {
        "A": {"addresses": [{"prefix": "alerts", "priority": 9}]},
        "C": {"router": {"id": "C", "mode": "interior", "priority_bands": 1, **timers}},
    }
    with MeshProcesses(tmp_path, "A-B B-C", extra=extra, **timers) as mesh:
        await mesh.wait_converged()
        scenario = EveryLevel(mesh)
        await run_handler(scenario)
        assert not scenario.errors
        assert scenario.outcomes == {"accepted": len(scenario.plan)}
        # the consumer sees each message's own header priority (the router does not rewrite it)
        assert scenario.received == Counter({("levels", p): PER_LEVEL for p in range(10)} | {("alerts", 0): PER_LEVEL})
        bands = PRIORITY_BANDS_DEFAULT
        default = band_of(4, bands)

        def name(sender: str, receiver: str, band: int) -> str:
            return f"{sender}>{receiver}/data" if band == default else f"{sender}>{receiver}/data.{band}"

        expected: Counter[str] = Counter()
        for _, p in scenario.plan[: 10 * PER_LEVEL]:
            expected[str(band_of(p, bands))] += 1
        expected[str(bands - 1)] += PER_LEVEL  # the alerts: the address's priority 9 on A
        at_b = _by_name(await mesh.ask("A", "B", "org.apache.qpid.dispatch.router.link"), "A>B/data")
        # (the default band also carries the management queries of this test: default priority)
        default_link = name("A", "B", default)
        assert at_b.pop(default_link) >= expected.pop(str(default))
        assert at_b == {name("A", "B", int(band)): count for band, count in expected.items()}
        # B -> C: B has bands (C takes them all); the alerts are priority 0 again there (B has no rule)
        at_c = _by_name(await mesh.ask("A", "C", "org.apache.qpid.dispatch.router.link"), "B>C/data")
        assert at_c[name("B", "C", bands - 1)] == 2 * PER_LEVEL  # priorities 8 and 9
        assert at_c[name("B", "C", 0)] == 4 * PER_LEVEL  # 0-2 and the alerts
        # C sends on one data link to B (its own choice: one band)
        links_of_c = await mesh.ask("A", "C", "org.apache.qpid.dispatch.router.link")
        assert set(_by_name(links_of_c, "C>B/data")) == {"C>B/data"}
