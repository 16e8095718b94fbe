"""TLS between routers: a mesh of three routers whose inter-router links are mutual TLS with SASL
EXTERNAL passes messages with their outcomes; a router with a certificate from another CA never
joins; a connector checks the peer's host name (verify_hostname, on by default)."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
import trio
import trustme

from router.amqp.message import Message
from router.net.client import connect
from router.net.server import RouterServer

from .tlssupport import Pki, make_pki, serving

FAST = {"hello_interval_s": 0.2, "dead_interval_s": 0.8}
CONVERGE_S = 15.0
TIMEOUT_S = 10.0


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


def router_config(pki: Pki, rid: str, connect_to: dict[str, int], ca: trustme.CA | None = None) -> dict[str, Any]:
    """An interior router whose inter-router listener and connectors are mutual TLS + EXTERNAL."""
    cert, key = pki.issue("127.0.0.1", stem=rid, ca=ca, common_name=rid)
    return {
        "router": {"id": rid, "mode": "interior", **FAST},
        "ssl_profiles": [{"name": "mesh", "cert_file": cert, "key_file": key, "ca_file": pki.ca_file}],
        "listeners": [
            {"name": "amqp", "port": 0},
            {"name": "inter", "port": 0, "role": "inter-router", "ssl_profile": "mesh", "authenticate_peer": True,
             "sasl_mechanisms": ["EXTERNAL"], "require_sasl": True},
        ],
        "connectors": [
            {"name": f"to-{peer}", "host": "127.0.0.1", "port": port, "role": "inter-router", "ssl_profile": "mesh",
             "reconnect_initial_s": 0.1, "reconnect_max_s": 0.5}
            for peer, port in connect_to.items()
        ],
    }  # fmt: skip


async def wait_for_nodes(server: RouterServer, expected: set[str]) -> None:
    """The mesh has no event to await: HELLOs and link states take a few intervals."""
    with trio.fail_after(CONVERGE_S):
        while {node["id"] for node in server.agent.entities("router.node")} < expected:
            await trio.sleep(0.05)


def inter_router(server: RouterServer) -> list[dict[str, Any]]:
    return [c for c in server.agent.entities("connection") if c["role"] == "inter-router"]


async def test_three_routers_over_mutual_tls_pass_messages_with_outcomes(pki: Pki) -> None:
    async with AsyncExitStack() as stack:
        r1 = await stack.enter_async_context(serving(router_config(pki, "R1", {})))
        p1 = r1.listener_ports()["inter"]
        r2 = await stack.enter_async_context(serving(router_config(pki, "R2", {"R1": p1})))
        r3 = await stack.enter_async_context(serving(router_config(pki, "R3", {"R1": p1, "R2": r2.listener_ports()["inter"]})))
        for server in (r1, r2, r3):
            await wait_for_nodes(server, {"R1", "R2", "R3"})
        ins = sorted((c["container"], c["sasl"], c["user"], c["isEncrypted"]) for c in inter_router(r1) if c["dir"] == "in")
        assert ins == [("R2", "EXTERNAL", "R2", True), ("R3", "EXTERNAL", "R3", True)]
        assert all(c["isEncrypted"] and c["sslProto"] for c in inter_router(r3))
        with trio.fail_after(CONVERGE_S):
            async with connect("127.0.0.1", r3.listener_ports()["amqp"]) as consumer, \
                    connect("127.0.0.1", r1.listener_ports()["amqp"]) as producer:  # fmt: skip
                receiver = await consumer.open_receiver("across", credit=100)
                sender = await producer.open_sender("across")
                # Until R1 has learnt the consumer on R3, a delivery comes back released.
                while True:
                    tracker = await sender.start_send(Message.value("probe"))
                    delivery = await _receive_or_none(receiver)
                    if delivery is not None:
                        receiver.accept(delivery)
                        assert type(await tracker.wait()).__name__ == "Accepted"
                        break
                    assert type(await tracker.wait()).__name__ in ("Released", "Modified")
                trackers = [await sender.start_send(Message.value(i)) for i in range(20)]
                bodies = []
                for _ in trackers:
                    delivery = await receiver.receive()
                    bodies.append(delivery.message.body.value)
                    receiver.accept(delivery)
                assert sorted(bodies) == list(range(20))
                assert {type(await t.wait()).__name__ for t in trackers} == {"Accepted"}


async def _receive_or_none(receiver: Any) -> Any:
    with trio.move_on_after(0.2):
        return await receiver.receive()
    return None


async def test_a_router_with_a_certificate_from_another_ca_never_joins(pki: Pki) -> None:
    async with AsyncExitStack() as stack:
        r1 = await stack.enter_async_context(serving(router_config(pki, "R1", {})))
        rogue_config = router_config(pki, "ROGUE", {"R1": r1.listener_ports()["inter"]}, ca=trustme.CA())
        rogue = await stack.enter_async_context(serving(rogue_config))
        with trio.fail_after(TIMEOUT_S):
            while rogue._connectors.status("to-R1").attempts < 3:  # type: ignore[union-attr]
                await trio.sleep(0.05)
        assert "ROGUE" not in {node["id"] for node in r1.agent.entities("router.node")}
        assert inter_router(r1) == []


@pytest.mark.parametrize("verify", [True, False])
async def test_a_connector_checks_the_peers_host_name(pki: Pki, verify: bool) -> None:
    wrong_cert, wrong_key = pki.issue("wrong.example", stem="wrong", common_name="R1")
    r1_config = router_config(pki, "R1", {})
    r1_config["ssl_profiles"][0].update(cert_file=wrong_cert, key_file=wrong_key)
    async with AsyncExitStack() as stack:
        r1 = await stack.enter_async_context(serving(r1_config))
        r2_config = router_config(pki, "R2", {"R1": r1.listener_ports()["inter"]})
        r2_config["connectors"][0]["verify_hostname"] = verify
        r2 = await stack.enter_async_context(serving(r2_config))
        if verify:
            with trio.fail_after(TIMEOUT_S):
                while (status := r2.connector_status("to-R1")) is None or status[0] != "FAILED":
                    await trio.sleep(0.05)
            assert "TLS with 127.0.0.1" in status[1] and "mismatch" in status[1]
            assert inter_router(r1) == []
        else:
            await wait_for_nodes(r2, {"R1", "R2"})
