"""Who may be a router: inter-router listeners with `router_identities` take only the routers of
the network (mutual TLS: the certificate's identity), refuse a client certificate of the same CA
that is not a router, a router claiming another router's id and an anonymous peer, each with
amqp:unauthorized-access, counted on the listener; an open inter-router listener is warned
about at start; and a client never attaches the mesh's own control or data links."""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
import trio

from router.amqp import errors as E
from router.amqp.messaging import Source, Target
from router.config.models import Listener, RouterConfig
from router.core.identity import check_router_identity, warn_open_router_listeners
from router.core.interrouter import CONTROL_CAPABILITY, DATA_CAPABILITY
from router.net.server import RouterServer
from router.testing.routerharness import RouterHarness

from .tlssupport import Pki, make_pki, serving

FAST = {"hello_interval_s": 0.2, "dead_interval_s": 0.8}
CONVERGE_S = 15.0


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


def router_config(pki: Pki, rid: str, connect_to: dict[str, int], *, common_name: str | None = None) -> dict[str, Any]:
    """An interior router whose inter-router links are mutual TLS + EXTERNAL, taking only the
    routers of group `routers` as peers, each under its own id."""
    cert, key = pki.issue("127.0.0.1", stem=f"{rid}-{common_name}", common_name=common_name or rid)
    return {
        "router": {"id": rid, "mode": "interior", **FAST},
        "management": {"groups": {"routers": ["R1", "R2", "R3"]}},
        "ssl_profiles": [{"name": "mesh", "cert_file": cert, "key_file": key, "ca_file": pki.ca_file}],
        "listeners": [
            {"name": "amqp", "port": 0},
            {"name": "inter", "port": 0, "role": "inter-router", "ssl_profile": "mesh", "authenticate_peer": True,
             "sasl_mechanisms": ["EXTERNAL"], "require_sasl": True, "router_identities": ["routers"],
             "router_id_is_identity": True},
        ],
        "connectors": [
            {"name": f"to-{peer}", "host": "127.0.0.1", "port": port, "role": "inter-router", "ssl_profile": "mesh",
             "reconnect_initial_s": 0.1, "reconnect_max_s": 0.3}
            for peer, port in connect_to.items()
        ],
    }  # fmt: skip


def nodes(server: RouterServer) -> set[str]:
    return {node["id"] for node in server.agent.entities("router.node")}


async def wait_for_nodes(server: RouterServer, expected: set[str]) -> None:
    """The mesh has no event to await: HELLOs and link states take a few intervals."""
    with trio.fail_after(CONVERGE_S):
        while nodes(server) < expected:
            await trio.sleep(0.05)


def refused(server: RouterServer, listener: str) -> int:
    return next(x["routersRefused"] for x in server.agent.entities("listener") if x["name"] == listener)


async def wait_refused(server: RouterServer, listener: str, count: int) -> None:
    with trio.fail_after(CONVERGE_S):
        while refused(server, listener) < count:
            await trio.sleep(0.05)


async def test_a_mutual_tls_mesh_takes_its_routers_and_refuses_other_certificates(pki: Pki, caplog: Any) -> None:
    caplog.set_level(logging.WARNING, "router.security")
    async with AsyncExitStack() as stack:
        r1 = await stack.enter_async_context(serving(router_config(pki, "R1", {})))
        p1 = r1.listener_ports()["inter"]
        r2 = await stack.enter_async_context(serving(router_config(pki, "R2", {"R1": p1})))
        r3 = await stack.enter_async_context(serving(router_config(pki, "R3", {"R1": p1, "R2": r2.listener_ports()["inter"]})))
        for server in (r1, r2, r3):
            await wait_for_nodes(server, {"R1", "R2", "R3"})
        # alice's certificate is from the same CA (TLS and EXTERNAL pass) but she is no router.
        alice = await stack.enter_async_context(serving(router_config(pki, "alice", {"R1": p1}, common_name="alice")))
        await wait_refused(r1, "inter", 2)
        # A router of the network cannot claim another's id: R2's certificate, id R9.
        impostor = await stack.enter_async_context(serving(router_config(pki, "R9", {"R1": p1}, common_name="R2")))
        await wait_refused(r1, "inter", 4)
        assert nodes(r1) == {"R1", "R2", "R3"}
        # (a refused connection may be listed, not opened, until its socket closes)
        opened = {c["container"] for c in r1.agent.entities("connection") if c["role"] == "inter-router" and c["opened"]}
        assert opened == {"R2", "R3"}
        assert nodes(alice) == {"alice"} and nodes(impostor) == {"R9"}
        lines = [r.getMessage() for r in caplog.records if r.name == "router.security"]
        assert any("refused" in line and "'alice' is not one of the router identities" in line for line in lines)
        assert any("'R2' may connect only as router 'R2', not as 'R9'" in line for line in lines)
        assert all("127.0.0.1" in line for line in lines if "refused" in line)
        metrics = r1.agent.entities("listener")
        assert next(x for x in metrics if x["name"] == "inter")["routersRefused"] >= 4


