"""Routed sessions between two routers are given back once idle (MeshHarness, sans-IO;
router/core/routedreclaim.py): a routed pair towards another router has a session of its own,
reused by a later pair once its pairs went, and ended on both routers once no pair has used it
for a minute. Before, every session a burst of pairs made stayed for the connection's life (up
to 213 a connection, on both routers)."""

from __future__ import annotations

import math

from router.config.models import LinkRouteConfig
from router.core.streamreclaim import IDLE_S, SCAN_S
from router.testing.meshharness import CLIENTS, INTER_ROUTER, MeshHarness
from router.testing.routerharness import Client

from .test_mesh_linkroute import BROKER, send_through
from .test_mesh_streaming_links import _session_counts


def _mesh() -> tuple[MeshHarness, Client, Client]:
    """A - B, the container on B (route `q`, in); a client on A."""
    h = MeshHarness()
    h.router("A")
    h.router("B", listeners=(CLIENTS, INTER_ROUTER, BROKER),
             link_routes=(LinkRouteConfig(prefix="q", direction="in", container_id="broker"),))  # fmt: skip
    h.link("A", "B")
    broker = h.client("B", "broker", listener=BROKER)
    h.converge()
    return h, h.client("A", "producer"), broker


def _pairs(h: MeshHarness, client: Client, broker: Client, names: range) -> None:
    for n in names:
        send_through(h, client, broker, f"q.{n}")


def _detach_all(h: MeshHarness, client: Client) -> None:
    assert client.session is not None
    for link in client.session.links:
        link.detach()
    h.pump()
    assert not h.cores["A"].link_routes.pairs and not h.cores["B"].link_routes.pairs


def test_routed_sessions_no_pair_used_for_a_minute_end_on_both_routers() -> None:
    h, client, broker = _mesh()
    baseline = _session_counts(h)
    peer = h.cores["A"].mesh.peers["B"]
    _pairs(h, client, broker, range(5))
    assert _session_counts(h) == (baseline[0] + 5, baseline[1] + 5)  # a session each
    _detach_all(h, client)
    h.advance(IDLE_S - 1)  # (idle from the last pair's detach: not yet)
    assert _session_counts(h) == (baseline[0] + 5, baseline[1] + 5)
    h.advance(SCAN_S + 2)
    assert _session_counts(h) == baseline  # ended, and the end answered
    assert h.cores["A"].mesh.peers["B"] is peer  # the connection between them stays up
    assert h.cores["A"].link_routes.link_pairs.idle_sessions.deadline == math.inf  # no timer left
    _pairs(h, client, broker, range(5, 7))  # later pairs begin sessions again
    assert _session_counts(h) == (baseline[0] + 2, baseline[1] + 2)


def test_a_routed_session_a_pair_used_again_within_the_minute_stays() -> None:
    h, client, broker = _mesh()
    baseline = _session_counts(h)
    _pairs(h, client, broker, range(1))
    _detach_all(h, client)
    h.advance(IDLE_S / 2)
    _pairs(h, client, broker, range(1, 2))  # the same session, handed to another pair
    _detach_all(h, client)
    h.advance(IDLE_S / 2 + SCAN_S + 2)  # a minute and more since the first pair went
    assert _session_counts(h) == (baseline[0] + 1, baseline[1] + 1)
    h.advance(IDLE_S / 2 + SCAN_S)  # a minute and more since the second
    assert _session_counts(h) == baseline


def test_routed_sessions_towards_a_router_of_mesh_version_1_stay() -> None:
    # Such a router takes a session ended between routers for a broken connection.
    h, client, broker = _mesh()
    h.cores["A"].mesh.peers["B"].version = 1
    baseline = _session_counts(h)
    _pairs(h, client, broker, range(3))
    _detach_all(h, client)
    h.advance(3 * IDLE_S)
    assert _session_counts(h) == (baseline[0] + 3, baseline[1] + 3)
