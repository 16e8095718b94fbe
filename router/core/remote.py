"""Choosing paths to other routers for one delivery (docs/mesh.md, "Forwarding rules").

Owns: the decisions, as functions of the routes (topology.routes.Routes), the delivery's router
annotations and the inter-router data links:
- anycast `closest`: the lowest-cost router with consumers (round robin among equal costs);
  `balanced`: the lowest (path cost + this address's unsettled deliveries on that link);
- multicast: one copy per distinct next hop over the routers with consumers;
- loop prevention (reference §2.8): never back to the neighbour it came from nor to a router in
  its trace; a delivery from another router goes only to destinations for which its ingress
  router is a valid origin, and for multicast only when it came through the neighbour the
  ingress's canonical path uses (`Routes.upstream`), which makes copies exactly-once even on
  redundant meshes; local delivery of a multicast copy is checked the same way.
Must not touch: sending (forwarding.py), message bytes, the protocol.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .delivery import Forward, Meta
from .links import OutLink

if TYPE_CHECKING:
    from .mesh import Mesh

Choice = tuple[OutLink, int, bool]  # (data link, value, it can take a delivery now)


def usable(out: OutLink) -> bool:
    return out.link.credit > 0 and out.streaming is None and not out.conn.output_blocked and not out.gone


def _origin(meta: Meta | None) -> tuple[str | None, str | None, tuple[str, ...]]:
    """(ingress router, neighbour it came from, trace); the ingress is None when the delivery
    entered the mesh here (from a client, or from an edge router: then it came from that edge)."""
    if meta is None:
        return None, None, ()
    return meta.ingress, meta.came_from, meta.trace


def anycast(mesh: Mesh, fwd: Forward, balanced: bool) -> Choice | None:
    """The best path to another router for `fwd`, or None when there is none."""
    entry = fwd.entry
    routes, links = mesh.routes, mesh.links
    ingress, came_from, trace = _origin(fwd.meta)
    candidates: list[tuple[int, str, OutLink]] = []
    fallback: list[tuple[int, str, OutLink]] = []
    for router in entry.remote:
        hop = routes.next_hops.get(router)
        if hop is None or hop == came_from or hop in trace:
            continue
        out = links.get(hop)
        if out is None or out.gone:  # the peer may end the data link's session: then no path
            continue
        cost = routes.costs[router]
        if ingress is not None and not routes.is_valid_origin(router, ingress):
            fallback.append((cost, router, out))
            continue
        candidates.append((cost, router, out))
    if not candidates:
        # As skupper-router: when no destination is valid for the ingress (routes are changing),
        # any router holding the address will do (trace and came-from still exclude loops).
        candidates = fallback
        if not candidates:
            return None
    if not balanced:
        candidates.sort()
        best = [c for c in candidates if c[0] == candidates[0][0]]
        cost, _, out = best[entry.rr % len(best)]
        entry.rr += 1
        return out, cost, usable(out)
    counts = entry.remote_out
    choice: Choice | None = None
    for cost, _, out in sorted(candidates):
        value = cost + counts.get(out, 0)
        ok = usable(out)
        if choice is None or (ok and not choice[2]) or (ok == choice[2] and value < choice[1]):
            choice = (out, value, ok)
    return choice


def multicast(mesh: Mesh, fwd: Forward) -> list[OutLink]:
    """The data links to send a multicast copy on: one per distinct next hop."""
    routes, links = mesh.routes, mesh.links
    ingress, came_from, trace = _origin(fwd.meta)
    hops: set[str] = set()
    for router in fwd.entry.remote:
        hop = routes.next_hops.get(router)
        if hop is None or hop in hops or hop == came_from or hop in trace:
            continue
        if ingress is not None and routes.upstream(router, ingress) != came_from:
            continue  # another router forwards this origin's traffic to `router`
        hops.add(hop)
    return [links[hop] for hop in sorted(hops) if hop in links and not links[hop].gone]


def local_ok(mesh: Mesh, meta: Meta | None) -> bool:
    """May a multicast copy from another router be delivered here? Only if it came the way the
    ingress router's canonical path to this router goes (otherwise it is a duplicate)."""
    ingress, came_from, _ = _origin(meta)
    return ingress is None or mesh.edge or mesh.routes.upstream(mesh.me, ingress) == came_from


def looped(mesh: Mesh, meta: Meta) -> bool:
    """The trace shows a loop: this router is in it, or it is longer than radius + 1 (an edge
    router keeps no routes: it only takes what its uplink sends and never sends it back)."""
    if mesh.edge:
        return False
    return mesh.me in meta.trace or len(meta.trace) > mesh.routes.radius + 1