async def test_an_anonymous_peer_on_a_router_listener_is_refused() -> None:
    guarded = {
        "router": {"id": "R1", "mode": "interior", **FAST},
        "listeners": [{"name": "inter", "port": 0, "role": "inter-router", "router_identities": ["R2"]}],
    }
    async with AsyncExitStack() as stack:
        r1 = await stack.enter_async_context(serving(guarded))
        anonymous = {
            "router": {"id": "R2", "mode": "interior", **FAST},
            "listeners": [{"name": "amqp", "port": 0}],
            "connectors": [{"name": "up", "host": "127.0.0.1", "port": r1.listener_ports()["inter"],
                            "role": "inter-router", "reconnect_initial_s": 0.1, "reconnect_max_s": 0.3}],
        }  # fmt: skip
        r2 = await stack.enter_async_context(serving(anonymous))
        await wait_refused(r1, "inter", 2)
        assert nodes(r1) == {"R1"}
        # The connector redials: between its TCP connect and the refusal it briefly says SUCCESS.
        # Its last error says how each attempt ended.
        status = r2.connector_status("up")
        assert status is not None and "ended after" in status[1], status


def test_the_identity_check_itself() -> None:
    listener = Listener(name="inter", role="inter-router", router_identities=("routers", "lon"), router_id_is_identity=True)
    groups = {"routers": ("fra",)}
    assert check_router_identity(listener, "fra", "EXTERNAL", "fra", "10.0.0.2:1", groups) is None
    assert check_router_identity(listener, "lon", "SCRAM-SHA-256", "lon", "10.0.0.2:1", groups) is None
    for user, mechanism, claimed in ((None, "ANONYMOUS", "fra"), ("bob", "PLAIN", "bob"), ("fra", "EXTERNAL", "lon")):
        error = check_router_identity(listener, user, mechanism, claimed, "10.0.0.2:1", groups)
        assert error is not None and error.condition == E.UNAUTHORIZED_ACCESS
    # Without router_identities nothing is checked (the loopback test meshes).
    assert check_router_identity(Listener(role="inter-router"), None, "ANONYMOUS", "x", "", {}) is None


def test_an_open_router_listener_on_another_address_is_refused_unless_allowed_then_warned_about(caplog: Any) -> None:
    """Secure by default: a router listener others can reach must say who may be a router, or
    say explicitly (allow_any_router) that anyone passing TLS and SASL may; then it is warned about."""
    with pytest.raises(ValueError, match="would take any peer that reaches it as a router"):
        Listener(name="open", host="0.0.0.0", role="inter-router")
    with pytest.raises(ValueError, match="allow_any_router"):
        Listener(name="edges", host="10.0.0.1", role="edge")
    caplog.set_level(logging.WARNING, "router.security")
    config = RouterConfig.model_validate({
        "router": {"id": "R1", "mode": "interior"},
        "listeners": [
            {"name": "open", "host": "0.0.0.0", "role": "inter-router", "allow_any_router": True},
            {"name": "local", "host": "127.0.0.1", "port": 5673, "role": "inter-router"},
            {"name": "guarded", "host": "0.0.0.0", "port": 5674, "role": "edge", "router_identities": ["edges"]},
        ],
    })  # fmt: skip
    assert warn_open_router_listeners(config) == ["open"]
    assert any("listener open" in r.getMessage() and "router_identities" in r.getMessage() for r in caplog.records)


def test_router_identities_are_for_router_listeners() -> None:
    with pytest.raises(ValueError, match="inter-router and edge listeners"):
        Listener(router_identities=("r1",))
    with pytest.raises(ValueError, match="needs router_identities"):
        Listener(role="inter-router", router_id_is_identity=True)


