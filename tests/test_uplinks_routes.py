"""An edge router's knowledge of the mesh's link routes (router.core.uplinks, `_sync_routes`), as a
state machine (hypothesis): uplinks come and go and say, in MESH-ADDRESSES (whole sets and
changes, in sequence), which link routes the mesh serves. What the edge's link routes are given
must always be: the routes the uplink in use last said, through it; while it has said nothing
yet, the routes known before, through it; with no uplink, the routes known before, through the
uplink they came by (an attach is refused, not taken for a mobile address's)."""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from router.config.models import RouterConfig, RouterSection
from router.core.addressentry import AddressEntry
from router.core.edgemsg import MeshAddresses
from router.core.linkmatch import MARK
from router.core.paths import Paths
from router.core.table import AddressTable
from router.core.uplinks import Uplinks
from topology.routes import compute_routes

UPLINKS = ("A", "B", "C")
KEYS = tuple(f"{MARK}in/p/q{n}" for n in range(4)) + ("orders", "jobs")  # route keys and mobile addresses


class _Routes:
    """What the edge's link routes are told (LinkRoutes.remote_changed)."""

    def __init__(self) -> None:
        self.known: dict[str, frozenset[str]] = {}

    def remote_changed(self, key: str, routers: frozenset[str]) -> None:
        if routers:
            self.known[key] = routers
        else:
            self.known.pop(key, None)

    def advertised_keys(self) -> list[str]:
        return []


class _Peer:
    def __init__(self, peer_id: str) -> None:
        self.id = peer_id
        self.data_out: Any = object()


class _Mesh:
    """The parts of router.core.mesh.Mesh that Uplinks uses (ports.EdgeMesh)."""

    def __init__(self, table: AddressTable) -> None:
        self.me = "E"
        self.edge = True
        self.dirty = False
        self.routes = compute_routes({}, "E")
        self.links: dict[str, Any] = {}
        self.paths = Paths(table)
        self.last_change: float | None = None
        self.link_routes = _Routes()
        self.sent: list[tuple[str, bytes]] = []

    def send_control(self, peer: Any, payload: bytes) -> None:
        self.sent.append((peer.id, payload))

    def remote_for(self, key: str) -> frozenset[str]:
        return frozenset()

    def set_remote(self, entry: AddressEntry, routers: frozenset[str]) -> None:
        entry.remote = routers


class EdgeRoutes(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        table = AddressTable(RouterConfig(router=RouterSection(id="E", mode="edge")))
        self.mesh = _Mesh(table)
        self.connections: dict[str, Any] = {}
        self.uplinks = Uplinks(self.mesh, table, self.connections, retry_s=1.0)  # type: ignore[arg-type]
        self.now = 0.0
        # The model: what each uplink last said (routes only), and what the edge knows.
        self.said: dict[str, set[str]] = {}
        self.seq: dict[str, int] = {}
        self.known: dict[str, str] = {}  # route key -> the uplink it is known through
        self.via: str | None = None

    def _active(self) -> str | None:
        return next(iter(self.connections), None)

    def _follow(self) -> None:
        """The model's rule: the uplink in use, if it has said, decides; otherwise the routes known
        stay, through it if there is one."""
        active = self._active()
        if active is None:
            return
        if active in self.said:
            self.known = {key: active for key in self.said[active]}
        else:
            self.known = {key: active for key in self.known}

    @rule(uplink=st.sampled_from(UPLINKS))
    def up(self, uplink: str) -> None:
        if uplink in self.connections:
            return
        self.connections[uplink] = _Peer(uplink)
        self.said.pop(uplink, None)
        self.seq[uplink] = 0
        self.uplinks.changed(uplink, self.now)
        self._follow()

    @rule(uplink=st.sampled_from(UPLINKS))
    def down(self, uplink: str) -> None:
        if self.connections.pop(uplink, None) is None:
            return
        self.said.pop(uplink, None)
        self.uplinks.changed(uplink, self.now)
        self._follow()

    @rule(uplink=st.sampled_from(UPLINKS), keys=st.sets(st.sampled_from(KEYS)))
    def says_all(self, uplink: str, keys: set[str]) -> None:
        peer = self.connections.get(uplink)
        if peer is None:
            return
        self.seq[uplink] += 1
        self.uplinks.on_mesh_addresses(peer, MeshAddresses(self.seq[uplink], True, sorted(keys), []), self.now)
        self.said[uplink] = {key for key in keys if key.startswith(MARK)}
        self._follow()

    @rule(uplink=st.sampled_from(UPLINKS), add=st.sets(st.sampled_from(KEYS)), remove=st.sets(st.sampled_from(KEYS)))
    def says_changes(self, uplink: str, add: set[str], remove: set[str]) -> None:
        peer = self.connections.get(uplink)
        if peer is None or uplink not in self.said:
            return  # (a change before the whole set is ignored and asked again: not modelled here)
        remove = remove - add
        self.seq[uplink] += 1
        self.uplinks.on_mesh_addresses(peer, MeshAddresses(self.seq[uplink], False, sorted(add), sorted(remove)), self.now)
        self.said[uplink] = (self.said[uplink] - remove) | {key for key in add if key.startswith(MARK)}
        self._follow()

    @invariant()
    def the_edge_knows_what_the_model_says(self) -> None:
        assert self.mesh.link_routes.known == {key: frozenset((via,)) for key, via in self.known.items()}


EdgeRoutes.TestCase.settings = settings(max_examples=300, stateful_step_count=30, deadline=None)
test_edge_routes = EdgeRoutes.TestCase