@pytest.mark.parametrize("capability", [CONTROL_CAPABILITY, DATA_CAPABILITY])
@pytest.mark.parametrize("where", ["target", "source"])
def test_a_client_cannot_attach_the_mesh_links(capability: str, where: str) -> None:
    harness = RouterHarness()
    client = harness.connect()
    assert client.session is not None
    if where == "target":
        link = client.session.attach_sender("r1>r2/control", source=Source(address=None),
                                            target=Target(address=None, capabilities=(capability,)))  # fmt: skip
    else:
        link = client.session.attach_receiver("r2>r1/data", source=Source(address="x", capabilities=(capability,)),
                                              target=Target(address=None))  # fmt: skip
    harness.pump()
    detached = [e for e in client.events if type(e).__name__ == "RemoteDetach" and e.link is link]
    assert detached and detached[0].error is not None
    assert detached[0].error.condition == E.UNAUTHORIZED_ACCESS
    assert capability in detached[0].error.description
    # The connection carries on: an ordinary link still attaches.
    other = client.sender("orders")
    harness.pump()
    assert other.remotely_attached and not any(type(e).__name__ == "RemoteClose" for e in client.events)


async def test_a_proton_peer_claiming_to_be_a_router_and_a_client_attaching_the_mesh_links_are_refused() -> None:
    from proton import ConnectionException, symbol
    from proton.reactor import LinkOption
    from proton.utils import BlockingConnection, LinkDetached

    from .support.interop import run_in_thread

    class MeshTarget(LinkOption):
        def apply(self, link: Any) -> None:
            link.target.capabilities.put_array(False, 21)  # an array of symbols (proton.Data.SYMBOL)
            link.target.capabilities.enter()
            link.target.capabilities.put_symbol(symbol(CONTROL_CAPABILITY))
            link.target.capabilities.exit()

    config = {
        "router": {"id": "R1", "mode": "interior", **FAST},
        "listeners": [{"name": "amqp", "port": 0},
                      {"name": "inter", "port": 0, "role": "inter-router", "router_identities": ["R2"]}],
    }  # fmt: skip
    async with serving(config) as r1:
        ports = r1.listener_ports()

        def scenario() -> dict[str, str]:
            got = {}
            router_like = {symbol("mesh.role"): "inter-router", symbol("mesh.version"): 1}
            try:
                conn = BlockingConnection(f"127.0.0.1:{ports['inter']}", timeout=5, container_id="R2",
                                          properties=router_like, allowed_mechs="ANONYMOUS")  # fmt: skip
                conn.create_receiver("x")
                conn.close()
                got["router"] = "accepted"
            except ConnectionException as exc:
                got["router"] = str(exc)
            conn = BlockingConnection(f"127.0.0.1:{ports['amqp']}", timeout=5)
            try:
                conn.create_sender(None, options=[MeshTarget()])
                got["control link"] = "attached"
            except LinkDetached as exc:
                got["control link"] = str(exc.link.remote_condition.name)
            got["after"] = str(conn.create_sender("orders").link.remote_target.address)
            conn.close()
            return got

        got = await run_in_thread(scenario)
        assert "amqp:unauthorized-access" in got["router"] and "anonymous" in got["router"]
        assert got["control link"] == E.UNAUTHORIZED_ACCESS and got["after"] == "orders"
        assert refused(r1, "inter") == 1


async def test_an_edge_listener_takes_only_its_edge_users() -> None:
    interior = {
        "router": {"id": "I1", "mode": "interior", **FAST},
        "users": [{"username": name, "password": "edge-pw"} for name in ("edge-1", "mallory")],
        "listeners": [{"name": "edges", "port": 0, "role": "edge", "sasl_mechanisms": ["SCRAM-SHA-256"],
                       "require_sasl": True, "router_identities": ["edge-1"], "router_id_is_identity": True}],
    }  # fmt: skip

    def edge(rid: str, user: str, port: int) -> dict[str, Any]:
        return {
            "router": {"id": rid, "mode": "edge", **FAST},
            "listeners": [{"name": "amqp", "port": 0}],
            "connectors": [{"name": "up", "host": "127.0.0.1", "port": port, "role": "edge", "sasl_username": user,
                            "sasl_password": "edge-pw", "reconnect_initial_s": 0.1, "reconnect_max_s": 0.3}],
        }  # fmt: skip

    async with AsyncExitStack() as stack:
        i1 = await stack.enter_async_context(serving(interior))
        port = i1.listener_ports()["edges"]
        await stack.enter_async_context(serving(edge("edge-1", "edge-1", port)))
        await stack.enter_async_context(serving(edge("rogue", "mallory", port)))
        await wait_refused(i1, "edges", 2)
        with trio.fail_after(CONVERGE_S):
            while not [c for c in i1.agent.entities("connection") if c["role"] == "edge" and c["opened"]]:
                await trio.sleep(0.05)
        # (a refused one may be listed, not opened, until its socket closes)
        edges = [(c["container"], c["user"], str(c["sasl"])) for c in i1.agent.entities("connection")
                 if c["role"] == "edge" and c["opened"]]  # fmt: skip
        assert edges == [("edge-1", "edge-1", "SCRAM-SHA-256")]
